"""The paper's tables and figures beside ours: Table 4 (at paper scale from its equations, and
measured at ours), Figure 2 (tokens per expert), Figure 4 (throughput per step), Figure 5 (MACT's
chunk grid). The paper's numbers come from experiments/data/."""
import math
import os
import re
import statistics

from . import names as N
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


def figure2(path, out_dir, stem="figure2_received_tokens", what=""):
    """Tokens each expert received per layer (ours, CPU) above; below, ours and the paper's (GPU) max and
    p99 over the balanced share, each in its own panel (their layers are not the same layers)."""
    recs = R.load(path)
    rec = next(r for r in recs if r.get("expert_tokens"))
    counts = rec["expert_tokens"]
    m = rec["config"]["model"]
    layers, cols = len(counts), 4
    rows_n = math.ceil(layers / cols)
    fig, axes = S.figure(rows_n + 1, cols, figsize=(7.5, 1.45 * rows_n + 2.9), squeeze=False,
                         gridspec_kw={"height_ratios": [1] * rows_n + [1.6]})
    cap = sum(counts[0]) / m["topk"]  # an expert gets each token at most once
    hist = [axes[l // cols][l % cols] for l in range(layers)]
    for l, c in enumerate(counts):
        ax = hist[l]
        ax.bar(range(len(c)), c, width=1.0, color="0.45", lw=0)
        ax.axhline(_p99(c), color="black", lw=1, ls="--")
        ax.axhline(cap, color="0.5", lw=0.8, ls=":")
        ax.set_title(f"our layer {l}: p99 {_p99(c)}", pad=2)
        ax.set_ylim(0, cap * 1.08)
        if l % cols == 0:
            ax.set_ylabel("tokens")
        else:
            ax.tick_params(labelleft=False)
        if l + cols >= layers:
            ax.set_xlabel("expert id")
        else:
            ax.tick_params(labelbottom=False)
    for k in range(layers, rows_n * cols):
        axes[k // cols][k % cols].axis("off")
    paper = R.read_csv("figure2_received_tokens.csv")
    gs = axes[rows_n][0].get_gridspec()
    for ax in axes[rows_n]:
        ax.remove()
    ours_ax, paper_ax = fig.add_subplot(gs[rows_n, :2]), fig.add_subplot(gs[rows_n, 2:])
    ours_p99 = [_p99(c) / (sum(c) / len(c)) for c in counts]
    ours_max = [max(c) / (sum(c) / len(c)) for c in counts]
    same = sum(abs(a - b) < 1e-9 for a, b in zip(ours_p99, ours_max))
    # Max as large hollow squares, p99 as small dots inside them: where they are equal both stay visible.
    # Our mean per expert is the balanced share (every assignment lands on some expert): the same
    # ratio as the paper's panel.
    ours_ax.plot(range(layers), ours_max, "s-", ms=8, mfc="white", color="black", lw=1.2, label="max / balanced")
    ours_ax.plot(range(layers), ours_p99, "o--", ms=3.5, color="0.45", lw=1, label="p99 / balanced"
                 + (f"\n(the max in {same} of {layers} layers:\n1% of {len(counts[0])} experts is"
                    f" {len(counts[0]) / 100:g})" if same else ""))
    ours_ax.axhline(m["experts"] / m["topk"], color="0.5", lw=0.8, ls=":")
    ours_ax.set_ylim(0, m["experts"] / m["topk"] * 1.7)  # room for the legend above the most an expert takes
    balanced_paper = 4096.0  # s x top-k x ep / experts: 4096 x 8 x 32 / 256
    first = int(paper[0]["layer"])
    players = [int(r["layer"]) for r in paper]
    paper_ax.plot(players, [float(r["max_tokens_per_expert"]) / balanced_paper for r in paper], "s-", ms=8, mfc="white",
                  color="black", lw=1.2, label="max / balanced")
    paper_ax.plot(players, [float(r["p99_tokens_per_expert"]) / balanced_paper for r in paper], "o--", ms=3.5,
                  color="0.45", lw=1, label="p99 / balanced")
    paper_ax.set_ylim(bottom=0)
    S.dress(ours_ax, "our MoE layer", "× balanced share", f"ours (CPU): {N.workload(rec['config'])}", legend=False)
    S.dress(paper_ax, "the paper's MoE layer", "× balanced share", f"the paper (GPU), its layers {first}-{players[-1]}",
            legend=False)
    for ax in (ours_ax, paper_ax):
        ax.legend(loc="upper left", frameon=False)
        ax.set_ylim(top=ax.get_ylim()[1] * 1.35)  # room for the legend above the lines
        ax.xaxis.get_major_locator().set_params(integer=True)
    S.suptitle(fig, f"Figure 2{what}: tokens each expert received per layer (step {rec.get('expert_tokens_step', 0)}), "
                    f"{R.device_label(recs)}\n{N.workload(rec['config'])}; dashed: p99; dotted: the most an expert can "
                    f"receive (each token once: {cap:.0f} tokens, experts / top-k = {m['experts'] / m['topk']:g}x)")
    return S.save(fig, out_dir, stem, R.source_line(path, recs) + " | " + R.config_line(rec))


def _iqr(values):
    """The middle half of per-step values, as text ('' with fewer than 4)."""
    if len(values) < 4:
        return ""
    q = statistics.quantiles(values, n=4)
    return f", IQR {q[0]:.0f}-{q[2]:.0f}"


def figure4(path, out_dir, stem="figure4_throughput", what=""):
    """Tokens per second at every timed step, a panel per budget; under each panel its legend (median and
    interquartile range over the steps) and our medians' ratios, with the paper's GPU ratios apart."""
    recs = R.load(path)
    budget = lambda kv: R.point_values(kv[0]).get("memory.budget")
    groups = sorted(R.by_point(recs).items(), key=lambda kv: (not isinstance(budget(kv), float), budget(kv) or 0, kv[0]))
    fig, axes = S.figure(2, len(groups), figsize=(4.3 * len(groups) + 0.6, 6.0), squeeze=False, sharey="row",
                         gridspec_kw={"height_ratios": [3, 1.2]})
    tgs = paper_tgs()
    number = lambda r: R.method_name(r)[:1]
    top = 0.0
    for i, (point, group) in enumerate(groups):
        ax, box = axes[0][i], axes[1][i]
        # The comparison under the plot: each method's median against full recomputation (or,
        # where it ran out of memory, against the fixed chunks), ours beside the paper's same case.
        full = R.first(group, role="baseline")
        fits = bool(full) and full["status"] == "ok"
        model, ref_name = ("II", "1") if fits else ("I", "2")
        ref = full if fits else R.first(group, **R.FIXED8)
        ours, theirs = [], []
        for r in group:
            if not number(r).isdigit() or number(r) == ref_name or not ref or ref["status"] != "ok" or r["status"] != "ok":
                continue
            ours.append(f"method {number(r)}: {100 * (R.median_ms(ref) / R.median_ms(r) - 1):+.1f}%")
            if (model, ref_name) in tgs and (model, number(r)) in tgs:
                theirs.append(f"method {number(r)}: {100 * (tgs[(model, number(r))] / tgs[(model, ref_name)] - 1):+.2f}%")
        box.axis("off")
        handles = []
        for k, r in enumerate(group):
            name = R.method_name(r)
            m = r["config"]["model"]
            tokens = m["seq"] * m.get("micro_batch", 1)
            times = r.get("step_ms_all") or []
            warm = r["config"]["warmup"]
            if r["status"] == "ok":
                tps = [tokens / (t / 1e3) for t in times]
                top = max([top] + tps)
                line, = ax.plot(range(warm, warm + len(times)), tps, **S.look(r, ms=3, lw=1.1))
                line.set_label(f"{name}: median {tokens / (R.median_ms(r) / 1e3):.0f}{_iqr(tps)}")
            else:  # out of memory: marked where it happened, not drawn as zero
                step = warm + len(times)
                line = ax.axvline(step, color=S.color_of(r), ls=":", lw=1.5, label=f"{name}: out of memory at step {step}")
            handles.append(line)
        title = (f"against method {ref_name}, medians: ours (this CPU) " + ", ".join(ours) + "\n"
                 + (f"the paper (GPU, its Model {model}): " + ", ".join(theirs) + "\n" if theirs else "") if ours else "")
        box.legend(handles, [h.get_label() for h in handles], loc="upper left", frameon=False, alignment="left",
                   title=title + "tokens per second over the timed steps (median, interquartile range):")
        # The budget as the point writes it, a space before its unit: 'budget 150 MiB'.
        ax.set_title(re.sub(r"(\d)([KMGT]i?B)\b", r"\1 \2", point.replace("memory.budget=", "budget ")))
        ax.set_xlabel("step")
        if i == 0:
            ax.set_ylabel("tokens per second (this CPU)")
        ax.xaxis.get_major_locator().set_params(integer=True)
    axes[0][0].set_ylim(0, top * 1.05 or 1.0)
    paper = R.read_csv("figure4_tgs.csv")
    claims_text = "; ".join(f"Model {r['model']} method {r['method'][0]}: {r['avg_tokens_per_gpu_per_s'] or 'OOM'}" for r in paper)
    cfg = recs[0]["config"]
    S.suptitle(fig, f"Figure 4{what}: throughput per step, {R.device_label(recs)}\n{N.workload(cfg)}, "
                    f"{cfg['model']['layers']} layers; methods: 1 full recomputation, 2 MemFine 8 chunks, 3 MemFine + MACT")
    return S.save(fig, out_dir, stem,
                  R.source_line(path, recs) + " | the paper's GPU numbers (tokens per GPU per s, 32 GPUs; not plotted): "
                  + claims_text)


def figure5(path, out_dir, stem="figure5_mact_chunks", what="ours", how=None, title=None):
    """MACT's chunk grid (ours, CPU) above the paper's (GPU), one colour per chunk count; `how` selects the
    MACT record (default: the paper's MACT), trace_replay draws the grid over routing learned in real training."""
    recs = R.load(path)
    rec = next((r for r in R.select(recs, status="ok", **(how or R.MACT))
                if isinstance(r.get("chunks"), list) and r["chunks"] and isinstance(r["chunks"][0], list)), None)
    if rec is None:
        raise R.ResultsError(f"{path}: no MACT record with per-step chunks")
    grid = [list(col) for col in zip(*rec["chunks"])]  # [layer][step]
    paper = R.read_csv("figure5_mact_chunks.csv")
    pgrid = [[int(r[f"it{i}"]) for i in range(1, 21)] for r in paper]
    rows = [max(3.0, len(grid)), max(3.0, len(pgrid))]
    fig, axes = S.figure(2, 1, figsize=(7.5, 1.9 + 0.2 * sum(rows)), gridspec_kw={"height_ratios": rows})
    steps = [i + 1 for i in rec.get("chunk_steps") or range(len(grid[0]))]  # from 1, as the paper counts
    every = [v for row in grid + pgrid for v in row]
    point = R.point_title(rec["point"]) if rec["point"] != "base" else ""
    budget = (rec["config"].get("memory") or {}).get("budget")
    where = ", ".join(t for t in (point or (f"budget {budget / R.MIB:.0f} MiB" if budget else ""),
                                  N.workload(rec["config"])) if t)
    im, counts = chunk_grid(axes[0], grid, steps, f"{what} (CPU): {where}", values=every)
    chunk_grid(axes[1], pgrid, list(range(1, 21)), "the paper (GPU, Model I)", layer0=int(paper[0]["layer"]), values=every)
    axes[0].set_ylabel("our\nMoE layer")
    axes[1].set_ylabel("the paper's\nMoE layer")
    for ax in axes:
        ax.set_xlabel("iteration (from 1)")
    S.chunk_colorbar(fig, im, counts, list(axes))
    S.suptitle(fig, (title or "Figure 5: chunk count MACT chose per layer and iteration")
               + f"\nours on {R.device_label(recs)} (top), the paper's GPU run (bottom; not the same layers)")
    return S.save(fig, out_dir, stem, R.source_line(path, recs) + " | " + R.config_line(rec), tight=False)
