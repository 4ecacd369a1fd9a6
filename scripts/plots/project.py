"""memfine project at cluster scale: its validation against published training runs (their checks:
scripts/plots/validation.py) and other published figures (the paper's Table 4 memory, Daly's
checkpoint vectors, Llama 3's effective training time), goodput against cluster size for
DeepSeek-V3 by strategy, and the projection beside `memfine run` on this machine, from the JSON
lines scripts/project_cases.py and scripts/project_here.py write."""
import json
import os
import statistics

import yaml

from . import held_out as H
from . import records as R
from . import sources as SRC
from . import style as S
from . import validation as V
from .tables import markdown
from .paper import _method_key, paper_methods

def family(r):
    """The strategy's registered name (a projection line's "name"; older lines wrote it as "strategy")."""
    return r.get("name") or R.parse_label(r["strategy"])[0]


_load = V.load


def _commit(rows):
    commits = sorted({r.get("git_commit", "?") for r in rows})
    return ", ".join(R.commit_text(c) for c in commits)


def other_rows(model_dir):
    """The projection's other checks: the paper's Table 4 memory, Daly's vectors, Llama 3's ETTR."""
    rows = []
    table4 = os.path.join(model_dir, "paper_table4.jsonl")
    if os.path.exists(table4):
        paper = paper_methods()
        for p in R.load(table4, required=("experiment", "point", "strategy", "static_gb")):
            method = _method_key(p)
            if method is None or p["point"] != "model.layers=16":
                continue
            theirs = float(paper[("I", method)]["total_gb"])
            rows.append(["the paper's Table 4, Model I", f"memory per device, {R.method_name(p)} (GB)",
                         f"{p['total_gb']:.1f}", f"{theirs:g}", R.pct(p["total_gb"], theirs),
                         "`memfine predict experiments/paper_table4.yaml`"])
    path = os.path.join(model_dir, "project_checkpoint.jsonl")
    for c in _load(path) if os.path.exists(path) else []:
        q, pub = c["quantity"], c["published"]
        ours = c[q]
        if pub.startswith(">"):
            verdict = "holds" if ours > float(pub[1:]) else "does not hold"
            rows.append([c["case"], q.replace("_", " "), f"{ours:.3f}", pub, verdict, c["source"]])
        else:
            rows.append([c["case"], q.replace("_", " "), f"{ours:.4g}", pub, R.pct(ours, float(pub)), c["source"]])
    return rows


def validation(src, out_dir):
    """paper_figures/project_validation.{md,csv}: every published run's three checks (fit, peak,
    throughput) and the learned-routing pairs; project_checks.{md,csv}: the other figures."""
    model_dir = os.path.dirname(src)
    runs = V.runs(model_dir)
    s = V.summary(runs)
    made = _load(src)
    notes = [f"Projected by `memfine project` ({_commit(made)}; `scripts/python scripts/project_cases.py`); each run's "
             "layout, framework, recomputation, dispatcher and published figures are in its file of "
             "experiments/project/validation/ with its source. Every rate is a kernel-level figure of "
             "experiments/project/hardware.yaml (kernel benchmarks, never these runs; the rule that picks a link's "
             "rate is written there) but two: how much of an all-to-all Megatron's overlap hides is a profiled "
             "run's share (framework.ep_overlap_hidden), and every run of that study is marked calibration and not "
             "counted; and one calibrated constant, named as one (experiments/project/errors.yaml "
             "layer_pass_s: a fixed time for each layer's pass of a micro-batch, the median of what a fixed set of "
             "counted runs took beyond today's projection without it per pass, judged leave-one-out there and on "
             "runs that enter after it); "
             "the learned runs' routing comes from this suite's own learned router (scripts/trace_sigma.py) where the run "
             "trained its router from scratch, and from a pretrained router's published routing "
             "(scripts/routing_overload.py) where it fine-tuned a loaded one (its file says which). A run whose "
             "framework's own release notes name a regression for its configuration (its file's "
             "published.known_issue) is shown with its error and not counted; the verdict gives the figures with "
             "it counted too.",
             "Errors: projected over published, less 1, in speed (a step time's error is the speed's). The 'why' "
             "column reads the projection's own step parts: a hypothesis, not a measurement; after \"the source "
             "measured\" it quotes what the run's own source profiled or compared (its file's published.evidence), "
             "never an input to the projection.",
             "'At its first projection': the run's throughput error as the projection first committed for it "
             "said it, before any change made after the run entered the set (results/model/project_first.jsonl, "
             "`scripts/python scripts/first_projections.py`, from the results' git history), against the same "
             "published figure."] + V.verdict_lines(s) + SRC.lines(runs, names=True) + ["", "Fit:", ""] + V.fit_matrix(s)
    paths = S.write_table(out_dir, "project_validation", "memfine project against published training runs",
                          V.header(), V.table_rows(runs), notes, formats=("md", "csv"))
    made += _load(os.path.join(model_dir, "project_checkpoint.jsonl"))
    paths += S.write_table(out_dir, "project_checks", "memfine project and memfine checkpoint: other published figures",
                           ["case", "quantity", "projected", "published", "error", "source"], other_rows(model_dir),
                           [f"Projected by `memfine predict` / `memfine checkpoint` ({_commit(made)})."],
                           formats=("md", "csv"))
    return paths


def _scaling(src):
    rows = _load(src)
    sizes = sorted({r["gpus"] for r in rows})
    by = {}
    for r in rows:
        by.setdefault(family(r), {})[r["gpus"]] = r
    return rows, sizes, by


def _alike(by, sizes, s):
    """' (= full_recompute)', ' (= full_recompute at 256-16384 GPUs)' or ' (within 0.5% of no_recompute)':
    where strategy s's goodput coincides with an earlier one's (drawn side by side, said in its legend)."""
    g = lambda name, n: (by[name].get(n) or {}).get("goodput", {}).get("tokens_per_s_gpu") if (by[name].get(n) or {}).get(
        "fits") else None
    for o in sorted(by):
        if o >= s:
            break
        both = [n for n in sizes if g(s, n) is not None and g(o, n) is not None]
        if not both:
            continue
        equal = [n for n in both if g(s, n) == g(o, n)]
        if len(equal) == len(both):
            return f" (= {o})"
        if len(equal) > 1:
            return f" (= {o} at {equal[0]}-{equal[-1]} GPUs)"
        close = [n for n in both if abs(g(s, n) - g(o, n)) <= 0.005 * g(o, n)]
        if len(close) == len(both):
            return f" (within 0.5% of {o})"
        if len(close) > 1:
            return f" (within 0.5% of {o} at {close[0]}-{close[-1]} GPUs)"
    return ""


def _goodput_figure(rows, sizes, by):
    """Left: goodput per GPU by strategy (dotted: failure-free), strategies that coincide drawn a little
    apart; right: the effective training time ratio (from 0) and the job's mean time to failure."""
    fig = S.plt.figure(figsize=(9, 4.8), layout="constrained")
    S._taken.clear()
    gs = fig.add_gridspec(3, 2, width_ratios=[1.6, 1], height_ratios=[1, 1, 0.001])
    ax, a_ettr, a_mttf = fig.add_subplot(gs[:2, 0]), fig.add_subplot(gs[0, 1]), fig.add_subplot(gs[1, 1])
    lax = fig.add_subplot(gs[2, :])
    lax.axis("off")
    names = [s for s in sorted(by) if any(by[s].get(n, {}).get("fits") for n in sizes)]
    for k, s in enumerate(names):
        per = by[s]
        xs = [n for n in sizes if per.get(n, {}).get("fits")]
        label = S.label_words(s) + (" (drops tokens)" if s == "capacity" else "") + _alike(by, sizes, s)
        shift = 2 ** S.dodge(k, len(names), 1.0, 0.05)  # a twentieth of an octave apart
        lk = S.look(s, ms=5)
        lk["ls"] = "-"
        ax.plot([n * shift for n in xs], [per[n]["goodput"]["tokens_per_s_gpu"] for n in xs], label=label, **lk)
        ax.plot([n * shift for n in xs], [per[n]["tokens_per_s_gpu"] for n in xs], color=lk["color"], ls=":", lw=1.1)
    ax.set_xscale("log", base=2)
    ax.set_ylim(bottom=0)
    S.dress(ax, "GPUs (H100 80GB)", "tokens/s per GPU", "Projected goodput (solid) and failure-free speed (dotted)",
            legend=False)
    S.legend(lax, *ax.get_legend_handles_labels(), ncol=2)
    ettr = {n: next(r["goodput"]["ettr"] for r in rows if r["gpus"] == n and r.get("fits")) for n in sizes
            if any(r["gpus"] == n and r.get("fits") for r in rows)}
    mttf = {n: next(r["goodput"]["mttf_h"] for r in rows if r["gpus"] == n and r.get("fits")) for n in ettr}
    a_ettr.plot(list(ettr), list(ettr.values()), marker="o", ms=3, color="black")
    a_ettr.set_ylim(0, 1.05)
    for n in (min(ettr), max(ettr)):
        a_ettr.annotate(f"{ettr[n]:.3f}", (n, ettr[n]), xytext=(0, -11), textcoords="offset points", ha="center",
                        fontsize=S.SMALL)
    a_mttf.plot(list(mttf), list(mttf.values()), marker="s", ms=3, color="0.35", ls="--")
    a_mttf.set_yscale("log")
    for a in (a_ettr, a_mttf):
        a.set_xscale("log", base=2)
    S.dress(a_ettr, "", "ETTR", "What failures leave\n(Kokolis et al., optimal interval)", legend=False)
    S.dress(a_mttf, "GPUs", "job MTTF (h)", "", legend=False)
    a_ettr.tick_params(labelbottom=False)
    S.suptitle(fig, "DeepSeek-V3 at cluster scale, projected by memfine project (not measured): best layout per strategy")
    return fig


def _how_sure(r):
    """What the caption says of the speeds' calibration and range (experiments/project/errors.yaml), if
    the projection carried them."""
    span = r.get("tokens_per_s_gpu_range")
    if not span:
        return ""
    calibrated = r.get("step_parts_s", {}).get("calibration", 0) > 0
    return ((" Speeds include the validation's calibrated constant (experiments/project/errors.yaml)."
             if calibrated else "")
            + f" Each speed's 80% range, not drawn: x{span[0] / r['tokens_per_s_gpu']:.2f} to "
              f"x{span[1] / r['tokens_per_s_gpu']:.2f} of it.")


def scaling(src, out_dir):
    """paper_figures/project_goodput.{png,pdf} and its table: DeepSeek-V3's goodput per GPU against
    cluster size, the best layout of each strategy at each size."""
    rows, sizes, by = _scaling(src)
    fig = _goodput_figure(rows, sizes, by)
    first = next(r for r in rows if r.get("fits"))
    caption = (f"memfine project {first['project']} --gpus N (global batch scaled with N; "
               f"experiments/project_deepseek_v3.yaml, its search space and zipf routing), {_commit(rows)}. "
               "Goodput = ETTR x tokens/s; ETTR from Llama 3's failure rate per node of 8 GPUs, a 10 min restart and the "
               "checkpoint at 5 GB/s per node. Capacity capping drops assignments: another model."
               + _how_sure(first))
    paths = S.save(fig, out_dir, "project_goodput", caption)
    header = ["GPUs"] + [s for s in sorted(by)]
    trows = []
    for n in sizes:
        cells = [n]
        for s in sorted(by):
            r = by[s].get(n, {})
            if r.get("fits"):
                l = r["layout"]
                cells.append(f"{r['goodput']['tokens_per_s_gpu']:.0f} (TP{l['tp']} PP{l['pp']} EP{l['ep']}"
                             + (f", {r['chunks']} chunk{'s' if r['chunks'] != 1 else ''}" if s == "memfine" else "")
                             + ")")
            else:
                cells.append("no layout fits")
        trows.append(cells)
    paths += S.write_table(out_dir, "project_goodput_table", "DeepSeek-V3 goodput per GPU by cluster size (best layout)",
                           header, trows, [caption], formats=("md", "csv"))
    return paths


def _seen_text(name, s):
    """One `seen` entry in words: its runs, which way they missed, their span and the range's hold."""
    lo, med, hi = s["error_pct"]
    way = ("too fast" if s["too_fast"] == s["runs"] else "too slow" if not s["too_fast"]
           else f"too fast on {s['too_fast']}")
    span = f"{lo:+.0f}%" if s["runs"] == 1 else f"{lo:+.0f}% to {hi:+.0f}% (median {med:+.0f}%)"
    return f"{name} ({s['runs']} run{'' if s['runs'] == 1 else 's'}, {way}, {span}; the range holds {s['held']})"


def seen_lines(runs):
    """What `memfine project` names beside an answer (errors.yaml `seen` and `seen_hardware`, as each
    run's record carries them): the model-and-framework pairs whose runs all missed one way at their
    first projection, and the two most run; then each GPU's; then each bin of micro-batches a step's
    (`seen_micro_batches`)."""
    seen, on, at = {}, {}, {}
    for r in runs:
        s = r["record"].get("validation_seen")
        if s and s.get("runs"):
            seen[(r["record"]["model"], r["framework"])] = s
        h = r["record"].get("validation_seen_hardware")
        if h and h.get("runs"):
            on[r["record"]["hardware"]] = h
        b = r["record"].get("validation_seen_micro_batches")
        if b and b.get("runs"):
            at[b["bin"]] = b

    def text(k):
        return _seen_text(f"{k[0]} under {k[1]}", seen[k])
    out = []
    if seen:
        one_way = sorted(k for k, s in seen.items() if s["runs"] >= 2 and s["too_fast"] in (0, s["runs"]))
        most = sorted(seen, key=lambda k: -seen[k]["runs"])[:2]
        out.append(f"- By model and framework (errors.yaml `seen`, which `memfine project` names beside an answer): "
                   f"{len(seen)} pairs have runs; those of two or more whose runs all missed one way at their first "
                   f"projection: {'; '.join(map(text, one_way)) or 'none'}; the two most run: "
                   f"{'; '.join(map(text, most))}.")
    if on:
        out.append("- By GPU (errors.yaml `seen_hardware`, named beside an answer on it): "
                   + "; ".join(_seen_text(h, on[h]) for h in sorted(on, key=lambda h: -on[h]["runs"])) + ".")
    if at:
        out.append("- By micro-batches a step on a rank (errors.yaml `seen_micro_batches`, named beside an answer "
                   "by its first row's): " + "; ".join(_seen_text(b, at[b]) for b in
                                                       sorted(at, key=lambda b: int(b.split("-")[0].rstrip("+"))))
                   + ".")
    return out


def graph_lines(runs):
    """The counted runs' errors by what their source says they captured in CUDA graphs
    (framework.cuda_graphs, priced since the projection's first lines of most of them): graphed in
    whole or part, not graphed, not stated."""
    groups = {}
    for r in filter(SRC.counted, runs):
        g = r["record"].get("cuda_graphs", "")
        kind = "not stated" if not g else "not graphed" if g == "none" else "graphed (whole or in part)"
        groups.setdefault(kind, []).append(r)
    if set(groups) <= {"not stated"}:
        return []

    def text(kind):
        rs = groups.get(kind, [])
        if not rs:
            return f"{kind}: none"
        first, now = [r["first_error"] for r in rs], [r["throughput"][3] for r in rs]
        return (f"{kind}: {len(rs)} runs, at their first projection median {statistics.median(first):+.1f}% "
                f"(too slow on {sum(e < 0 for e in first)}), today {statistics.median(now):+.1f}% "
                f"(too slow on {sum(e < 0 for e in now)})")
    return ["- By CUDA graphs (each file's framework.cuda_graphs, as its source states it; priced only "
            "since most of these runs' first projections; signed errors, projected over published speed): "
            + "; ".join(text(k) for k in ("graphed (whole or in part)", "not graphed", "not stated")) + "."]


# The matched A/Bs REPORT sets side by side: (what differs, the line's record key, how the case file
# writes it (a top-level key, or framework's), whether a value is the pair's base, the title).
AB_KINDS = (("CUDA graph", "cuda_graphs", ("framework", "cuda_graphs"), lambda v: v == "none",
             "framework.cuda_graphs, one not graphed), the graphed run's speed over the eager one's"),
            ("precision", "precision", (None, "precision"), lambda v: v != "mxfp8",
             "precision, one in MXFP8), the MXFP8 run's speed over the other's"))


def ab_lines(runs, root=R.ROOT):
    """Matched A/Bs of each AB_KINDS kind: two runs whose case files differ only in their name, their
    published figures and that one key, the base one and another; the other's speed over the base
    one's, measured and projected."""
    def speed(r):  # published, then projected tokens/s a GPU
        return SRC.published_speed(r), r["record"]["tokens_per_s_gpu"]
    out = []
    for kind, field, (section, key), is_base, title in AB_KINDS:
        alike = {}
        for r in runs:
            rec, path = r["record"], os.path.join(root, r["record"]["case_file"])
            value = rec.get(field)
            if not value or "throughput" not in r or not os.path.exists(path):
                continue
            with open(path) as f:
                case = {k: v for k, v in yaml.safe_load(f).items() if k not in ("name", "published")}
            where = case if section is None else case.get(section)
            if isinstance(where, dict):
                where.pop(key, None)
            alike.setdefault(json.dumps([case, rec["strategy"]], sort_keys=True), []).append((value, r))
        said = []
        for rows in alike.values():
            for _, base in (x for x in rows if is_base(x[0])):
                for value, other in (x for x in rows if not is_base(x[0])):
                    (m1, p1), (m0, p0) = speed(other), speed(base)
                    said.append(f"{other['case']} ({value}) over {base['case']}: {m1 / m0:.2f}x measured, "
                                f"{p1 / p0:.2f}x projected")
        if said:
            out.append(f"- Matched {kind} A/Bs (two case files alike but for their name, their published figures "
                       f"and their {title}: " + "; ".join(sorted(said)) + ".")
    return out


def report_lines(model_dir, here_src=None):
    """REPORT.md's section, decided by the numbers; `here_src`: project_here's projections, if any."""
    src = os.path.join(model_dir, "project_validation.jsonl")
    if not (os.path.exists(src) and os.path.exists(os.path.join(model_dir, "project_checkpoint.jsonl"))):
        return []
    runs = V.runs(model_dir)
    s = V.summary(runs)
    out = ["## Planning at cluster scale: `memfine project`", "",
           f"Against {s['runs']} published training runs (`project_validation.md`; each run's file in "
           "experiments/project/validation/ names its source):", ""]
    out += (V.verdict_lines(s, names=False) + SRC.lines(runs) + seen_lines(runs) + graph_lines(runs)
            + ab_lines(runs))
    e = s["entered"]
    if e["runs"]:
        out += ["", f"The held-out goals on the {len(e['runs'])} runs that entered after the range and the "
                "calibration were set (neither was fitted on them; "
                "`scripts/python scripts/judge_projection.py FILE...` sets any runs against them):", "",
                *H.table(e["goals"])]
    out += ["", *V.fit_matrix(s), "", "Each later change's own test (`project_validation.md` names the runs):", "",
            *V.later_table(s)]
    out += ["", *markdown(V.header(), V.table_rows(runs))]
    other = other_rows(model_dir)
    mem = [float(r[4].rstrip("%")) for r in other if "(GB)" in r[1]]
    daly = [float(r[4].rstrip("%")) for r in other if r[1] == "daly interval min"]
    bounds = [r for r in other if r[4] in ("holds", "does not hold")]
    out.append("")
    if mem:
        out.append(f"- The paper's Table 4 (`project_checks.md`): {len(mem)} memory figures, largest error "
                   f"{max(mem, key=abs):+.1f}%.")
    if daly or bounds:
        out.append(f"- Checkpointing: Daly's {len(daly)} vectors within {max(abs(x) for x in daly):.1f}%"
                   + "".join(f"; {r[0]}: {r[1].upper()} {r[2]} against {r[3]}, {r[4]}" for r in bounds) + ".")
    scal = os.path.join(model_dir, "project_scaling.jsonl")
    if os.path.exists(scal):
        _, sizes, by = _scaling(scal)
        top = sizes[-1]
        fits = {s: per[top] for s, per in by.items() if per.get(top, {}).get("fits") and s != "capacity"}
        if fits:
            best = max(fits, key=lambda s: fits[s]["goodput"]["tokens_per_s_gpu"])
            b = fits[best]
            out.append("")
            out.append("![DeepSeek-V3's goodput against cluster size](project_goodput.png)")
            out.append("")
            out.append(f"- DeepSeek-V3 on {top:,} H100 under zipf routing (`project_goodput.png`): the best dropless "
                       f"strategy is {best} at {b['goodput']['tokens_per_s_gpu']:.0f} tokens/s per GPU of goodput, "
                       f"ETTR {b['goodput']['ettr']:.3f} (a job failure every {b['goodput']['mttf_h']:.2f} h); "
                       f"balanced routing would give {b['balanced_tokens_per_s_gpu']:.0f} tokens/s failure-free "
                       f"against {b['tokens_per_s_gpu']:.0f} under this imbalance.")
    return out + layer_lines(model_dir) + here_lines(here_src) + [""]


def here(src, out_dir):
    """paper_figures/project_here_table.{md,csv}: memfine project's step time beside memfine run's on
    this machine (experiments/project_here.yaml; scripts/python scripts/project_here.py)."""
    rows_in = _load(src)
    rows, ratios = [], {}
    for r in rows_in:
        ms = r["step_s"] * 1e3
        rows.append([r["point"], r["strategy"], f"{r['measured_step_ms']:.1f}", f"{ms:.1f}",
                     R.pct(ms, r["measured_step_ms"]),
                     f"{r['step_parts_s']['compute'] * 1e3:.1f}", f"{r['step_parts_s']['recompute'] * 1e3:.1f}"])
        ratios.setdefault(r["point"], {})[r["strategy"]] = (r["measured_step_ms"], ms)
    notes = [f"Measured: `memfine run experiments/project_here.yaml` ({R.commit_text(rows_in[0]['measured_env']['git_commit'])}, "
             f"{rows_in[0]['measured_env'].get('device_name')}, {rows_in[0]['measured_env'].get('threads')} threads); "
             f"projected: `memfine project` ({_commit(rows_in)}) with this machine's rates from memfine_bench in the "
             "same run (`results/cpu/project_here/hardware.yaml`); `scripts/python scripts/project_here.py`."]
    for point, by in sorted(ratios.items()):
        if "no_recompute" in by and "full_recompute" in by:
            m = by["full_recompute"][0] / by["no_recompute"][0]
            p = by["full_recompute"][1] / by["no_recompute"][1]
            notes.append(f"{point}: full recomputation's step over no recomputation's: measured {m:.2f}x, projected {p:.2f}x.")
    header = ["point", "strategy", "measured step ms", "projected step ms", "error", "projected compute ms",
              "projected recompute ms"]
    return S.write_table(out_dir, "project_here_table", "memfine project beside memfine run on this machine", header,
                         rows, notes, formats=("md", "csv"))


def here_lines(src):
    if not src or not os.path.exists(src):
        return []
    rows = _load(src)
    errs = [100 * (r["step_s"] * 1e3 - r["measured_step_ms"]) / r["measured_step_ms"] for r in rows]
    med = statistics.median(abs(e) for e in errs)
    return [f"- On this machine (`project_here_table.md`): projected step times against `memfine run`'s over "
            f"{len(rows)} points and strategies: median absolute error {med:.1f}%, from {min(errs):+.1f}% to "
            f"{max(errs):+.1f}%" + (" (the projection reads low: it prices no framework overhead)" if max(errs) < 0 else
                                    "") + "."]


def _layer_runs(src):
    """Each layer-level case's passes: (case, pass, measured ms, first projected ms, projected ms now,
    precision), the first projection from project_layers_first.jsonl beside `src` (today's where it
    has none)."""
    first_src = os.path.join(os.path.dirname(src), "project_layers_first.jsonl")
    first = {(r["case_file"], r["strategy"]): r for r in _load(first_src)} if os.path.exists(first_src) else {}
    out = []
    for r in _load(src):
        values = (r.get("published") or {}).get("values", {})
        f = first.get((r["case_file"], r["strategy"]), r)
        case = os.path.splitext(os.path.basename(r["case_file"]))[0]
        for side in ("forward", "backward"):
            if f"moe_layer_{side}_ms" in values:
                out.append((case, side, values[f"moe_layer_{side}_ms"], f["moe_layer_ms"][side], r["moe_layer_ms"][side],
                            r.get("precision", "bf16")))
    return out


def layers(src, out_dir):
    """paper_figures/project_layers_table.{md,csv}: one MoE layer's forward and backward as a
    layer-level benchmark measured them, beside the projection's at its first projection and now
    (experiments/project/layers/; scripts/project_cases.py, then scripts/first_projections.py with
    --src results/model/project_layers.jsonl --out results/model/project_layers_first.jsonl)."""
    runs = _layer_runs(src)
    rows = [[case, side, f"{m:.3f}", f"{p1:.3f}", R.pct(p1, m), f"{p:.3f}", R.pct(p, m)]
            for case, side, m, p1, p, _ in runs]
    header = ["case", "pass", "measured ms", "first projected ms", "first error", "projected ms now", "error now"]
    notes = [f"Projected by `memfine project` ({_commit(_load(src))}); each case's file in experiments/project/layers/ "
             "names its source and what was assumed before it was projected. Error: projected over measured, less 1. "
             "Today's error is in sample wherever the projection changed after a case's first projection (REPORT's "
             "later-changes table); the first is the reading of a case it had not seen."]
    return S.write_table(out_dir, "project_layers_table", "One MoE layer alone: measured and projected", header,
                         rows, notes, formats=("md", "csv"))


def layer_lines(model_dir):
    """REPORT's lines on the layer-level check, by precision, decided by the numbers: the first
    projection's errors, and today's where they differ."""
    src = os.path.join(model_dir, "project_layers.jsonl")
    if not os.path.exists(src):
        return []
    runs = _layer_runs(src)

    def said(errs):
        slow = sum(e > 0 for e in errs)
        return (f"median {statistics.median(errs):+.1f}% (from {min(errs):+.1f}% to {max(errs):+.1f}%), projected "
                f"slower on {slow} of {len(errs)}")
    out = []
    for precision in sorted({r[5] for r in runs}):
        for side in ("forward", "backward"):
            mine = [r for r in runs if r[5] == precision and r[1] == side]
            if not mine:
                continue
            first = [100 * (p1 - m) / m for _, _, m, p1, _, _ in mine]
            now = [100 * (p - m) / m for _, _, m, _, p, _ in mine]
            label = {"fp8_blockwise": "block-scaled FP8"}.get(precision, precision.upper())
            out.append(f"{label} {side}: {said(first)}"
                       + ("" if now == first else f"; today {statistics.median(now):+.1f}% ({min(now):+.1f}% to "
                                                  f"{max(now):+.1f}%)"))
    if not out:
        return []
    cases = len({r[0] for r in runs})
    return [f"- One MoE layer alone (`project_layers_table.md`: {cases} cases of published layer-level benchmarks, each "
            "file naming its source, entered after the step-level validation), first projection against measured: "
            + "; ".join(out) + "."]
