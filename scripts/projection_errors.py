#!/usr/bin/env python3
"""How sure `memfine project` is, from its validation: writes experiments/project/errors.yaml, which
`memfine project` reads beside its presets to put a range on every answer.

- speed: the range of tokens/s a GPU (and step time) is split conformal at 80%, equal tails, from
  the residuals log(published / projected) of every run's FIRST projection
  (results/model/project_first.jsonl: what the projection said before any change made after the
  run entered the set), both framework families pooled (the FSDP family has too few runs for an
  80% range of its own: split conformal needs 9), known regressions left out. The residuals are
  centred on their median: the range's spread is theirs, its centre the calibrated projection's.
  Judged leave-one-out, leaving each source family out (a case file's name begins with it; a
  family's runs share its unknowns, as a new source's runs share theirs), and in the order the runs
  entered (each against the range from those first projected before it: no later run's error),
  each range centred as `memfine project` applies it.
- layer_pass_s: the one calibration term, named as one: a fixed time for each layer's pass of a
  micro-batch (forward and backward) on a pipeline rank, the median over its fit set of (published
  step - projected step without the term) / the layer passes its step waits for on a rank (its own
  micro-batches' and the pipeline's fill and drain's, times the share of the layer's host launches
  CUDA graphs do not replay: the line's calibration_passes); `memfine project` adds it to every
  step. A run graphed whole pays none of it and is left out of the fit. The fit set is fixed: the runs results/model/project_validation.jsonl held at the
  commit named in the file (calibration sources left out, known regressions as their files say
  today); the projection is today's, its step less the term's part, so the term follows the priced
  parts as they change and never sees a run that entered after it. It is judged leave-one-out (each
  run's error with the term fitted on the others) and on runs that enter after it.
- memory: the range of the need is symmetric in log: x [e^-q, e^q], q split conformal at 80% of
  |log(published peak / projected peak)| over the first projections of the runs that published a
  peak (allocated, else reserved, else the device's used memory against the projected need), and,
  for a run that published none, the least its fit says the first projection missed by (one that
  ran projected over the limit, one that ran out of memory under it: |log(limit / projected
  need)|), by framework profile, whose memory each prices apart; a profile with too few of its own
  for an 80% bound (4) takes the wider of every profile's pooled bound and its own largest miss.

    scripts/python scripts/projection_errors.py [--check]   # --check: fail if the file is stale (77: no history)
"""
import argparse
import functools
import json
import math
import os
import re
import statistics
import subprocess
import sys

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from plots import sources as SRC  # noqa: E402
from plots import validation as V  # noqa: E402

FIRST = "results/model/project_first.jsonl"
CURRENT = "results/model/project_validation.jsonl"
OUT = "experiments/project/errors.yaml"
LEVEL = 0.8
# The commit of CURRENT whose runs are the calibration term's fit set (fixed: a run entered later
# never joins it); the term is refit on them under today's projection without it.
BEFORE = "dfabd24"
PRESET = re.compile(r"[a-z0-9_]+")  # a model preset's name, as models.yaml keys them
# `seen_micro_batches`' bins of micro-batches a step on a rank (the projection's micro_batches):
# powers of four, [from, to], the last open.
MICRO_BATCH_BINS = ((1, 4), (5, 16), (17, 64), (65, None))


def lines(path, commit=None):
    if commit:
        text = git_show(commit, path)
    else:
        with open(os.path.join(ROOT, path)) as f:
            text = f.read()
    return [json.loads(x) for x in text.splitlines() if x.strip()]


def key(r):
    return r["case_file"], r["strategy"]


def case_model(case_file, commit):
    """(layers, sequence length) of a case file's model as it was at `commit`: inline, or its preset
    in experiments/project/models.yaml."""
    def load(path):
        return yaml.safe_load(git_show(commit, path))
    case = load(case_file)
    model = case["model"]
    if isinstance(model, str):
        model = load("experiments/project/models.yaml")[model]
    return model["layers"], case.get("seq", model["seq"])


@functools.lru_cache(maxsize=None)  # every run's case reads the same models file at the same commit
def git_show(commit, path):
    return subprocess.run(["git", "-C", ROOT, "show", f"{commit}:{path}"], check=True, capture_output=True,
                          text=True).stdout


def step_pair(r, values, commit):
    """(published step, projected step, layer passes the term is paid for) of a run's line, or None:
    the published step from its step time, else its tokens/s, else its TFLOP/s against the
    projection's."""
    _, seq = case_model(r["case_file"], commit)
    l = r["layout"]
    # As the projection counts them (the line's calibration_passes): a pipeline rank's micro-batches
    # and the pipeline's fill and drain, less the share of launches CUDA graphs replay.
    passes = r["calibration_passes"]
    if "step_s" in values:
        published = values["step_s"]
    elif "tokens_per_s_gpu" in values:
        published = l["global_batch"] * seq / (values["tokens_per_s_gpu"] * r["gpus"])
    elif "model_tflops_gpu" in values:
        published = r["step_s"] * r["model_tflops_gpu"] / values["model_tflops_gpu"]
    else:
        return None
    return published, r["step_s"], passes


def uncalibrated(now):
    """(published step, projected step less the calibration term's part, layer passes) of a run's line
    as the projection gives it today, or None: what the term is fitted on, whatever term made the line."""
    s = step_pair(now, now["published"]["values"], "HEAD")
    # A run graphed whole pays none of the term: it says nothing of it.
    return None if s is None or s[2] <= 0 else (s[0], s[1] - now["step_parts_s"]["calibration"], s[2])


def tokens_per_pass(now):
    """Tokens a GPU holds in one layer pass of a micro-batch, as a run's line lays it out."""
    _, seq = case_model(now["case_file"], "HEAD")
    l = now["layout"]
    return l["micro_batch"] * seq / (l.get("tp", 1) * l.get("cp", 1))


# The calibration term's form against others fitted the same way (the median over its fit set of
# what each form holds fixed): (name, that value from a run's published step t, its step t0 without
# the term, layer passes n and tokens a pass k; the step it projects from the value).
FORMS = (("a fixed time a layer pass (the term's)", lambda t, t0, n, k: (t - t0) / n, lambda c, t0, n, k: t0 + c * n),
         ("a time per token a layer pass", lambda t, t0, n, k: (t - t0) / (n * k), lambda c, t0, n, k: t0 + c * n * k),
         ("a share of the step", lambda t, t0, n, k: t / t0, lambda c, t0, n, k: c * t0))


def form_leave_one_out(runs, value, step):
    """Each run's (t, t0, n, k) absolute speed error (published step over projected, less 1) with the
    form's value fitted on the others."""
    return [abs(r[0] / step(statistics.median(value(*o) for o in runs[:i] + runs[i + 1:]), *r[1:]) - 1)
            for i, r in enumerate(runs)]


def micro_batch_bin(layout):
    """The MICRO_BATCH_BINS bin of a line's layout: its micro-batches a step on a rank."""
    m = SRC.micro_batches(layout)
    return next(b for b in MICRO_BATCH_BINS if b[0] <= m and (b[1] is None or m <= b[1]))


def speed_ratio(r, values):
    """published over projected speed, or None."""
    e = V._speed_error(r, values)
    return None if e is None else 1 / (1 + e / 100)


def peak_ratio(r, values):
    """published over projected peak: allocated where the source gives it, else reserved, else the
    device's used memory against the need (as the validation's peak check reads them), or None."""
    for key, mine in V.PEAK_KEYS:
        if key in values and r.get(mine):
            return values[key] / r[mine]
    return None


def fit_bound(first, now):
    """What a run's fit says of its need where it publishes no peak: a run that ran needed at most the
    limit, one that ran out of memory more; where the first projection said otherwise, the least it
    missed by, log(limit / projected need) (the true miss is larger), else None."""
    need, usable = first.get("need_gb"), now.get("usable_gb")
    if not need or not usable:
        return None
    oom = bool(now["published"].get("out_of_memory"))
    return math.log(usable / need) if (need > usable) != oom else None


def equal_tails(xs, level=LEVEL):
    """Split conformal's equal-tailed interval of `xs` at `level`: (low, high), None past the data."""
    xs, n = sorted(xs), len(xs)
    lo, hi = math.floor((n + 1) * (1 - level) / 2), math.ceil((n + 1) * (1 + level) / 2)
    return (xs[lo - 1], xs[hi - 1]) if lo >= 1 and hi <= n else None


def centred_tails(xs, level=LEVEL):
    """The range as `memfine project` applies it about a projection: equal_tails of `xs` less their
    median; None past the data."""
    if not xs:
        return None
    centre = statistics.median(xs)
    return equal_tails([x - centre for x in xs], level)


def symmetric(xs, level=LEVEL):
    """Split conformal's bound on |x| at `level`, None past the data."""
    xs, n = sorted(abs(x) for x in xs), len(xs)
    k = math.ceil((n + 1) * level)
    return xs[k - 1] if k <= n else None


def memory_bound(peaks, framework):
    """q of a profile's need range x [e^-q, e^q] and whether it is its own: with too few of its own
    for the level, the wider of every profile's pooled bound and its own largest miss; None past the
    data."""
    own = symmetric(peaks[framework])
    if own is not None:
        return own, True
    pooled = symmetric([x for xs in peaks.values() for x in xs])
    widest = max((abs(x) for x in peaks[framework]), default=None)
    bounds = [b for b in (pooled, widest) if b is not None]
    return (max(bounds) if bounds else None), False


def memory_leave_one_out(peaks):
    """Share of the peaks inside their profile's bound from the others' peaks, by the same rule."""
    held = tried = 0
    for f, xs in peaks.items():
        for i, x in enumerate(xs):
            q, _ = memory_bound({**peaks, f: xs[:i] + xs[i + 1:]}, f)
            if q is not None:
                tried += 1
                held += abs(x) <= q
    return held / tried if tried else None


def measure():
    current = {key(r): r for r in lines(CURRENT) if r.get("published") and r.get("strategy")}
    first = {key(r): r for r in lines(FIRST)}
    # The peaks by the framework profile that prices each run today (each prices memory apart; a run
    # moved to a new profile brings the error its first projection made under the old): every profile
    # the validation projects gets a range, one without peaks of its own the pooled one.
    speed, sources, entered, peaks, seen, seen_hardware, seen_batches = [], [], [], {}, {}, {}, {}
    for k, r in sorted(first.items()):
        now = current.get(k)
        if now is None or now["published"].get("known_issue"):
            continue
        values = now["published"]["values"]
        if (s := speed_ratio(r, values)) is not None:
            speed.append(math.log(s))
            sources.append(SRC.family(os.path.basename(k[0])))
            entered.append(r.get("results_commit") or r["date"])
            run = (V._speed_error(r, values), math.log(s))
            if PRESET.fullmatch(now["model"]):  # a model written inline is its file's own
                seen.setdefault((now["framework"], now["model"]), []).append(run)
            if PRESET.fullmatch(now["hardware"]):
                seen_hardware.setdefault(now["hardware"], []).append(run)
            seen_batches.setdefault(micro_batch_bin(now["layout"]), []).append(run)
        mine = peaks.setdefault(now["framework"], [])
        if (p := peak_ratio(r, values)) is not None:
            mine.append(math.log(p))
        elif (c := fit_bound(r, now)) is not None:
            mine.append(c)
    # The runs the term is fitted on are fixed: calibration sources as BEFORE marked them (a source
    # chosen later must not refit the term), regressions as their files say today; each at today's
    # projection without the term (its step less the term's part).
    before = {key(r): r for r in lines(CURRENT, BEFORE) if r.get("published") and r.get("strategy")}
    # Each as (t, t0, n, k): FORMS' arguments, and its GPU.
    counted = [(*s, tokens_per_pass(current[k]), current[k]["hardware"]) for k, r in sorted(before.items())
               if k in current and not current[k]["published"].get("known_issue")
               and not r["published"].get("calibration") and (s := uncalibrated(current[k])) is not None]
    # A run entered with its first projection's batch (the results commit that wrote it): a batch
    # enters at its first line's date.
    batch = {}
    for r in first.values():
        b = r.get("results_commit") or r["date"]
        batch[b] = min(batch.get(b, r["date"]), r["date"])
    return speed, sources, [batch[b] for b in entered], peaks, counted, seen, seen_hardware, seen_batches


def leave_one_out(xs, interval):
    """Share of xs inside the interval from the others, and the intervals' median half-width (share)."""
    held, widths = 0, []
    for i, x in enumerate(xs):
        iv = interval(xs[:i] + xs[i + 1:])
        if iv is None:
            continue
        lo, hi = iv
        held += lo <= x <= hi
        widths.append((math.exp(hi) - math.exp(lo)) / 2)
    return (held / len(widths), statistics.median(widths)) if widths else (None, None)


def leave_source_out(xs, sources, interval):
    """Each source family's runs against the interval from the other families' (the test a new source's
    runs face: one source's runs share its unknowns): the share of the judged runs held, the intervals'
    median half-width (share) over the families, and how many families were judged; (None, None, 0)
    where no family has others to be judged by."""
    held = judged = 0
    widths = []
    for src in sorted(set(sources)):
        iv = interval([x for x, s in zip(xs, sources) if s != src])
        if iv is None:
            continue
        mine = [x for x, s in zip(xs, sources) if s == src]
        held += sum(iv[0] <= x <= iv[1] for x in mine)
        judged += len(mine)
        widths.append((math.exp(iv[1]) - math.exp(iv[0])) / 2)
    return (held / judged, statistics.median(widths), len(widths)) if widths else (None, None, 0)


def in_order(xs, entered, interval):
    """Each run against the interval from the runs first projected before it (`entered`: when its first
    projection's batch was written; runs projected together, none judging another), as a new run
    meets the range: the share of the judged runs held, the intervals' median half-width (share) and
    how many were judged; (None, None, 0) where no run has enough before it."""
    held, widths = 0, []
    for x, when in zip(xs, entered):
        iv = interval([y for y, w in zip(xs, entered) if w < when])
        if iv is None:
            continue
        held += iv[0] <= x <= iv[1]
        widths.append((math.exp(iv[1]) - math.exp(iv[0])) / 2)
    return (held / len(widths), statistics.median(widths), len(widths)) if widths else (None, None, 0)


def _seen_entry(runs, lo, hi):
    """A `seen` entry of (error %, log residual) runs: the count, how many were projected too fast and
    how many the range (residuals centred, within [lo, hi]) holds, and the lowest, median and highest
    first-projection error."""
    errs = [e for e, _ in runs]
    held = sum(lo <= x <= hi for _, x in runs)
    return (f"{{runs: {len(runs)}, too_fast: {sum(e > 0 for e in errs)}, held: {held}, "
            f"low: {min(errs):.1f}, median: {statistics.median(errs):.1f}, high: {max(errs):.1f}}}")


def seen_text(seen, lo, hi):
    """errors.yaml's `seen`: by profile, then model, an entry of its runs (_seen_entry)."""
    out = []
    for f in sorted({f for f, _ in seen}):
        out.append(f"  {f}:")
        out += [f"    {m}: {_seen_entry(runs, lo, hi)}" for (g, m), runs in sorted(seen.items()) if g == f]
    return "\n".join(out)


def seen_hardware_text(seen_hardware, lo, hi):
    """errors.yaml's `seen_hardware`: by hardware preset, an entry of its runs (_seen_entry)."""
    return "\n".join(f"  {h}: {_seen_entry(runs, lo, hi)}" for h, runs in sorted(seen_hardware.items()))


def seen_micro_batches_text(seen_batches, lo, hi):
    """errors.yaml's `seen_micro_batches`: by bin of micro-batches a step, its bounds and an entry of
    its runs (_seen_entry); a bin without runs is left out."""
    out = []
    for b in sorted(seen_batches):
        name = f"{b[0]}-{b[1]}" if b[1] is not None else f"{b[0]}+"
        bounds = f"from: {b[0]}" + (f", to: {b[1]}" if b[1] is not None else "")
        out.append(f"  '{name}': {{{bounds}, {_seen_entry(seen_batches[b], lo, hi)[1:]}")
    return "\n".join(out)


def render():
    speed, sources, entered, peaks, counted, seen, seen_hardware, seen_batches = measure()
    runs = [c[:4] for c in counted]
    centre = statistics.median(speed)
    lo, hi = centred_tails(speed)
    per_pass = statistics.median(FORMS[0][1](*r) for r in runs)
    # Each judged as it is applied: centred on the projection.
    cov, width = leave_one_out(speed, centred_tails)
    src_cov, src_width, n_sources = leave_source_out(speed, sources, centred_tails)
    order_cov, order_width, n_order = in_order(speed, entered, centred_tails)
    ordered = (f"""  # In the order the runs entered (each judged by the range from the runs first projected before it,
  # as a new run meets it; the {len(speed) - n_order} first had too few before them): held {order_cov:.1%} of {n_order},
  # median half-width {order_width:.1%}.
  in_order_runs: {n_order}
  in_order_coverage: {order_cov:.6f}
  in_order_half_width: {order_width:.6f}""" if n_order else "  # Too few runs to judge any in the order they entered.")
    by_family = (f"""  # Leave one source family out (a case file's name begins with it: one publisher's documents or
  # study; each family's runs judged by the range from the other families' runs, the test a new
  # source's runs face): held {src_cov:.1%} of the runs, median half-width {src_width:.1%} over {n_sources} families.
  source_families: {n_sources}
  held_out_by_family_coverage: {src_cov:.6f}
  held_out_by_family_half_width: {src_width:.6f}""" if n_sources else "  # Too few source families to leave one out.")
    mcov = memory_leave_one_out(peaks)
    loo_memory = (f"Leave-one-out (each peak's bound from the others', by the same rule): held {mcov:.0%}."
                  if mcov is not None else "Too few peaks to leave one out.")
    profiles = []
    for f in sorted(peaks):
        q, own = memory_bound(peaks, f)
        profiles.append(f"  {f}: {{runs: {len(peaks[f])}, low: {math.exp(-q):.4f}, high: {math.exp(q):.4f}}}"
                        + ("" if own else "  # too few of its own: the pooled bound or its widest miss"))
    profiles = "\n".join(profiles)
    forms = [(name, form_leave_one_out(runs, value, step)) for name, value, step in FORMS]
    loo = forms[0][1]
    others = ";\n# ".join(f"{name} {100 * statistics.median(e):.1f}% ({sum(x > 0.25 for x in e)})" for name, e in forms[1:])
    gpus = ", ".join(sorted({c[4] for c in counted}))
    raw = [abs(t / t0 - 1) for t, t0, _, _ in runs]
    return f"""# How sure `memfine project` is, from its validation (generated: scripts/python scripts/projection_errors.py;
# do not edit). `memfine project` reads it beside its presets: each answer's range, and the one
# calibration term. From {FIRST} and {CURRENT} (the term's fit set: its runs at {BEFORE}).
speed:
  # tokens/s a GPU: the calibrated projection x [low, high], split conformal at {LEVEL:.0%} (equal tails) over
  # {len(speed)} runs' first-projection residuals log(published / projected), centred on their median
  # ({math.exp(centre):.4f}), both framework families pooled, known regressions left out.
  level: {LEVEL}
  runs: {len(speed)}
  low: {math.exp(lo):.4f}
  high: {math.exp(hi):.4f}
  # Leave-one-out on the first projections (each run's range from the others'): held {cov:.1%},
  # median half-width {width:.1%}.
  held_out_coverage: {cov:.6f}
  held_out_half_width: {width:.6f}
{by_family}
{ordered}
# A calibrated constant: seconds for each layer's pass of a micro-batch (forward and backward) on a
# pipeline rank beside its priced parts, the median of (published - projected step) / the layer
# passes its step waits for on a rank (its own and the fill and drain's, times the share of the
# layer's launches CUDA graphs leave to the host: framework.cuda_graphs) over the {len(counted)}
# counted runs (neither calibration sources nor known regressions) of
# {CURRENT} at {BEFORE}, at today's projection without the term (each step
# less the term's part); it is added to every projected step. Leave-one-out (fitted on the others):
# median speed error {100 * statistics.median(loo):.1f}% ({sum(e > 0.25 for e in loo)} over 25%), against {100 * statistics.median(raw):.1f}% ({sum(e > 0.25 for e in raw)}) without it.
# Other forms fitted the same way (the median over the same runs), leave-one-out:
# {others}.
# Its runs' GPUs: {gpus}; how the term carries to another GPU is not measured (it is added unscaled);
# that CUDA graphs remove it with the launches they replay is stated, not fitted.
layer_pass_s: {per_pass:.6f}
memory:
  # the need: x [low, high] = [e^-q, e^q], q split conformal at {LEVEL:.0%} of |log(published peak / projected
  # peak)| over the first projections of the runs each framework profile prices today (a run moved to
  # a new profile brings its first projection's error) with a published peak (allocated, else
  # reserved, else the device's used memory against the need), and of |log(limit / projected need)|
  # for one without whose fit (ran, or out of memory) the projection contradicted; a profile with
  # fewer than 4 of its own takes the wider of every profile's pooled bound and its own largest miss.
  # {loo_memory}
  level: {LEVEL}
{profiles}
seen:
  # What the validation saw of each model preset under each framework profile: the throughput
  # errors (projected over published, less 1, in %) of the speed range's runs at their first
  # projection, and how many of them the range above holds; `memfine project` names them beside an
  # answer for the same model and profile.
{seen_text(seen, centre + lo, centre + hi)}
seen_hardware:
  # The same by hardware preset, whatever the model and profile: a GPU whose runs all missed one way
  # is less sure than the pooled range says; `memfine project` names its entry beside an answer.
{seen_hardware_text(seen_hardware, centre + lo, centre + hi)}
seen_micro_batches:
  # The same by micro-batches a step on a rank (bins of powers of four, from and to; the last open),
  # whatever the model, profile and GPU: the per-step costs weigh most where a step has few.
{seen_micro_batches_text(seen_batches, centre + lo, centre + hi)}
"""


def main(argv=None):
    ap = argparse.ArgumentParser(prog="projection_errors.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="fail if the committed file differs from what the results give")
    ap.add_argument("--out", default=os.path.join(ROOT, OUT))
    a = ap.parse_args(argv)
    try:
        text = render()
    except subprocess.CalledProcessError:
        print(f"projection_errors: {CURRENT} at {BEFORE} is not in this checkout's history (a shallow clone?)",
              file=sys.stderr)
        return 77 if a.check else 1
    if a.check:
        with open(a.out) as f:
            if f.read() != text:
                print(f"projection_errors: {a.out} is stale: run scripts/python scripts/projection_errors.py", file=sys.stderr)
                return 1
        return 0
    tmp = a.out + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, a.out)
    print(f"projection_errors: wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
