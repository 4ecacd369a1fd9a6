"""What each source says apart: its runs' errors (many runs of one source share its unknowns), and
which of two runs is faster, as their own source measured them: a source's A/B (two runs of one
model at one cluster size, batch and sequence, differing in layout, recomputation, dispatcher,
overlap or precision) cancels what its runs share and the projection cannot know (the software's
version, how the figure was counted), and asks what a user asks `memfine project`: which setting to
take. Each pair is judged at both runs' first projection and today's."""
import itertools
import statistics

TIE = 0.02  # measured speeds within 2% of each other: a tie, not an order to get right


def family(case):
    """A run's source family: its case file's name begins with it (folding_, mbridge_, xtuner_, ...)."""
    return case.split("_")[0]


def counted(r):
    """A run the checks count (neither a calibration source nor a known regression) with a throughput
    error at its first projection (which has one only where the run has a throughput)."""
    return r.get("first_error") is not None and not r["calibration"] and not r["known_issue"]


def micro_batches(layout):
    """Micro-batches a step on a rank of a projection line's layout (core/project/layout.cpp's)."""
    return layout["global_batch"] // (layout["dp"] * layout["micro_batch"])


def published_speed(r):
    """A run's published speed in the projection's unit (tokens/s a GPU): projected / (1 + error)."""
    return r["record"]["tokens_per_s_gpu"] / (1 + r["throughput"][3] / 100)


def by_source(rows):
    """Counted first-projection errors by source family: many runs of one source share its unknowns,
    so one source can move a pooled median."""
    out = {}
    for r in rows:
        if counted(r):
            out.setdefault(family(r["case"]), []).append(r["first_error"])
    return out


def _key(r):
    """(source, FLOPs per token, GPUs, global batch): runs of one source (its file's published.source
    up to the first colon: the document, table or study) on one workload. The FLOPs a token costs name
    the model and its sequence whether its file names a preset or writes it out."""
    rec = r["record"]
    if not rec.get("tokens_per_s_gpu") or not rec.get("model_tflops_gpu"):
        return None
    per_token = rec["model_tflops_gpu"] / rec["tokens_per_s_gpu"]
    return r["source"].split(":")[0], float(f"{per_token:.4g}"), rec["gpus"], rec["layout"]["global_batch"]


def pairs(runs):
    """(a, b, measured speed ratio a/b, first-projection ratio, today's ratio) for every pair of counted
    runs on one source's workload."""
    groups = {}
    for r in runs:
        if counted(r) and (k := _key(r)) is not None:
            groups.setdefault(k, []).append(r)
    out = []
    for rows in groups.values():
        for a, b in itertools.combinations(sorted(rows, key=lambda r: r["case"]), 2):
            pub = [published_speed(r) for r in (a, b)]
            first, now = [1 + r["first_error"] / 100 for r in (a, b)], [1 + r["throughput"][3] / 100 for r in (a, b)]
            measured = pub[0] / pub[1]
            out.append((a["case"], b["case"], measured, measured * first[0] / first[1], measured * now[0] / now[1]))
    return out


def _agree(pairs, i):
    """(ordered as measured, pairs not tied) by the ratio at index i."""
    ordered = [(m > 1) == (p[i] > 1) for p in pairs if abs((m := p[2]) - 1) > TIE]
    return sum(ordered), len(ordered)


def lines(runs, names=False):
    """REPORT's words: how often the projection orders a source's own A/B as the source measured it,
    and how far its ratio is from the measured one; with `names`, the pairs it ordered otherwise today."""
    ps = pairs(runs)
    if not ps:
        return []
    (f_ok, n), (t_ok, _) = _agree(ps, 3), _agree(ps, 4)
    ratio_err = [statistics.median(abs(p[i] / p[2] - 1) * 100 for p in ps) for i in (3, 4)]
    wrong = [f"{p[0]} over {p[1]} ({p[2]:.2f} measured, {p[4]:.2f} projected)" for p in ps
             if abs(p[2] - 1) > TIE and (p[2] > 1) != (p[4] > 1)]
    return [f"- Which of two runs is faster, as one source measured them (two counted runs of one source, its file's "
            f"published.source up to the first colon, on one model, cluster size, batch and sequence: {len(ps)} pairs, "
            f"{len(ps) - n} of them within {100 * TIE:.0f}% of each other, a tie): at their first projection the "
            f"projection ordered {f_ok} of the {n} others as measured, today {t_ok}; the projected ratio's median "
            f"absolute error {ratio_err[0]:.1f}% at first, {ratio_err[1]:.1f}% today"
            + (f"; ordered otherwise today: {'; '.join(wrong)}." if names and wrong else ".")]
