"""memfine project at cluster scale: its validation against published training runs (their checks:
scripts/plots/validation.py) and other published figures (the paper's Table 4 memory, Daly's
checkpoint vectors, Llama 3's effective training time), goodput against cluster size for
DeepSeek-V3 by strategy, and the projection beside `memfine run` on this machine, from the JSON
lines scripts/project_cases.py and scripts/project_here.py write."""
import os
import statistics

from . import records as R
from . import style as S
from . import validation as V
from .paper import _method_key, paper_methods

# One look per strategy in these figures (the strategies of `memfine project`, not experiment labels).
# Each strategy in the colour the measured figures give it (scripts/plots/style.py: the baseline
# blue, the reference grey, MACT green, the rest by label); a marker and line style per family.
LOOK = {"no_recompute": ("tab:gray", "-", "o"), "full_recompute": ("tab:blue", "-", "s"),
        "moe_act_recompute": (S.color_of("moe_act_recompute"), "--", "^"), "memfine": ("tab:green", "none", "x"),
        "offload": (S.color_of("offload"), "-", "D"), "capacity": (S.color_of("capacity"), ":", "o")}


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
             "experiments/project/hardware.yaml (the calibration sources: kernel benchmarks, never these runs); the "
             "learned runs' routing law comes from this suite's own learned router (scripts/trace_sigma.py).",
             "Errors: projected over published, less 1, in speed (a step time's error is the speed's). The 'why' "
             "column reads the projection's own step parts: a hypothesis, not a measurement."] + V.verdict_lines(s)
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


def scaling(src, out_dir):
    """paper_figures/project_goodput.{png,pdf} and its table: DeepSeek-V3's goodput per GPU against
    cluster size, the best layout of each strategy at each size."""
    rows, sizes, by = _scaling(src)
    fig, (ax, ax2) = S.figure(1, 2, figsize=(11, 4.2))
    def same(a, b):  # one strategy's best layouts project exactly as another's
        return all(by[a].get(n, {}).get("tokens_per_s_gpu") == by[b].get(n, {}).get("tokens_per_s_gpu") for n in sizes)

    for s, per in sorted(by.items()):
        xs = [n for n in sizes if per.get(n, {}).get("fits")]
        if not xs:
            continue
        twin = next((o for o in sorted(by) if o < s and same(s, o)), None)
        label = s + (" (drops tokens)" if s == "capacity" else "") + (f" (= {twin})" if twin else "")
        c, ls, mk = LOOK.get(s, (S.color_of(s), "-", "o"))
        ax.plot(xs, [per[n]["goodput"]["tokens_per_s_gpu"] for n in xs], marker=mk, ms=4, color=c, ls=ls, label=label)
        ax.plot(xs, [per[n]["tokens_per_s_gpu"] for n in xs], color=c, ls="--", lw=0.7, alpha=0.5)
    ax.set_xscale("log", base=2)
    S.dress(ax, "GPUs (H100 80GB)", "tokens/s per GPU", "Goodput (solid) and failure-free speed (dashed), best layout")
    first = next(r for r in rows if r.get("fits"))
    ettr = {n: next(r["goodput"]["ettr"] for r in rows if r["gpus"] == n and r.get("fits")) for n in sizes
            if any(r["gpus"] == n and r.get("fits") for r in rows)}
    mttf = {n: next(r["goodput"]["mttf_h"] for r in rows if r["gpus"] == n and r.get("fits")) for n in ettr}
    ax2.plot(list(ettr), list(ettr.values()), marker="o", ms=3, color="black", label="ETTR")
    ax2.set_xscale("log", base=2)
    tw = ax2.twinx()
    tw.plot(list(mttf), list(mttf.values()), marker="s", ms=3, color="tab:gray", ls="--", label="job MTTF (h)")
    tw.set_yscale("log")
    tw.set_ylabel("job mean time to failure (h)", fontsize=8)
    S.dress(ax2, "GPUs", "expected effective training time ratio", "What failures leave (Kokolis et al., optimal interval)")
    tw.legend(fontsize=7, loc="lower left")
    caption = (f"memfine project {first['project']} --gpus N (global batch scaled with N; "
               f"experiments/project_deepseek_v3.yaml, its search space and zipf routing), {_commit(rows)}. "
               "Goodput = ETTR x tokens/s; ETTR from Llama 3's failure rate per node, a 10 min restart and the "
               "checkpoint at 5 GB/s per node. Capacity capping drops assignments: another model.")
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
    out += V.verdict_lines(s)
    out += ["", "| " + " | ".join(V.header()) + " |", "|" + "---|" * len(V.header())]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in V.table_rows(runs)]
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
    return out + here_lines(here_src) + [""]


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
