"""paper_figures/REPORT.md: the paper's claims and ours side by side. Every sentence that compares
is decided by the records it stands on: a claim is listed where we agree or where we do not by its
numbers, and each explanation says what the records show, not what they were expected to show."""
import glob
import os
import statistics

from . import records as R
from .tables import markdown
from .chunk_split import lines as chunk_split_lines
from .offload import lines as offload_lines
from .savers import lines as savers_lines, skip_dead_lines
from .project import report_lines as project_lines
from .gpu_report import lines as gpu_lines
from .paper import claims, paper_methods
from .sweeps import fixed_chunks
from .report_sections import (_flat, _gain, _path, _pct, budget_lines, chunk_cost_lines, field_lines,
                              pytorch_reference_lines, quality_lines, train_ranks_lines)


def verdict(ours, theirs):
    """'agrees', 'same direction, another size' or 'does not reproduce' for two changes, by sign and
    closeness (within a tenth of the paper's, or 2 points)."""
    if ours is None:
        return "not measured"
    if (ours > 0) != (theirs > 0) or ours == 0:
        return "does not reproduce"
    return "agrees" if abs(ours - theirs) <= max(0.1 * abs(theirs), 0.02) else "same direction, another size"


# The measured row sets of the headline table: at the paper's imbalance first (#47), then the milder
# case the suite started from. Each is an experiment folder; run*/ beneath it holds repeated runs.
IMBALANCES = (("paper_imbalance", "the paper's imbalance"), ("paper_figure5", "milder imbalance"))


def paper_overload():
    """The paper's s' over a rank's balanced share as its Table 4 prices it: 8 local experts at Figure
    2's largest per-layer p99, over 8 experts' balanced share (4096 each)."""
    return max(float(r["p99_tokens_per_expert"]) for r in R.read_csv("figure2_received_tokens.csv")) / 4096.0


def runs_of(results_dir, name):
    """An experiment's records and those of its repeated runs (NAME/run*/results.jsonl), first the main."""
    main = _path(results_dir, name)
    if not main:
        return []
    more = sorted(glob.glob(os.path.join(results_dir, name, "run*", "results.jsonl")))
    return [R.load(main)] + [R.load(p) for p in more]


def _spread(values):
    """Median of per-run values and the text that gives it with its range."""
    values = [v for v in values if v is not None]
    if not values:
        return None, "n/a"
    med = statistics.median(values)
    if len(values) == 1:
        return med, _pct(med)
    return med, f"{_pct(med)} (median of {len(values)} runs, {_pct(min(values))} to {_pct(max(values))})"


def measured_set(runs, which):
    """One row set's context: its records by point, the tight (Model I) and loose (Model II) budgets."""
    recs = runs[0]
    points = R.by_point(recs)
    budget = lambda p: points[p][0].get("budget_bytes") or 1e30
    tight, loose = min(points, key=budget), max(points, key=budget)
    full_ok = R.select(recs, role="baseline", status="ok")
    top = max(R.overload(r) for r in recs)
    return dict(recs=recs, runs=runs, points=points, tight=tight, loose=loose, which=which, overload=top,
                at=lambda point, how, rs=None: R.first(R.by_point(rs or recs).get(point, []), **how),
                full_need=max(R.activation(r) for r in full_ok) if full_ok else None)


def headline(results_dir, predictions):
    """The claims table (a row set per measured imbalance) and the two lists it decides."""
    preds = R.load(predictions, required=("experiment", "point", "strategy", "static_gb"))
    c = claims()
    model = {R.method_name(p): p for p in preds if p["point"] == "model.layers=16"}
    full_p, fixed_p, mact_p = (model.get(n) for n in ("1: full recomputation", "2: MemFine, 8 chunks", "3: MemFine + MACT"))
    modeled = lambda p: p["activation_gb"] / full_p["activation_gb"] - 1 if p and full_p else None
    lines = markdown(["claim", f"imbalance (hottest rank's s' / its balanced share; the paper's: {paper_overload():.1f}x)",
                      "paper", "ours (measured, this machine)", "ours (paper's equations at paper scale)", "verdict"])
    agree, differ, ctxs = [], [], []
    for name, which in IMBALANCES:
        runs = runs_of(results_dir, name)
        if not runs:
            continue
        ctx = measured_set(runs, which)
        ctx.update(name=name, preds=preds, model=model)
        ctxs.append(ctx)
        at, tight, loose = ctx["at"], ctx["tight"], ctx["loose"]
        red = lambda r: (R.activation(r) - ctx["full_need"]) / ctx["full_need"] \
            if r and r["status"] == "ok" and ctx["full_need"] else None
        # Throughput: each run's ratio, strategies interleaved within it; the median over runs decides.
        gain = lambda point, ref, how: _spread([_gain(at(point, ref, rs), at(point, how, rs)) for rs in runs])
        full_tight = at(tight, R.BASELINE)
        imb = f"{ctx['overload']:.1f}x (`{name}`)"
        budget_text = lambda p: p.replace("memory.budget=", "budget ")
        rows = [
            ("full recomputation runs out of memory (Model I)", c["full_trains_I"] is False,
             f"yes, {c['full_total_I']:.1f} GB > 64 GB", full_tight is not None and full_tight["status"] == "oom",
             f"{'yes' if full_tight and full_tight['status'] == 'oom' else 'no'} at {budget_text(tight)}",
             f"{'yes' if full_p and not full_p['fits'] else 'no'}, {full_p['total_gb']:.1f} GB" if full_p else "-", None),
            ("activation memory, fixed 8 chunks vs full recomputation", c["act_fixed8_vs_full"], None,
             red(at(tight, R.FIXED8)), None, _pct(modeled(fixed_p)), "size"),
            ("activation memory, MACT vs full recomputation", c["act_mact_vs_full"], None, red(at(tight, R.MACT)), None,
             f"{_pct(modeled(mact_p))} ({mact_p['chunks']} chunks)" if mact_p else "-", "size"),
            ("throughput, MACT vs fixed 8 chunks (Model I)", c["tgs_mact_vs_fixed8_I"], None,
             *gain(tight, R.FIXED8, R.MACT), "-", "mact_vs_8"),
            ("throughput, MACT vs full recomputation (Model II)", c["tgs_mact_vs_full_II"], None,
             *gain(loose, R.BASELINE, R.MACT), "-", "mact_vs_full"),
            ("throughput, fixed 8 chunks vs full recomputation (Model II)", c["tgs_fixed8_vs_full_II"], None,
             *gain(loose, R.BASELINE, R.FIXED8), "-", "chunk_cost"),
        ]
        for claim, theirs, theirs_text, ours, ours_text, modeled_text, why in rows:
            v = ("agrees" if ours == theirs else "does not reproduce") if isinstance(theirs, bool) else verdict(ours, theirs)
            theirs_text = theirs_text or f"{100 * theirs:+.2f}%"
            ours_text = ours_text or _pct(ours)
            lines.append(f"| {claim} | {imb} | {theirs_text} | {ours_text} | {modeled_text} | {v} |")
            item = (f"{claim}, at {which} ({ctx['overload']:.1f}x)", theirs_text, ours_text, v, why, ctx, ours)
            (agree if v == "agrees" else differ).append(item)
        for label, how in (("MACT + store when it fits", R.STORE_WHEN_FITS), ("the time planner (objective: time)",
                                                                                R.OBJECTIVE_TIME)):
            if at(loose, how):
                lines.append(f"| throughput, {label} vs full recomputation, Model II (ours) | {imb} | - | "
                             f"{gain(loose, R.BASELINE, how)[1]} | - | - |")
    if not ctxs:
        raise R.ResultsError(f"{results_dir}: neither paper_imbalance nor paper_figure5 has results")
    return lines, agree, differ, ctxs


def why_not(key, ctx, ours=None):
    """The records' account of a claim we do not reproduce (`ours`: the measured value the table gives)."""
    at, tight, loose = ctx["at"], ctx["tight"], ctx["loose"]
    if key == "mact_vs_full":
        mact = at(loose, R.MACT)
        chosen = sorted(set(_flat(mact.get("chunks")))) if mact and mact["status"] == "ok" else []
        text = (f"MACT chose {', '.join(map(str, chosen))} chunk(s) at {loose.replace('memory.budget=', 'budget ')}"
                + (", one everywhere: by Eq. 9 the smallest bin that fits, i.e. full recomputation plus MACT's bookkeeping, "
                   "which is not expected to be faster than full recomputation" if chosen == [1] else
                   ": chunking adds work (every chunk runs its dispatch, its experts' products on fewer rows, and again "
                   "in backward)") +
                ". The paper does not say where its gain comes from; it reports MACT using 2 chunks on Model II although "
                "full recomputation fits there, which Eq. 9 does not give.")
        store = at(loose, R.STORE_WHEN_FITS)
        # Each run's ratio; the median over runs, as the table gives it.
        median_gain = lambda how: _spread([_gain(at(loose, R.BASELINE, rs), at(loose, how, rs)) for rs in ctx["runs"]])[0]
        if store and store["status"] == "ok":
            stored = 0 in _flat(store.get("chunks"))
            g = median_gain(R.STORE_WHEN_FITS)
            if stored and g is not None and g > 0:
                text += (f" Storing layers when the model says they fit (ours, `store_when_fits`) stored some and ran "
                         f"{_pct(g)} against full recomputation here: a tuner can beat full recomputation that way.")
            elif stored:
                text += f" Storing layers when the model says they fit (ours) stored some and still ran {_pct(g)}."
            else:
                text += (" Storing layers when the model says they fit (ours) stored none at this budget (the model did "
                         f"not find room), so it ran as MACT does: {_pct(g)}.")
        plan = at(loose, R.OBJECTIVE_TIME)
        if plan and plan["status"] == "ok" and plan.get("predicted_step_ms"):
            cells = _flat(plan.get("chunks"))
            g = median_gain(R.OBJECTIVE_TIME)
            text += (f" The time planner (`objective: time`, ours) stored {100 * cells.count(0) / len(cells):.0f}% of the "
                     f"layer-steps and recomputed the rest in up to {max(cells)} chunks, and ran {_pct(g)} against full "
                     f"recomputation: it predicted {plan['predicted_step_ms']:.0f} ms for the step it planned, which took "
                     f"{R.median_ms(plan):.0f} ms (median) in the run whose plan it is; the plan is only as good as the cost "
                     "model's times" + (", which are off at these rows (they scale the benchmarked layer's by FLOPs)."
                                        if g is not None and g < 0 else "."))
        return text
    if key == "mact_vs_8":
        mact, fixed = at(tight, R.MACT), at(tight, R.FIXED8)
        if not (mact and fixed and mact["status"] == fixed["status"] == "ok"):
            return "One of the two did not run at the tight budget."
        cells = _flat(mact.get("chunks"))
        share = {c: 100 * cells.count(c) / len(cells) for c in sorted(set(cells))}
        pct = lambda v: "<1%" if v < 0.5 else f"{v:.0f}%"
        theirs = claims()["tgs_mact_vs_fixed8_I"]
        ours = _gain(fixed, mact) if ours is None else ours
        chose = ", ".join(f"{c} chunk(s) in {pct(v)}" for c, v in share.items())
        if ours > theirs:
            return (f"MACT ran {chose} of the layer-steps where the fixed count runs 8 everywhere; every chunk it "
                    "saves is worth more here than on the paper's GPUs, because a chunk costs more on this CPU "
                    "(\"What a chunk costs\", below).")
        return (f"MACT ran {chose} of the layer-steps; the budget left it less to save against a fixed 8 chunks than the "
                "paper's did.")
    if key == "chunk_cost":
        return "What a chunk costs on this machine is measured in the section below (\"What a chunk costs\")."
    if key == "size":
        # Eq. 2's form: a part that does not grow with s' plus one that does, the latter divided by the
        # chunks; a reduction R with 8 chunks then means the first part is 1 - R * 8 / 7 of the whole.
        share = lambda r: 1 - abs(r) * 8 / 7
        theirs = claims()["act_fixed8_vs_full"]
        fixed = ctx["at"](ctx["tight"], R.FIXED8)
        full = ctx["full_need"]
        mine = (R.activation(fixed) - full) / full if fixed and fixed["status"] == "ok" and full else None
        paper = R.read_csv("figure2_received_tokens.csv")
        hottest = max(float(r["max_tokens_per_expert"]) for r in paper) / 4096.0
        text = (f"By Eq. 2's form (a part that does not grow with s' plus one that does, divided by the chunks), a "
                f"reduction R with 8 chunks means the part that does not grow is 1 - R x 8/7 of full recomputation's "
                f"activation: {100 * share(theirs):.1f}% in the paper's Table 4")
        if mine is not None:
            text += (f", {100 * share(mine):.1f}% in ours here (s' up to {ctx['overload']:.1f}x its balanced share; the "
                     f"paper's hottest expert up to {hottest:.1f}x, its Table 4's rank about {paper_overload():.1f}x)")
        text += (". Attention, the router, the layer inputs and the loss keep the same bytes under every strategy; the "
                 "smaller the routed rows against them, the smaller the reduction chunks can give.")
        return text
    return ""


def agree_facts(ctxs, results_dir):
    """Claims about mechanisms, each checked against its records: the chunk sweep's and the paper-scale
    model's once, the rest for each measured imbalance."""
    out = []
    sweep = _path(results_dir, "chunk_sweep")
    if sweep:
        mem = fixed_chunks(R.load(sweep))
        acts = [R.activation(r) for _, r in mem]
        falling = all(b <= a * 1.01 for a, b in zip(acts, acts[1:]))
        if len(acts) > 2:
            last_step = acts[-2] / acts[-1] - 1
            out.append("- Chunking the MoE's dispatch -> experts -> combine and recomputing chunk by chunk "
                        + ("lowers the activation peak at every chunk count measured"
                           if falling else "does not lower the peak at every chunk count measured") +
                        f" (`chunks_step_time.png`: {mem[0][0]} chunk {acts[0] / R.MIB:.1f} MiB, {mem[-1][0]} chunks "
                        f"{acts[-1] / R.MIB:.1f} MiB; the last step of the count saved {100 * last_step:.1f}%"
                        + (", as the rest of the layer, not the MoE, comes to set the peak)." if last_step < 0.02 else
                           ", still falling)."))
    for ctx in ctxs:
        out += set_facts(ctx)
    ctx = ctxs[0]
    t4 = {(r["model"], r["method"]): r for r in R.read_csv("table4_memory_gb.csv")}
    static = next((p["static_gb"] for p in ctx["preds"] if p["point"] == "model.layers=16" and R.matches(p, **R.BASELINE)), None)
    full_p, mact_p = ctx["model"].get("1: full recomputation"), ctx["model"].get("3: MemFine + MACT")
    if static and full_p and mact_p:
        err = static / float(t4[("I", "1_full_recompute")]["static_gb"]) - 1
        out.append(f"- At paper scale the paper's own equations give Model I's static memory {_pct(err)} from the paper's, "
                   f"say full recomputation {'does not fit' if not full_p['fits'] else 'fits'} (the paper: it does not) "
                   f"and MACT needs {mact_p['chunks']} chunks (the paper: 2) (`table4_modeled.md`).")
    return out


def figures_of(name):
    """A measured row set's Table 4, Figure 4 and Figure 5 files (scripts/plots/recipes.py)."""
    if name == "paper_figure5":
        return "table4_measured.md", "figure4_throughput.png", "figure5_mact_chunks.png"
    return f"table4_{name}.md", f"figure4_{name}.png", f"figure5_{name}.png"


def set_facts(ctx):
    """What one measured imbalance's records say about MACT's mechanism."""
    out = []
    table, fig4, fig5 = figures_of(ctx["name"])
    tight, at = ctx["tight"], ctx["at"]
    where = f"At {ctx['which']} ({ctx['overload']:.1f}x, `{ctx['name']}`): "
    full, mact = at(tight, R.BASELINE), at(tight, R.MACT)
    if full and mact:
        trains = full["status"] == "oom" and mact["status"] == "ok"
        out.append("- " + where + ("MemFine with MACT trains where full recomputation runs out of memory"
                           if trains else f"At the tight budget full recomputation was {full['status']} and MACT "
                                          f"{mact['status']}") + f" (`{table}`, `{fig4}`).")
    grid = next((r for r in R.select(ctx["recs"], status="ok", **R.MACT) if isinstance(r.get("chunks"), list)
                 and r["chunks"] and isinstance(r["chunks"][0], list)), None)
    if grid:
        g = grid["chunks"]  # [step][layer]
        third = max(1, len(g) // 3)
        mean = lambda rows: statistics.mean(c for row in rows for c in row)
        middle, edges = mean(g[third:len(g) - third] or g), mean(g[:third] + g[len(g) - third:])
        half = len(g[0]) // 2
        deep, shallow = mean([row[half:] for row in g]), mean([row[:half] for row in g])
        out.append(f"- {where}MACT's choices (`{fig5}`): {middle:.2f} chunks on average in the middle third of "
                   f"the steps against {edges:.2f} in the first and last, {deep:.2f} in the deeper half of the layers "
                   f"against {shallow:.2f} in the shallower: "
                   + ("they follow the imbalance as the paper's Figure 5 does (hot middle steps, deeper layers)."
                      if middle > edges and deep > shallow else
                      "not the paper's pattern (hot middle steps and deeper layers) in every respect; the workload's "
                      "schedule decides where the hot steps are."))
    return out


def paper_facts(ctx):
    """What the paper's own numbers do not agree with, from its tables and our equations."""
    t4 = paper_methods()
    preds = ctx["preds"]
    static_ii = next((p["static_gb"] for p in preds if p["point"] == "model.layers=8" and R.matches(p, **R.BASELINE)), None)
    lines = [f"- The paper's Table 4 is not self-consistent: Model II (8 layers) has {t4[('II', '1_full_recompute')]['static_gb']} "
             "GB of static memory with p = 4, which 2 MoE layers per stage cannot give"
             + (f" (its equations give {static_ii:.1f} GB)" if static_ii else "") +
             "; its parallel sizes do not multiply to 32 GPUs."]
    errs = []
    for p in preds:  # Eq. 2 is full recomputation's activation: the paper's rows of it against it
        key = {"model.layers=16": "I", "model.layers=8": "II"}.get(p["point"])
        if key and R.matches(p, **R.BASELINE):
            errs.append((key, float(t4[(key, "1_full_recompute")]["activation_gb"]) / p["activation_gb"] - 1))
    if errs:
        lines.append("- The paper's full-recomputation activation is " +
                     ", ".join(f"{_pct(e)} (Model {k})" for k, e in errs) + " from its Eq. 2 with s' from its own Figure 2 "
                     "(8 local experts at the largest p99); the exact s' behind Table 4 is not given.")
    return lines


def imbalance_lines(ctxs):
    """How hot the paper's hottest rank is, from its own numbers, and how close each row set gets."""
    paper = R.read_csv("figure2_received_tokens.csv")
    p99 = max(paper, key=lambda r: float(r["p99_tokens_per_expert"]))
    t4 = paper_methods()
    kept = float(t4[("I", "2_fixed_chunks_8")]["activation_gb"]) / float(t4[("I", "1_full_recompute")]["activation_gb"])
    fixed_share = (kept - 1 / 8) / (1 - 1 / 8)
    sets = "; ".join(f"`{c['name']}` {c['overload']:.1f}x" for c in ctxs)
    return [f"**The paper's imbalance.** Its Model I has 32 ranks of 4096 tokens, top-8 of 256 experts: 4096 rows an "
            f"expert and 32,768 a rank (8 local experts) when balanced. Its Figure 2's largest per-layer p99 is "
            f"{float(p99['p99_tokens_per_expert']):,.0f} tokens (layer {p99['layer']}, {paper_overload():.1f}x an expert's "
            f"share); with all 8 local experts there, as this suite's paper-scale model prices Table 4, the hottest rank "
            f"receives {paper_overload():.1f}x its share. Table 4's own numbers agree with a rank that hot: 8 chunks keep "
            f"{100 * kept:.1f}% of full recomputation's activation, and with Eq. 2's form (a part that does not grow "
            f"with s' plus one that does, divided by the chunks) that leaves {100 * fixed_share:.1f}% for the part that "
            f"does not grow. Our rows: the emulated hottest rank's s' over its balanced share, worst layer at the "
            f"schedule's peak: {sets}. An emulated rank can receive at most ep x min(local experts, topk) / topk its "
            "share, so `paper_imbalance` runs ep 32 with 128 experts top-4 and its 4 hot experts on one rank "
            "(experiments/paper_imbalance.yaml says how).", ""]


def report(results_dir, predictions, out_dir):
    """paper_figures/REPORT.md."""
    table, agree, differ, ctxs = headline(results_dir, predictions)
    ours = []
    for ctx in ctxs:
        env = R.env_of(ctx["recs"])
        ours.append(f"`{ctx['name']}` on {R.device_label(ctx['recs'])}, {env.get('threads')} threads, LibTorch "
                    f"{env.get('libtorch')}, {R.commit_text(env.get('git_commit', '?'))}")
    lines = ["# MemFine: the paper's claims and ours", "",
             "Generated by `scripts/figures.py` (scripts/plots/report.py) from the results named under each table; "
             "regenerate with `scripts/reproduce`. Every comparison below is decided by the numbers it cites.",
             f"Ours: {'; '.join(ours)}. The paper: 32 GPUs with 64 GB, Megatron-LM, DeepSeek-V3-shaped layers.", ""]
    lines += imbalance_lines(ctxs) + table + [
             "", "Activation reductions are against full recomputation's need on the same workload (measured where it "
             "fits); throughput is tokens per second from median step times of strategies interleaved in one run (with "
             "repeated runs: the median of the runs' ratios, and their range). Verdict: agrees when the sign matches and "
             "ours is within a tenth of the paper's size (or 2 points).", "",
             "## Where we agree"]
    lines += [f"- {c}: the paper {t}, ours {o}." for c, t, o, v, why, ctx, n in agree] + agree_facts(ctxs, results_dir)
    lines += ["", "## Where we do not, and why"]
    for c, t, o, v, why, ctx, n in differ:
        lines.append(f"- {c}: the paper {t}, ours {o} ({v}). " + why_not(why, ctx, n if isinstance(n, float) else None))
    ctx = ctxs[0]
    lines += paper_facts(ctx) + [""]
    lines += chunk_cost_lines(results_dir) + chunk_split_lines(ctxs, results_dir, os.path.dirname(predictions))
    lines += budget_lines(results_dir) + field_lines(results_dir)
    if _path(results_dir, "offload"):
        lines += offload_lines(_path(results_dir, "offload"))
    if _path(results_dir, "savers_2026"):
        lines += savers_lines(_path(results_dir, "savers_2026"))
    if _path(results_dir, "skip_dead"):
        lines += skip_dead_lines(_path(results_dir, "skip_dead"))
    lines += pytorch_reference_lines(results_dir) + quality_lines(results_dir) + train_ranks_lines(results_dir)
    lines += project_lines(os.path.dirname(predictions), _path(results_dir, "project_here", "projection.jsonl"))
    lines += gpu_lines(results_dir)
    lines += ["## Sources",
              *(f"- measured: `{os.path.relpath(_path(results_dir, c['name']))}` (experiments/{c['name']}.yaml"
                + (f"; {len(c['runs']) - 1} more runs in its run*/ folders)" if len(c["runs"]) > 1 else ")")
                for c in ctxs),
              f"- paper scale: `{os.path.relpath(predictions)}` (`memfine predict --json experiments/paper_table4.yaml`)",
              "- the paper's numbers: `experiments/data/*.csv` (read off its tables and figures)"]
    path = os.path.join(out_dir, "REPORT.md")
    os.makedirs(out_dir, exist_ok=True)
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return [path]
