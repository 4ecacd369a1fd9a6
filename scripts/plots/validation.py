"""memfine project against published training runs (experiments/project/validation/*.yaml, projected
by scripts/project_cases.py into results/model/project_validation.jsonl): for each published run
three checks, each decided by the numbers:
  fit         a layout that ran must be projected to fit at usable_memory 1.0 (borderline: within the
              framework's margin of the limit, on either side); every row counts, the pairs' too; a
              layout the source saw run out of memory (published `out_of_memory: true`) is a negative
              case: fit is reported as a confusion matrix (ran / out of memory against yes /
              borderline / no)
  peak        a published peak (allocated, reserved, or the device's used memory against the need) within 10%
  throughput  tokens/s per GPU (or the step time; TFLOP/s under the source's FLOP convention where only
              that is given) within 10% at the median, none over 25%
and the learned-routing pairs (pair_*_forced / pair_*_learned): the learned run's throughput over the
force-balanced run's, projected against measured, within 15%. A run whose file says
`published.calibration` (a figure of its configuration's profile is an input to every projection)
or `published.known_issue` (a regression the framework's own release notes name for that
configuration) is shown with its time but not counted in the throughput check; the verdict also
gives the check with the known-issue rows counted. Beside each run's throughput error, its error at
its first projection (results/model/project_first.jsonl, scripts/first_projections.py): what the
projection said before any change made after the run entered the set; and whether the range
`memfine project` gives (tokens_per_s_gpu_range, from experiments/project/errors.yaml) holds the
published figure."""
import json
import os
import statistics

import yaml

from . import errors_file as E
from . import held_out as H
from .held_out import HELD_OUT_HALF_WIDTH, HELD_OUT_HELD, HELD_OUT_WORST, PEAK_GOAL
from . import records as R
from . import sources as SRC
from . import tables as T

MEDIAN_GOAL, WORST_GOAL, PAIR_GOAL = 10.0, 25.0, 15.0
# A published peak against the projection's counterpart, in the order a source's figures are read:
# PyTorch's allocated, its reserved, and the device's used memory (nvidia-smi's) against the need.
PEAK_KEYS = (("peak_gb", "peak_gb"), ("reserved_gb", "reserved_gb"), ("device_gb", "need_gb"))
PEAK_NOTE = {"reserved_gb": ", reserved", "device_gb": ", the device's against the need"}


def _later_changes(kind):
    """Changes made after their checked runs were seen, of one kind (`speed` for the throughput's, `fit`
    for what decides fit): (what changed, the commit that made it, its date); runs first projected from
    then on are its own test. From experiments/project/later_changes.yaml."""
    with open(os.path.join(R.ROOT, "experiments", "project", "later_changes.yaml")) as f:
        return tuple((c["what"], c["commit"], c["since"]) for c in yaml.safe_load(f)[kind])


LATER_CHANGES, LATER_FIT_CHANGES = _later_changes("speed"), _later_changes("fit")


def load(path):
    """The JSON lines of a file."""
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def _err(ours, theirs):
    return 100.0 * (ours - theirs) / theirs


def _layout(r):
    l = r["layout"]
    vpp = f"x{l['vpp']}" if l["vpp"] > 1 else ""
    cp = f" CP{l['cp']}" if l["cp"] > 1 else ""
    etp = f" ETP{l['etp']}" if l.get("etp", 1) > 1 else ""
    fp8 = {"fp8": " FP8", "fp8_blockwise": " FP8 blockwise"}.get(r.get("precision"), "")
    return f"{r['gpus']} GPUs TP{l['tp']} PP{l['pp']}{vpp} EP{l['ep']}{etp}{cp} mb{l['micro_batch']}{fp8}"


def _throughput(r, values):
    """(quantity, projected, published): tokens/s where the source gives it or its step time, else TFLOP/s."""
    if "tokens_per_s_gpu" in values:
        return "tokens/s per GPU", r["tokens_per_s_gpu"], values["tokens_per_s_gpu"]
    if "step_s" in values:
        return "step (s)", r["step_s"], values["step_s"]
    if "model_tflops_gpu" in values:
        return "model TFLOP/s per GPU", r["model_tflops_gpu"], values["model_tflops_gpu"]
    return None


def _why(r, err):
    """What the projection's own parts say about a throughput miss (a reading, not a measurement)."""
    parts, l = r["step_parts_s"], r["layout"]
    micro = SRC.micro_batches(l)
    said = []
    if err > 0:
        launch = parts.get("launch", 0) / max(r["step_s"], 1e-12)
        if micro <= 2:
            opt = parts.get("optimizer", 0) / max(r["step_s"], 1e-12)
            said.append(f"{micro} micro-batch a step: per-step costs it does not price (the step's own host "
                        f"synchronisations, logging, the schedule's set-up) weigh the most (priced: the optimizer "
                        f"step, {100 * opt:.0f}% of it)")
        if r.get("ep_overlap"):
            hidden = r.get("ep_overlap_hidden")
            said.append("the overlap pairs each all-to-all with the other micro-batch's attention or experts and "
                        "hides at most " + (f"{100 * hidden:.4g}% of it (the profiled share)" if hidden is not None
                                            else "the profiled share of it") + "; the run hid less")
        share = parts["compute"] / max(r["step_s"], 1e-12)
        said.append(f"compute is {100 * share:.0f}% of its step at kernel-level rates; the host's launches, "
                    f"priced from per-launch figures, wait {100 * launch:.0f}% of it")
        g = r.get("expert_gemm")
        if g:  # priced on the grouped GEMM curve, least sure at its few-row end, or the table where faster
            said.append(f"its experts' GEMMs run at {g['rows']:.0f} rows each, {g['tflops']:.0f} TFLOP/s as "
                        "priced" + _kernel_check(g))
    else:
        share = parts["comm"] / max(r["step_s"], 1e-12)
        said.append(f"exposed communication is {100 * share:.0f}% of its step (all-to-alls at the dispatcher's "
                    "benchmark rate, none overlapped unless the file says so)")
        calibration = parts.get("calibration", 0) / max(r["step_s"], 1e-12)
        if calibration > 0:  # a fixed time a layer pass: the larger its share, the less the parts decide
            said.append(f"the calibrated constant (errors.yaml layer_pass_s, a fixed time a layer pass) is "
                        f"{100 * calibration:.0f}% of it")
        g = r.get("expert_gemm")
        check = _kernel_check(g) if g else ""
        if "slower than" in check:  # a slow curve is the other reading of a slow projection
            share = parts["compute"] / max(r["step_s"], 1e-12)
            said.append(f"compute is {100 * share:.0f}% of its step, its experts' GEMMs at {g['rows']:.0f} rows "
                        f"each, {g['tflops']:.0f} TFLOP/s as priced" + check)
    return "; ".join(said)


def _kernel_check(g):
    """The same GEMMs on the dense GEMM table at one expert's shape, with the weight gradients'
    accumulation beside where the framework fuses it (core/project/rates.h expert_kernels), and
    which way the priced rate lies from them."""
    if not g.get("table_tflops"):
        return ""
    kernels = g.get("accumulated_tflops") or g["table_tflops"]
    ratio = g["tflops"] / kernels
    side = "about as fast as" if abs(ratio - 1) <= 0.05 else "slower than" if ratio < 1 else "faster than"
    acc = (f", {g['accumulated_tflops']:.0f} with the weight gradients' accumulation into the gradient buffer"
           if g.get("accumulated_tflops") else "")
    return (f" ({g['table_tflops']:.0f} on the GEMM table at one expert's shape{acc}: priced {side} their "
            "kernels)")


def _first(model_dir):
    """Each run's first projection by (case file, strategy); {} where none is committed."""
    path = os.path.join(model_dir, "project_first.jsonl")
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        return {(r["case_file"], r["strategy"]): r for r in map(json.loads, filter(str.strip, f))}


def _speed_error(r, values):
    """The projection's throughput error in % (a shorter step is a faster run), or None."""
    t = _throughput(r, values)
    if not t or not t[1]:
        return None
    quantity, ours, theirs = t
    return _err(theirs, ours) if quantity == "step (s)" else _err(ours, theirs)


def _in_range(r, err):
    """(whether the range holds the published speed, its half-width as a share of the projection),
    from a projection's line and its throughput error in %."""
    span = r["tokens_per_s_gpu_range"]
    low, high = span[0] / r["tokens_per_s_gpu"], span[1] / r["tokens_per_s_gpu"]
    ratio = 1 / (1 + err / 100)  # the published speed over the projected
    return low <= ratio <= high, (high - low) / 2


def runs(model_dir):
    """One dict per published run (a case's strategy with published figures) of the validation's lines."""
    src = os.path.join(model_dir, "project_validation.jsonl")
    if not os.path.exists(src):
        return []
    return published_runs(R.load_projections(src, added=("case_file",)), _first(model_dir))


def published_runs(lines, first=None):
    """One dict per published run of `memfine project --json`'s lines (a case's strategy with
    published figures); `first`: their first projections by (case file, strategy), if any."""
    out, first = [], first or {}
    for r in lines:
        pub = r.get("published")
        if not pub or not r.get("strategy"):
            continue
        values = pub["values"]
        case = os.path.splitext(os.path.basename(r.get("case_file", r["project"])))[0]
        row = {"case": case, "pair": case.startswith("pair_"), "ran": not pub.get("out_of_memory"),
               "framework": r.get("framework", "?"),
               "layout": _layout(r), "strategy": r["strategy"], "fit": r.get("fit", "yes" if r["fits"] else "no"),
               "fits": r["fits"], "need_gb": r.get("need_gb", r["peak_gb"]), "usable_gb": r.get("usable_gb"),
               "source": pub["source"],
               "commit": r.get("git_commit", "?"), "calibration": pub.get("calibration", ""),
               "known_issue": pub.get("known_issue", ""), "record": r}
        f = first.get((r.get("case_file"), r["strategy"]))
        if f is not None:
            row["first_date"] = f.get("date", "")
            row["first_fit"] = f.get("fit", "yes" if f.get("fits") else "no")
        for key, mine in PEAK_KEYS:
            if key in values:
                row["peak"] = (key, r[mine], values[key], _err(r[mine], values[key]))
                if f is not None and f.get(mine) is not None:  # the same figure against the first projection
                    row["first_peak"] = _err(f[mine], values[key])
                break
        t = _throughput(r, values)
        if t:
            quantity, ours, theirs = t
            # A shorter step is a faster run: the error is in speed, as for the others.
            err = _speed_error(r, values)
            row["throughput"] = (quantity, ours, theirs, err)
            if r.get("tokens_per_s_gpu_range") and r.get("tokens_per_s_gpu"):
                row["range"] = _in_range(r, err)
            if f is not None:
                row["first_error"] = _speed_error(f, values)
                # A first projection with a range entered after the range and the calibration were set:
                # neither was fitted on it.
                if f.get("tokens_per_s_gpu_range") and row["first_error"] is not None:
                    row["first_range"] = _in_range(f, row["first_error"])
            if row["calibration"]:
                row["why"] = "calibration source, not counted: " + row["calibration"]
            elif row["known_issue"]:
                row["why"] = "a known regression, not counted: " + row["known_issue"]
            elif abs(err) > MEDIAN_GOAL:
                row["why"] = _why(r, err)
                # What the source measured itself, beside the projection's reading.
                if pub.get("evidence"):
                    row["why"] += "; the source measured: " + pub["evidence"]
        out.append(row)
    return out


def pairs(rows):
    """Learned-routing pairs: (name, projected ratio, measured ratio, error %)."""
    by = {}
    for r in rows:
        if r["pair"] and "throughput" in r:
            base, kind = r["case"].rsplit("_", 1)
            by.setdefault(base, {})[kind] = r["throughput"]
    out = []
    for base, kinds in sorted(by.items()):
        if {"forced", "learned"} <= set(kinds):
            f, l = kinds["forced"], kinds["learned"]
            ours, theirs = l[1] / f[1], l[2] / f[2]
            out.append((base, ours, theirs, _err(ours, theirs)))
    return out


def _throughput_check(errors):
    """(median absolute error, how many over the worst goal, how many) of throughput errors in %."""
    return (statistics.median(abs(e) for e in errors) if errors else float("nan"),
            sum(abs(e) > WORST_GOAL for e in errors), len(errors))


FIT_ROWS, FIT_COLUMNS = ("ran", "out of memory"), ("yes", "borderline", "no")


def fit_counts(rows, fit):
    """What the source saw (ran or out of memory) against the fit a row's `fit` key says: counts."""
    matrix = {(a, b): 0 for a in FIT_ROWS for b in FIT_COLUMNS}
    for r in rows:
        matrix[(FIT_ROWS[0] if r["ran"] else FIT_ROWS[1], r[fit])] += 1
    return matrix


def summary(rows):
    """The checks' verdicts over the published runs."""
    thr = [r["throughput"][3] for r in rows if "throughput" in r and not r["calibration"] and not r["known_issue"]]
    first = [r["first_error"] for r in rows if r.get("first_error") is not None and not r["calibration"]
             and not r["known_issue"]]
    with_issues = [r["throughput"][3] for r in rows if "throughput" in r and not r["calibration"]]
    median, over_worst, _ = _throughput_check(thr)
    peaks = [r["peak"][3] for r in rows if "peak" in r]
    pr = pairs(rows)
    ran = [r for r in rows if r["ran"]]
    matrix = fit_counts(rows, "fit")
    ranged = [r["range"] for r in rows if "range" in r and not r["calibration"] and not r["known_issue"]]
    entered = [r for r in rows if "first_range" in r and not r["calibration"] and not r["known_issue"]]
    after = [(what, commit, [r for r in entered if r["first_date"] >= since]) for what, commit, since in LATER_CHANGES]
    fit_after = [(what, commit, [r for r in rows if r.get("first_date", "") >= since])
                 for what, commit, since in LATER_FIT_CHANGES]
    return {
        "runs": len(rows),
        # Every layout that ran, the learned-routing pairs' as well: each is checked for fit.
        "fit": (sum(r["fits"] for r in ran), len(ran)),
        "misfits": [(r["case"], r["need_gb"]) for r in ran if r["fit"] == "no"],
        "matrix": matrix,
        "negatives": [r for r in rows if not r["ran"]],
        "range": (sum(h for h, _ in ranged), len(ranged), statistics.median(w for _, w in ranged) if ranged else None),
        "held_out": E.held_out(),
        "held_out_by_family": E.judged("held_out_by_family", "source_families"),
        "in_order": E.judged("in_order", "in_order_runs"),
        "need_ranges": E.need_ranges(),
        "borderline": sum(r["fit"] == "borderline" for r in ran),
        "peaks": peaks,
        "peaks_within": sum(abs(e) <= PEAK_GOAL for e in peaks),
        "throughput": thr,
        "median": median,
        "over_worst": over_worst,
        "pairs": pr,
        "pairs_within": sum(abs(p[3]) <= PAIR_GOAL for p in pr),
        "calibration": [r["case"] for r in rows if r["calibration"]],
        "known_issue": sorted({r["case"] for r in rows if r["known_issue"]}),
        "with_known_issues": _throughput_check(with_issues),
        "first": _throughput_check(first),
        "by_source": SRC.by_source(rows),
        # Runs held out from the range and the calibration: their first projections carry both.
        "entered": {"throughput": _throughput_check([r["first_error"] for r in entered]),
                    "now": _throughput_check([r["throughput"][3] for r in entered]),
                    # The range today's projection carries, on the same runs: what a user sees now.
                    "now_held": sum(r["range"][0] for r in entered if "range" in r),
                    "now_ranged": sum("range" in r for r in entered),
                    "peaks": [r["peak"][3] for r in entered if "peak" in r],
                    "past": sum(abs(r["first_error"]) > HELD_OUT_WORST for r in entered),
                    "held": sum(r["first_range"][0] for r in entered),
                    "half_width": statistics.median(r["first_range"][1] for r in entered) if entered else None,
                    "runs": [r["case"] for r in entered],
                    # The held-out goals at their first projection and at today's.
                    "goals": [("at their first projection",
                               H.goals([r["first_error"] for r in entered], [r["first_range"] for r in entered],
                                       [r["first_peak"] for r in entered if "first_peak" in r],
                                       sum(r["first_fit"] == "no" for r in entered), len(entered))),
                              ("today's projection",
                               H.goals([r["throughput"][3] for r in entered],
                                       [r["range"] for r in entered if "range" in r],
                                       [r["peak"][3] for r in entered if "peak" in r],
                                       sum(r["fit"] == "no" for r in entered), len(entered)))]},
        # Runs first projected with a later change in place: its own test.
        "after": [{"what": what, "commit": commit,
                   "throughput": _throughput_check([r["first_error"] for r in runs]),
                   "held": sum(r["first_range"][0] for r in runs), "runs": [r["case"] for r in runs]}
                  for what, commit, runs in after],
        # Layouts first projected with a later change to fit in place: their first fit, its own test.
        "fit_after": [{"what": what, "commit": commit,
                       "matrix": fit_counts(runs, "first_fit"),
                       "runs": [r["case"] for r in runs]}
                      for what, commit, runs in fit_after],
    }


def peak_cell(r):
    """A run's peak, projected against published, as a table shows it."""
    key, ours, theirs, e = r.get("peak", (None,) * 4)
    return "-" if key is None else f"{ours:.1f} vs {theirs:g} ({e:+.1f}%{PEAK_NOTE.get(key, '')})"


def throughput_cell(r):
    """A run's throughput, projected against published, as a table shows it."""
    q, ours, theirs, e = r.get("throughput", (None,) * 4)
    digits = 2 if q == "step (s)" else 1 if q and "TFLOP" in q else 0
    return "-" if q is None else f"{ours:.{digits}f} vs {theirs:g} {q} ({e:+.1f}%)"


def table_rows(rows):
    """The validation table: a row per published run."""
    out = []
    for r in rows:
        peak, thr = peak_cell(r), throughput_cell(r)
        out.append([r["case"] + (" (pair)" if r["pair"] else "") + (" (calibration)" if r["calibration"] else "")
                    + (" (known issue)" if r["known_issue"] else ""),
                    r["framework"], f"{r['layout']}, {r['strategy']}",
                    f"{r['fit']} ({r['need_gb']:.1f} of {r['usable_gb']:.1f} GB)" if r.get("usable_gb")
                    else f"{r['fit']} ({r['need_gb']:.1f} GB)", peak, thr,
                    f"{r['first_error']:+.1f}%" if r.get("first_error") is not None else "-", r.get("why", "")])
    return out


def header():
    return ["run", "framework", "layout, strategy", "fits (needs, of the GPU's memory)", "peak GB: projected vs published",
            "throughput: projected vs published", "at its first projection",
            "why it misses (the projection's own parts)"]


def fit_matrix(s):
    """Fit as a confusion matrix: what the source saw (rows) against what the projection said."""
    return T.markdown(["the source saw"] + [f"projected {c}" for c in FIT_COLUMNS],
                      [[a] + [str(s["matrix"][(a, b)]) for b in FIT_COLUMNS] for a in FIT_ROWS])


def later_table(s):
    """Each change made after its checked runs were seen against the runs first projected with it in
    place (its own test), a row each; project_validation.md names the runs."""
    rows = [[f"{a['what']} ({a['commit']})", str(a["throughput"][2])]
            + ([f"{a['throughput'][0]:.1f}%", str(a["throughput"][1]), f"{a['held']} of {a['throughput'][2]}"]
               if a["throughput"][2] else ["-", "-", "-"]) for a in s["after"]]
    return T.markdown(["change made after its checked runs were seen", "runs entered since",
                       "median absolute error at their first projection", f"over {WORST_GOAL:g}%",
                       "the range held"], rows)


def verdict_lines(s, names=True):
    """The checks in words, each against its goal; the first-projection figures first: the errors a
    run new to the projection saw. Without `names`, the runs held out from a later change are counted,
    not named, and each change's own test is left to later_table."""
    fit = s["fit"]
    lines = []
    if s["first"][2]:
        lines.append(f"- Throughput at each run's first projection (what the projection said before any change "
                     f"made after the run entered the set): median absolute error {s['first'][0]:.1f}% over "
                     f"{s['first'][2]} runs; {s['first'][1]} over {WORST_GOAL:g}%.")
    if s.get("by_source"):
        srcs = sorted(s["by_source"].items(), key=lambda kv: (-len(kv[1]), kv[0]))
        meds = [statistics.median(abs(e) for e in es) for _, es in srcs]
        lines.append("- The same by source family (a case file's name begins with it): "
                     + "; ".join(f"{k} {m:.1f}% ({len(es)} run{'s' * (len(es) > 1)}, {sum(e > 0 for e in es)} too fast)"
                                 for (k, es), m in zip(srcs, meds))
                     + f"; each family weighed once (the median of their medians): {statistics.median(meds):.1f}%.")
    if s.get("held_out"):
        cov, half, n, level = s["held_out"]
        lines.append(f"- Range (`tokens_per_s_gpu_range`, {100 * level:.0f}% split conformal over the first "
                     f"projections' errors, experiments/project/errors.yaml): leave-one-out on {n} first "
                     f"projections it held {100 * cov:.1f}% of the published figures (goal at least "
                     f"{100 * HELD_OUT_HELD:.0f}%), median half-width {100 * half:.1f}% (goal at most "
                     f"{100 * HELD_OUT_HALF_WIDTH:.0f}%)"
                     + ("; leaving each source family out (its runs against the range from the other families', "
                        "what a new source's runs face) it held {:.1f}%, median half-width {:.1f}% over {} families"
                        .format(100 * s["held_out_by_family"][0], 100 * s["held_out_by_family"][1],
                                s["held_out_by_family"][2]) if s.get("held_out_by_family") else "")
                     + ("; in the order the runs entered (each against the range from the runs first projected "
                        "before it, as a new run meets it) it held {:.1f}% of {}, median half-width {:.1f}%".format(
                            100 * s["in_order"][0], s["in_order"][2], 100 * s["in_order"][1]) if s.get("in_order") else "")
                     + (f"; on today's projections of the {s['range'][1]} counted runs (the calibration was fitted on "
                        f"those that entered before it) it holds {s['range'][0]}, median half-width {100 * s['range'][2]:.1f}%"
                        if s["range"][1] else "") + ".")
    if s.get("need_ranges") and s["need_ranges"][0]:
        ranges, held = s["need_ranges"]
        lines.append("- Need's range (`need_gb_range`, by framework profile, over the first projections' peak errors "
                     "and the fits they contradicted, experiments/project/errors.yaml): "
                     + ", ".join(f"{f} x [{lo:.3f}, {hi:.3f}] ({n} runs)" for f, n, lo, hi in ranges)
                     + (f"; leave-one-out it held {100 * held:.0f}%." if held is not None else "."))
    e = s.get("entered")
    if e and s.get("held_out"):
        med, over, n = e["throughput"]
        lines.append(f"- Runs that entered after the range and the calibration were set (neither was fitted on them): "
                     + (f"{n}; at their first projection, median absolute throughput error {med:.1f}%, {over} over "
                        f"{WORST_GOAL:g}% and {e['past']} over {HELD_OUT_WORST:g}% (the held-out goal: none); the range "
                        f"held {e['held']} of {n}, median half-width "
                        f"{100 * e['half_width']:.1f}%" + (f" ({', '.join(e['runs'])})" if names else "")
                        + f". Today's projection of them, whose "
                        f"calibration was fitted without them (its form chosen after the first projections of those "
                        f"that entered before it): median {e['now'][0]:.1f}%, {e['now'][1]} over {WORST_GOAL:g}%"
                        + (f"; the range it carries holds {e['now_held']} of {e['now_ranged']} (the goal: at least "
                           f"{100 * s['held_out'][3]:.0f}%)" if e["now_ranged"] else "")
                        + (f"; it puts {sum(abs(p) <= PEAK_GOAL for p in e['peaks'])} of the {len(e['peaks'])} "
                           f"peaks they published within {PEAK_GOAL:g}%" if e["peaks"] else "") + "."
                        if n else "none yet."))
        for a in s["after"] if names else ():
            med, over, n = a["throughput"]
            lines.append(f"- Runs that entered after {a['what']} ({a['commit']}), its own test: "
                         + (f"{n}; at their first projection, median absolute throughput error {med:.1f}%, "
                            f"{over} over {WORST_GOAL:g}%; the range held {a['held']} of {n} "
                            f"({', '.join(a['runs'])})." if n else "none yet."))
    m = s["matrix"]
    lines.append(f"- Fit: of {fit[1]} published layouts that ran, {m[('ran', 'yes')]} projected to fit at usable_memory "
                 f"1.0 and {m[('ran', 'borderline')]} borderline (within the framework's margin of the limit, or "
                 f"the need's range across it), {m[('ran', 'no')]} not"
                 + (f"; projected not to fit: {', '.join(f'{c} ({g:.1f} GB)' for c, g in s['misfits'])}"
                    if s["misfits"] else "") + "; "
                 + (f"of {len(s['negatives'])} that ran out of memory ({', '.join(r['case'] for r in s['negatives'])}), "
                    f"{s['matrix'][('out of memory', 'no')]} projected not to fit, "
                    f"{s['matrix'][('out of memory', 'borderline')]} borderline, "
                    f"{s['matrix'][('out of memory', 'yes')]} to fit (the matrix below)."
                    if s["negatives"] else "no run that ran out of memory is in the set."))
    for a in s.get("fit_after", []):
        m, n = a["matrix"], len(a["runs"])
        ran = sum(m[(FIT_ROWS[0], b)] for b in FIT_COLUMNS)
        lines.append(f"- Layouts first projected after {a['what']} ({a['commit']}), its own test: "
                     + (f"{n}; at their first projection, of {ran} that ran {m[(FIT_ROWS[0], 'yes')]} to fit, "
                        f"{m[(FIT_ROWS[0], 'borderline')]} borderline, {m[(FIT_ROWS[0], 'no')]} not"
                        + (f"; of {n - ran} that ran out of memory {m[(FIT_ROWS[1], 'no')]} not to fit, "
                           f"{m[(FIT_ROWS[1], 'borderline')]} borderline, {m[(FIT_ROWS[1], 'yes')]} to fit"
                           if n > ran else "; none that ran out of memory yet")
                        + (f" ({', '.join(a['runs'])})." if names else ".") if n else "none yet."))
    if s["peaks"]:
        lines.append(f"- Peak memory: {s['peaks_within']} of {len(s['peaks'])} published peaks within {PEAK_GOAL:g}% "
                     f"(errors {', '.join(f'{e:+.1f}%' for e in s['peaks'])}).")
    if s["throughput"]:
        lines.append(f"- Throughput, today's projection"
                     + (" (in sample for the runs that entered before errors.yaml's layer_pass_s, which was fitted on "
                        "them; the first projections above are the out-of-sample figures)" if s.get("held_out") else "")
                     + f": median absolute error {s['median']:.1f}% over {len(s['throughput'])} runs (goal at "
                     f"most {MEDIAN_GOAL:g}%); {s['over_worst']} over {WORST_GOAL:g}% (goal: none)"
                     + (f"; not counted, as calibration sources: {', '.join(s['calibration'])}" if s["calibration"]
                        else "")
                     + (f"; not counted, as known regressions of their framework: {', '.join(s['known_issue'])} "
                        f"(counted, the median is {s['with_known_issues'][0]:.1f}% over {s['with_known_issues'][2]} "
                        f"runs, {s['with_known_issues'][1]} over {WORST_GOAL:g}%)" if s["known_issue"] else "") + ".")
    for base, ours, theirs, e in s["pairs"]:
        lines.append(f"- Learned routing, {base}: learned over force-balanced {ours:.3f} projected, {theirs:.3f} "
                     f"measured ({e:+.1f}%; goal within {PAIR_GOAL:g}%).")
    return lines
