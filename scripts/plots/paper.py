"""The paper's tables and figures beside ours: Table 4 (at paper scale from its equations, and
measured at ours), Figure 2 (tokens per expert), Figure 4 (throughput per step), Figure 5 (MACT's
chunk grid). The paper's numbers come from experiments/data/."""
import math
import os

from . import records as R
from . import style as S
from .generic import chunk_grid


def paper_methods():
    """Table 4's rows by model and method (1_full_recompute, 2_fixed_chunks_8, 3_mact_bins_1_2_4_8)."""
    return {(r["model"], r["method"]): r for r in R.read_csv("table4_memory_gb.csv")}


def paper_tgs():
    """Figure 4's tokens per GPU per second by (model, method number)."""
    return {(r["model"], r["method"][0]): float(r["avg_tokens_per_gpu_per_s"])
            for r in R.read_csv("figure4_tgs.csv") if r["avg_tokens_per_gpu_per_s"]}


def claims():
    """The paper's headline claims, derived from its own Table 4 and Figure 4."""
    t4, tgs = paper_methods(), paper_tgs()
    act = lambda model, m: float(t4[(model, m)]["activation_gb"])
    return {
        "full_total_I": float(t4[("I", "1_full_recompute")]["total_gb"]),
        "full_trains_I": t4[("I", "1_full_recompute")]["trains"] != "no_oom",
        "act_fixed8_vs_full": act("I", "2_fixed_chunks_8") / act("I", "1_full_recompute") - 1,
        "act_mact_vs_full": act("I", "3_mact_bins_1_2_4_8") / act("I", "1_full_recompute") - 1,
        "tgs_mact_vs_fixed8_I": tgs[("I", "3")] / tgs[("I", "2")] - 1,
        "tgs_mact_vs_full_II": tgs[("II", "3")] / tgs[("II", "1")] - 1,
        "tgs_fixed8_vs_full_II": tgs[("II", "2")] / tgs[("II", "1")] - 1,
    }


def _method_key(r):
    for key, how in (("1_full_recompute", R.BASELINE), ("2_fixed_chunks_8", R.FIXED8), ("3_mact_bins_1_2_4_8", R.MACT)):
        if R.matches(r, **how):
            return key
    return None


def table4_modeled(pred_path, out_dir):
    preds = R.load(pred_path, required=("experiment", "point", "strategy", "static_gb"))
    paper = paper_methods()
    model_of = {"model.layers=16": "I", "model.layers=8": "II"}
    rows = []
    for p in preds:
        method = _method_key(p)
        if method is None or p["point"] not in model_of:
            continue
        ref = paper[(model_of[p["point"]], method)]
        cells = []
        for ours, theirs in ((p["static_gb"], ref["static_gb"]), (p["activation_gb"], ref["activation_gb"]),
                             (p["total_gb"], ref["total_gb"])):
            cells += [f"{ours:.1f}", theirs, R.pct(ours, float(theirs))]
        rows.append([f"Model {model_of[p['point']]}", R.method_name(p), *cells, p["chunks"],
                     "yes" if p["fits"] else "no (OOM)", "no (OOM)" if ref["trains"] == "no_oom" else "yes"])
    header = ["model", "method", "static (ours)", "static (paper)", "err", "activation (ours)", "activation (paper)",
              "err", "total (ours)", "total (paper)", "err", "chunks", "fits (ours)", "trains (paper)"]
    static_ii = next((p["static_gb"] for p in preds if p["point"] == "model.layers=8" and _method_key(p)), None)
    notes = [f"GB per device. Ours: `memfine predict --json experiments/paper_table4.yaml` ({os.path.relpath(pred_path)}).",
             "Assumptions (printed by predict, none tuned to the paper): " + preds[0].get("assumptions", ""),
             f"The paper's Model II static ({paper[('II', '1_full_recompute')]['static_gb']} GB) cannot come from p = 4 "
             "with 8 layers (2 MoE layers per stage, half of Model I's 4)"
             + (f"; its equations give {static_ii:.1f} GB" if static_ii else "") +
             ". The paper's parallel sizes (t p d c = 4 on 32 GPUs) do not multiply out either.",
             "The paper reports MACT choosing 2 chunks for Model II although full recomputation fits there "
             f"({paper[('II', '1_full_recompute')]['total_gb']} < 64 GB); Eq. 9 gives 1 in that case, which is what we print."]
    return S.write_table(out_dir, "table4_modeled", "Table 4 at paper scale: the paper's memory model beside its numbers",
                         header, rows, notes)


def table4_measured(path, out_dir, stem="table4_measured", title="Table 4 at our scale, measured"):
    recs = R.load(path)
    c = claims()
    rows = []
    # The paper's claims beside the rows they compare to: its Model I is where full recomputation
    # runs out of memory (activation claims), its Model II where it fits (the throughput claim).
    claim_of = {(R.FIXED8["chunks"], "oom"): f"{100 * c['act_fixed8_vs_full']:+.2f}% act. (Model I)",
                ("mact", "oom"): f"{100 * c['act_mact_vs_full']:+.2f}% act. (Model I)",
                ("mact", "ok"): f"{100 * c['tgs_mact_vs_full_II']:+.2f}% TGS (Model II)"}
    full_ok = R.select(recs, role="baseline", status="ok")
    ref_act = max(R.activation(r) for r in full_ok) if full_ok else None
    for point, group in sorted(R.by_point(recs).items()):
        full = R.first(group, role="baseline")
        ref_ms = R.median_ms(full) if full and full["status"] == "ok" else None
        budget = group[0].get("budget_bytes")
        for r in group:
            act = R.activation(r)
            static = r.get("static_bytes") or 0
            fits = "yes" if r["status"] == "ok" else ("OOM" if r["status"] == "oom" else "error")
            act_s = f"{act / R.MIB:.1f}" + (" (before OOM)" if r["status"] == "oom" and act else "") if act else "-"
            red = R.pct(act, ref_act) if act and ref_act and r["status"] == "ok" else "-"
            ratio = f"{ref_ms / R.median_ms(r):.3f}" if ref_ms and r["status"] == "ok" and R.median_ms(r) else "-"
            which = "mact" if R.matches(r, **R.MACT) else R.params_of(r).get("chunks") if R.matches(r, **R.FIXED8) else None
            rows.append([point.replace("memory.budget=", "budget "), R.method_name(r), f"{static / R.MIB:.1f}", act_s,
                         f"{(static + (act or 0)) / R.MIB:.1f}" if act else "-",
                         f"{budget / R.MIB:.0f}" if budget else "none", fits, red, ratio,
                         claim_of.get((which, full["status"] if full else "oom"), "")])
    header = ["point", "method", "static MiB", "activation MiB", "total MiB", "budget MiB", "fits", "activation vs full",
              "throughput vs full", "paper's claim"]
    notes = ["Measured: activation = step peak - bytes in use at the step's start, max over timed steps; throughput = "
             "median step time of full recomputation / the method's, strategies interleaved in one run.",
             "Activation against full recomputation's need, measured at the budget where it fits (the workload is the same). "
             "Where full recomputation runs out of memory (the paper's Model I) there is no throughput ratio at that budget; "
             "the larger budget (Model II) gives it.",
             R.source_line(path, recs), "Config: " + R.config_line(recs[0], skip=("memory.budget",))]
    return S.write_table(out_dir, stem, title, header, rows, notes)


def _p99(c):
    return sorted(c)[min(len(c) - 1, int(math.ceil(0.99 * len(c))) - 1)]


def figure2(path, out_dir, stem="figure2_received_tokens"):
    recs = R.load(path)
    rec = next(r for r in recs if r.get("expert_tokens"))
    counts = rec["expert_tokens"]
    layers, cols = len(counts), 4
    rows_n = math.ceil(layers / cols)
    fig, axes = S.figure(rows_n + 1, cols, figsize=(12, 2.2 * (rows_n + 1)), squeeze=False)
    for l, c in enumerate(counts):
        ax = axes[l // cols][l % cols]
        ax.bar(range(len(c)), c, width=1.0, color="tab:blue")
        ax.axhline(_p99(c), color="tab:red", lw=1, ls="--", label=f"p99 {_p99(c)}")
        ax.set_title(f"our layer {l}", fontsize=8)
        ax.tick_params(labelsize=6)
        ax.legend(fontsize=6, loc="upper right")
        if l % cols == 0:
            ax.set_ylabel("tokens received", fontsize=7)
        ax.set_xlabel("expert id", fontsize=7)
    for k in range(layers, rows_n * cols):
        axes[k // cols][k % cols].axis("off")
    paper = R.read_csv("figure2_received_tokens.csv")
    gs = axes[rows_n][0].get_gridspec()
    for ax in axes[rows_n]:
        ax.remove()
    ax = fig.add_subplot(gs[rows_n, :])
    ours_p99 = [_p99(c) / (sum(c) / len(c)) for c in counts]
    ours_max = [max(c) / (sum(c) / len(c)) for c in counts]
    balanced_paper = 4096.0  # s x top-k x ep / experts: 4096 x 8 x 32 / 256
    # With few experts a layer's p99 is nearly its max: max as large hollow squares underneath,
    # p99 as small filled dots on top, so that neither hides the other.
    ax.plot(range(len(ours_max)), ours_max, "s-", ms=9, mfc="none", lw=3, alpha=0.6, color="tab:orange",
            label="ours: max / mean")
    ax.plot(range(len(ours_p99)), ours_p99, "o-", ms=4, lw=1, color="tab:blue", label="ours: p99 / mean")
    ax.plot(range(len(paper)), [float(r["p99_tokens_per_expert"]) / balanced_paper for r in paper], "o--",
            label=f"paper (its layers {paper[0]['layer']}-{paper[-1]['layer']}): p99 / balanced")
    ax.plot(range(len(paper)), [float(r["max_tokens_per_expert"]) / balanced_paper for r in paper], "s--",
            label="paper: max / balanced")
    cap = rec["config"]["model"]["experts"] / rec["config"]["model"]["topk"]  # every token once: experts / topk shares
    ax.set_xlabel(f"MoE layer (ours from 0, the paper's from {paper[0]['layer']}); an expert gets each token once: "
                  f"at most experts / topk = {cap:g}x, the paper's 32x", fontsize=8)
    ax.set_ylabel("x balanced share")
    ax.legend(fontsize=7, ncol=2)
    fig.suptitle(f"Figure 2: tokens received per expert per layer (step {rec.get('expert_tokens_step', 0)}), "
                 f"{R.device_label(recs)}")
    return S.save(fig, out_dir, stem, R.source_line(path, recs) + " | " + R.config_line(rec))


def figure4(path, out_dir, stem="figure4_throughput", what=""):
    recs = R.load(path)
    groups = sorted(R.by_point(recs).items())
    fig, axes = S.figure(2, len(groups), figsize=(6 * len(groups), 6.2), squeeze=False, sharey="row",
                         gridspec_kw={"height_ratios": [4, 1]})
    tgs = paper_tgs()
    number = lambda r: R.method_name(r)[:1]
    for i, (point, group) in enumerate(groups):
        ax, box = axes[0][i], axes[1][i]
        # The comparison under the plot: each method's median against full recomputation (or,
        # where it ran out of memory, against the fixed chunks), ours beside the paper's same case.
        full = R.first(group, role="baseline")
        fits = bool(full) and full["status"] == "ok"
        model, ref_name = ("II", "1") if fits else ("I", "2")
        ref = full if fits else R.first(group, **R.FIXED8)
        lines = [f"against method {ref_name}, ours / the paper's (its Model {model}):"]
        for r in group:
            if not number(r).isdigit() or number(r) == ref_name or not ref or ref["status"] != "ok" or r["status"] != "ok":
                continue
            ours = R.median_ms(ref) / R.median_ms(r) - 1
            theirs = tgs[(model, number(r))] / tgs[(model, ref_name)] - 1 if (model, ref_name) in tgs and (model, number(r)) in tgs else None
            lines.append(f"method {number(r)} ({R.method_name(r)[3:]}): {100 * ours:+.1f}% / "
                         + (f"{100 * theirs:+.2f}%" if theirs is not None else "-"))
        box.axis("off")
        box.text(0.0, 1.0, "\n".join(lines), transform=box.transAxes, fontsize=8, va="top")
        for r in group:
            name = R.method_name(r)
            m = r["config"]["model"]
            tokens = m["seq"] * m.get("micro_batch", 1)
            times = r.get("step_ms_all") or []
            warm = r["config"]["warmup"]
            if r["status"] == "ok":
                ax.plot(range(warm, warm + len(times)), [tokens / (t / 1e3) for t in times], "o-", ms=3,
                        color=S.color_of(r), label=f"{name}: median {tokens / (R.median_ms(r) / 1e3):.0f}")
            else:  # out of memory: marked where it happened, not drawn as zero
                step = warm + len(times)
                ax.axvline(step, color=S.color_of(r), ls=":", lw=1.5, label=f"{name}: out of memory at step {step}")
        ax.set_title(point.replace("memory.budget=", "budget "))
        ax.set_xlabel("step")
        ax.set_ylabel("tokens per device per second")
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.legend(fontsize=7)
    paper = R.read_csv("figure4_tgs.csv")
    claims_text = "; ".join(f"Model {r['model']} method {r['method'][0]}: {r['avg_tokens_per_gpu_per_s'] or 'OOM'}" for r in paper)
    fig.suptitle(f"Figure 4: throughput per step{what}, {R.device_label(recs)}", fontsize=10)
    return S.save(fig, out_dir, stem,
                  R.source_line(path, recs) + " | paper (tokens per GPU per s, 32 GPUs): " + claims_text)


def figure5(path, out_dir, stem="figure5_mact_chunks", what="ours", how=None):
    """MACT's chunk grid beside the paper's; `how` selects the MACT record (default: the paper's
    MACT), trace_replay draws the grid over routing learned in real training."""
    recs = R.load(path)
    rec = next((r for r in R.select(recs, status="ok", **(how or R.MACT))
                if isinstance(r.get("chunks"), list) and r["chunks"] and isinstance(r["chunks"][0], list)), None)
    if rec is None:
        raise R.ResultsError(f"{path}: no MACT record with per-step chunks")
    grid = [list(col) for col in zip(*rec["chunks"])]  # [layer][step]
    paper = R.read_csv("figure5_mact_chunks.csv")
    pgrid = [[int(r[f"it{i}"]) for i in range(1, 21)] for r in paper]
    fig, axes = S.figure(1, 2, figsize=(12, 4.8))
    steps = [i + 1 for i in rec.get("chunk_steps") or range(len(grid[0]))]  # from 1, as the paper counts
    ours_im, ours_v = chunk_grid(axes[0], grid, steps, f"{what} ({rec['point'].replace('memory.budget=', 'budget ')})")
    paper_im, paper_v = chunk_grid(axes[1], pgrid, list(range(1, 21)), "paper (Model I)", layer0=int(paper[0]["layer"]))
    axes[0].set_ylabel("our layer")
    axes[1].set_ylabel("the paper's layer (its MoE layers)")
    for ax, im, values in ((axes[0], ours_im, ours_v), (axes[1], paper_im, paper_v)):
        ax.set_xlabel("iteration (from 1)")
        cb = fig.colorbar(im, ax=ax, ticks=range(len(values)))
        cb.ax.set_yticklabels([str(v) for v in values])
        cb.set_label("chunks (only the counts that occur)", fontsize=7)
    fig.suptitle(f"Figure 5: chunk count MACT chose per layer and step, {R.device_label(recs)}", fontsize=10)
    return S.save(fig, out_dir, stem, R.source_line(path, recs) + " | " + R.config_line(rec), tight=False)
