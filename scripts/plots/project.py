"""memfine project at cluster scale: its validation against published figures (the paper's Table 4
memory, Daly's checkpoint vectors, Llama 3's effective training time, NeMo AutoModel's and
Megatron-Core's DeepSeek-V3 runs) and goodput against cluster size for DeepSeek-V3 by strategy,
from the JSON lines scripts/project_cases.py writes into results/model/."""
import json
import os
import statistics

from . import records as R
from . import style as S
from .paper import _method_key, paper_methods

# Published throughput is compared in tokens per second where the source gives it (no FLOP
# convention in it), else in model TFLOP/s.
THROUGHPUT = (("tokens_per_s_gpu", "tokens/s per GPU"), ("model_tflops_gpu", "model TFLOP/s per GPU"))
GOAL = 10.0  # the goal: median throughput error at most 10%
# One look per strategy in these figures (the strategies of `memfine project`, not experiment labels).
LOOK = {"no_recompute": ("tab:blue", "-", "o"), "full_recompute": ("tab:orange", "-", "s"),
        "moe_act_recompute": ("tab:green", "--", "^"), "memfine": ("tab:red", "none", "x"),
        "offload": ("tab:olive", "-", "D"), "capacity": ("tab:gray", ":", "o")}


def family(r):
    """The strategy's registered name (a projection line's "name"; older lines wrote it as "strategy")."""
    return r.get("name") or R.parse_label(r["strategy"])[0]


def _load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def _err(ours, theirs):
    return 100.0 * (ours - theirs) / theirs


def _commit(rows):
    commits = sorted({r.get("git_commit", "?") for r in rows})
    return ", ".join(R.commit_text(c) for c in commits)


def validation_rows(model_dir):
    """(rows, throughput errors, ranking checks): one row per published figure."""
    rows, errors, ranking = [], [], []
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
    for c in _load(os.path.join(model_dir, "project_checkpoint.jsonl")):
        q, pub = c["quantity"], c["published"]
        ours = c[q]
        if pub.startswith(">"):
            bound = float(pub[1:])
            verdict = "holds" if ours > bound else "does not hold"
            rows.append([c["case"], q.replace("_", " "), f"{ours:.3f}", pub, verdict, c["source"]])
        else:
            rows.append([c["case"], q.replace("_", " "), f"{ours:.4g}", pub, R.pct(ours, float(pub)), c["source"]])
    cases = {}
    for r in _load(os.path.join(model_dir, "project_validation.jsonl")):
        cases.setdefault(r["project"], []).append(r)
    for name, rs in sorted(cases.items()):
        for r in rs:
            pub = r.get("published")
            if not pub:
                continue
            values, layout = pub["values"], r["layout"]
            where = (f"{name}: {r['gpus']} GPUs, TP{layout['tp']} PP{layout['pp']}"
                     f"{'x' + str(layout['vpp']) if layout['vpp'] > 1 else ''} EP{layout['ep']}, {r['strategy']}")
            counted = False
            for key, text in THROUGHPUT:
                if key in values:
                    e = _err(r[key], values[key])
                    rows.append([where, text, f"{r[key]:.0f}", f"{values[key]:g}", f"{e:+.1f}%", pub["source"]])
                    if not counted:
                        errors.append((where, text, e))
                        counted = True
            if "peak_gb" in values:
                rows.append([where, "peak memory of the hottest GPU (GB)", f"{r['peak_gb']:.1f}",
                             f"{values['peak_gb']:g}", R.pct(r["peak_gb"], values["peak_gb"]), pub["source"]])
        # Where both fit and both were measured: does the model order them as measured?
        measured = {r["strategy"]: r["published"]["values"] for r in rs if r.get("published")}
        if {"no_recompute", "full_recompute"} <= set(measured):
            key = next(k for k, _ in THROUGHPUT if k in measured["no_recompute"] and k in measured["full_recompute"])
            ours = {r["strategy"]: r for r in rs}
            if ours["no_recompute"]["fits"] and ours["full_recompute"]["fits"]:
                same = ((ours["full_recompute"][key] < ours["no_recompute"][key]) ==
                        (measured["full_recompute"][key] < measured["no_recompute"][key]))
                ranking.append((name, same, ours["full_recompute"][key] / ours["no_recompute"][key],
                                measured["full_recompute"][key] / measured["no_recompute"][key]))
    return rows, errors, ranking


def validation(src, out_dir):
    """paper_figures/project_validation.{md,tex,csv}: projected against published, with errors."""
    model_dir = os.path.dirname(src)
    rows, errors, ranking = validation_rows(model_dir)
    med = statistics.median(abs(e) for _, _, e in errors) if errors else float("nan")
    made = _load(src) + _load(os.path.join(model_dir, "project_checkpoint.jsonl"))
    notes = [f"Projected by `memfine project` / `memfine checkpoint` ({_commit(made)}; "
             "`scripts/python scripts/project_cases.py`); published figures and their layouts are in "
             "experiments/project/validation/ with their sources. Rates come from kernel-level figures "
             "(experiments/project/hardware.yaml), none fitted to these rows.",
             f"Throughput (one figure per published run: tokens/s where given, else TFLOP/s): median absolute error "
             f"{med:.1f}% over {len(errors)} runs (goal: at most {GOAL:g}%)."]
    for name, same, ours, theirs in ranking:
        notes.append(f"{name}: full recomputation {'below' if ours < 1 else 'above'} no recomputation "
                     f"({ours:.2f}x; measured {theirs:.2f}x): the order {'holds' if same else 'does not hold'}.")
    header = ["case", "quantity", "projected", "published", "error", "source"]
    return S.write_table(out_dir, "project_validation", "memfine project against published figures", header, rows,
                         notes, formats=("md", "tex", "csv"))


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
    rows, errors, ranking = validation_rows(model_dir)
    med = statistics.median(abs(e) for _, _, e in errors)
    out = ["## Planning at cluster scale: `memfine project`", "",
           f"Projected against published figures (`project_validation.md`): median throughput error {med:.1f}% over "
           f"{len(errors)} published runs, " + ("within" if med <= GOAL else "outside") + f" the {GOAL:g}% goal."]
    out += ["", "| case | quantity | projected | published | error |", "|---|---|---|---|---|"]
    out += [f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} | {r[4]} |" for r in rows]
    out += ["", "Sources and layouts: `project_validation.md`, experiments/project/validation/.", ""]
    mem = [float(r[4].rstrip("%")) for r in rows if "(GB)" in r[1]]
    daly = [float(r[4].rstrip("%")) for r in rows if r[1] == "daly interval min"]
    bounds = [r for r in rows if r[4] in ("holds", "does not hold")]
    if mem:
        out.append(f"- Memory: {len(mem)} published figures (the paper's Table 4, Megatron-Core's measured peaks), "
                   f"largest error {max(mem, key=abs):+.1f}%.")
    if daly or bounds:
        out.append(f"- Checkpointing: Daly's {len(daly)} vectors within {max(abs(x) for x in daly):.1f}%"
                   + "".join(f"; {r[0]}: {r[1].upper()} {r[2]} against {r[3]}, {r[4]}" for r in bounds) + ".")
    for where, text, e in errors:
        verdict = "within 10%" if abs(e) <= GOAL else "reads fast" if e > 0 else "reads slow"
        out.append(f"- {where}: {text} {e:+.1f}% ({verdict})")
    if any(e > GOAL for _, _, e in errors):
        out.append("- Where it reads fast: it charges no kernel launch or framework time between kernels, runs every "
                   "GEMM at its rate curve (the H100's grouped GEMM knee is assumed, not measured) and memory-bound "
                   "kernels at the HBM datasheet rate, and hides the data-parallel collectives behind compute; the "
                   "smaller the micro-batch, the more of the step those are.")
    if any(e < -GOAL for _, _, e in errors):
        out.append("- Where it reads slow: with full recomputation it runs each layer's dispatch and combine again "
                   "and exposes every all-to-all; a run that overlaps them, or keeps them out of the recomputed "
                   "region, is faster by about that much.")
    for name, same, ours, theirs in ranking:
        out.append(f"- {name}: the model puts full recomputation at {ours:.2f}x no recomputation's speed, the "
                   f"measurement at {theirs:.2f}x: the order " + ("holds." if same else "does not hold."))
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
