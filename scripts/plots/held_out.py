"""The goals for runs held out from `memfine project` (issue #66): the figures the validation's report
and scripts/judge_projection.py both set against them, each with its goal and whether it is met."""
import statistics

from . import tables as T

# The median absolute throughput error (%), the bound none may pass (%), the share of the published
# figures the range is to hold, its median half-width (a share), and a peak's bound (%).
HELD_OUT_MEDIAN, HELD_OUT_WORST, HELD_OUT_HELD, HELD_OUT_HALF_WIDTH, PEAK_GOAL = 15.0, 35.0, 0.8, 0.2, 10.0
HALF_WIDTH = "the range's median half-width"


def goals(errors, ranged, peaks, not_fit, ran):
    """(what, value, goal, met) a goal, `met` None where no run bears on it: from throughput errors in
    %, (held, half-width) of the ranges, peak errors in % (None: not judged), and how many of the
    `ran` layouts that ran were projected not to fit."""
    median = statistics.median(abs(e) for e in errors) if errors else None
    held = sum(h for h, _ in ranged)
    half = statistics.median(w for _, w in ranged) if ranged else None
    out = [("median absolute throughput error", median, f"at most {HELD_OUT_MEDIAN:g}%",
            None if median is None else median <= HELD_OUT_MEDIAN),
           (f"runs over {HELD_OUT_WORST:g}%", sum(abs(e) > HELD_OUT_WORST for e in errors), "none",
            None if not errors else all(abs(e) <= HELD_OUT_WORST for e in errors)),
           ("the range holds", f"{held} of {len(ranged)}", f"at least {100 * HELD_OUT_HELD:.0f}%",
            None if not ranged else held >= HELD_OUT_HELD * len(ranged)),
           (HALF_WIDTH, half, f"at most {100 * HELD_OUT_HALF_WIDTH:.0f}%",
            None if half is None else half <= HELD_OUT_HALF_WIDTH),
           ("layouts that ran projected not to fit", not_fit, "none", None if not ran else not_fit == 0)]
    if peaks is not None:
        within = sum(abs(p) <= PEAK_GOAL for p in peaks)
        out.append((f"peaks within {PEAK_GOAL:g}%", f"{within} of {len(peaks)}" if peaks else None, "all",
                    None if not peaks else within == len(peaks)))
    return out


def shown(what, value):
    """A goal's value as a table shows it."""
    if value is None:
        return "-"
    if isinstance(value, (str, int)):
        return str(value)
    return f"{100 * value:.1f}%" if what == HALF_WIDTH else f"{value:.1f}%"


def table(columns):
    """The goals as a Markdown table: a row a goal, a column (its value, met or not) a set of goals
    [(title, goals)], the goal last. A set without a goal another has shows '-' there."""
    first = max((gs for _, gs in columns), key=len)
    by = [{g[0]: g for g in gs} for _, gs in columns]

    def cell(got, what):
        g = got.get(what)
        return "-" if g is None else shown(what, g[1]) + ("" if g[3] is None else " (met)" if g[3] else " (not met)")
    return T.markdown(["goal for held-out runs"] + [t for t, _ in columns] + ["goal"],
                      [[what] + [cell(got, what) for got in by] + [goal] for what, _, goal, _ in first])
