"""The newest savers beside the existing ones (experiments/savers_2026.yaml): every strategy's
activation peak, step time and gradient error per imbalance, against MemFine's chunks at the same
point, and REPORT.md's section, decided by the records."""
from . import records as R
from .tables import markdown
from .sweeps import strategies

TITLE = "The newest savers beside recomputation, MemFine's chunks and offloading, as imbalance grows"


def savers(path, out_dir):
    return strategies(path, out_dir, "savers_2026", TITLE)


def lossy(r):
    return r.get("verified") is None and r.get("grad_max_rel_err") is not None


def short(r):
    """Its label as records key it (parameters at their defaults left out)."""
    return r["strategy"]


def lines(path):
    """REPORT.md's section: where each saver keeps less than MemFine's chunks, or steps faster, and
    where not; a lossy one with the gradient error it costs."""
    recs = R.load(path)
    out = ["## The newest savers: ChunkedEP, Paged Stash and 8-bit activation storage", "",
           "On the hottest of 8 emulated ranks as imbalance grows (experiments/savers_2026.yaml; "
           "`paper_figures/savers_2026_table.md`, `savers_2026.png`). `chunked_ep` splits each rank's own tokens "
           "into chunks as MemFine does, but replays them last to first with the next earlier chunk's dispatched "
           "rows held (in flight) while one runs; its all-to-all overlap needs real ranks, so on one process only its "
           "memory and its extra work show. `paged_stash` copies what each expert saves into pages of a pool sized "
           "from the mean rows a rank receives, and a rank beyond its buffers' capacity or its pages has the step "
           "run again without the stash (the pool still held). `compress` keeps what its modules save as FP8 "
           "codes (or bfloat16) and decodes them for backward: it is lossy, so its gradient error against the plain "
           "computation is measured in every record. Each cell: activation peak against MemFine's chunks' (memfine, "
           "chunks 4) at the same point, step time against its (one run's medians: a difference of a few percent "
           "is within this machine's noise, see the table's min-max), and the gradient error where lossy.", ""]
    names, rows, tally = [], {}, {}
    for point, rs in R.by_point(recs).items():
        ok = [r for r in rs if r["status"] == "ok" and not R.drops(r)]
        mf = R.first(ok, name="memfine", chunks=4)
        if not mf:
            continue
        for r in ok:
            if r is mf:
                continue
            k = short(r)
            if k not in names:
                names.append(k)
            less, faster = R.activation(r) < R.activation(mf), R.median_ms(r) < R.median_ms(mf)
            t = tally.setdefault(k, [0, 0, 0])
            t[0], t[1], t[2] = t[0] + less, t[1] + faster, t[2] + 1
            err = f", err {r['grad_max_rel_err']:.1e}" if lossy(r) else ""
            rows.setdefault(point, {})[k] = (f"{R.pct(R.activation(r), R.activation(mf))}, "
                                             f"{R.median_ms(r) / R.median_ms(mf):.2f}x{err}")
        rows.setdefault(point, {})["memfine"] = (f"{R.activation(mf) / R.MIB:.1f} MiB, {R.median_ms(mf):.0f} ms "
                                                 f"(s' {mf.get('tokens_received', '-')})")
    if not rows:
        return []
    out += markdown(["point", "memfine(chunks=4)", *names])
    for point, cells in rows.items():
        out.append(f"| {R.point_title(point)} | {cells['memfine']} | " + " | ".join(cells.get(n, "-") for n in names) + " |")
    out += [""]
    for k in names:
        less, faster, n = tally[k]
        out.append(f"- {k}: keeps less than MemFine's chunks at {less} of {n} points, steps faster at {faster} of {n}.")
    # What lossy storage is for: keeping less than storing everything, at its cost in time.
    against = {}
    for point, rs in R.by_point(recs).items():
        ref = R.first(rs, role="reference", status="ok")
        for r in rs:
            if ref and r["status"] == "ok" and lossy(r):
                against.setdefault(short(r), []).append((R.activation(r) / R.activation(ref) - 1,
                                                         R.median_ms(r) / R.median_ms(ref)))
    for k, v in against.items():
        out.append(f"- {k} against no_recompute: activation {100 * min(a for a, _ in v):+.1f}% to "
                   f"{100 * max(a for a, _ in v):+.1f}%, step time {min(t for _, t in v):.2f}x to "
                   f"{max(t for _, t in v):.2f}x over the {len(v)} points.")
    # ChunkedEP against MemFine's chunks at the same count: what its prefetched rows cost.
    pairs = []
    for point, rs in R.by_point(recs).items():
        ok = [r for r in rs if r["status"] == "ok"]
        mf = R.first(ok, name="memfine", chunks=4)
        cep = R.first(ok, name="chunked_ep", chunks=4, recompute="full")
        if mf and cep:
            pairs.append((R.activation(cep) / R.activation(mf) - 1, R.median_ms(cep) / R.median_ms(mf)))
    if pairs:
        out.append(f"- chunked_ep(chunks=4) against memfine(chunks=4), the same token chunks: activation "
                   f"{100 * min(a for a, _ in pairs):+.1f}% to {100 * max(a for a, _ in pairs):+.1f}%, step time "
                   f"{min(t for _, t in pairs):.2f}x to {max(t for _, t in pairs):.2f}x over the {len(pairs)} points "
                   "(one run's medians).")
    # Paged Stash: where it reran as imbalance grew, and its peak against storing everything.
    for label in sorted({r["strategy"] for r in recs if r.get("name") == "paged_stash"}):
        cells = []
        for point, rs in R.by_point(recs).items():
            ps = next((r for r in rs if r["strategy"] == label and r["status"] == "ok"), None)
            ref = R.first(rs, role="reference", status="ok")
            if ps and ref:
                cells.append(f"{R.point_title(point)}: {'reran' if ps.get('reruns') else 'no rerun'}, activation "
                             f"{R.pct(R.activation(ps), R.activation(ref))}, step {R.median_ms(ps) / R.median_ms(ref):.2f}x")
        if cells:
            out.append(f"- {label} against no_recompute: " + "; ".join(cells) + ".")
    errs = [r for r in recs if r["status"] == "ok" and lossy(r)]
    if errs:
        worst = max(errs, key=lambda r: r["grad_max_rel_err"])
        best = min(errs, key=lambda r: r["grad_max_rel_err"])
        out.append(f"- Gradient error of lossy storage: from {best['grad_max_rel_err']:.1e} ({short(best)}) to "
                   f"{worst['grad_max_rel_err']:.1e} ({short(worst)}), largest relative difference of loss and any "
                   "gradient tensor after one step; the dropless strategies verified within the float32 tolerance: "
                   f"{sum(r.get('verified') is True for r in recs)} of {sum(r.get('verified') is not None for r in recs)}.")
    out += ["", R.source_line(path, recs), ""]
    return out


def skip_dead_lines(path):
    """REPORT.md's lines on skip_dead: each recomputation's step time with and without it, one run."""
    recs = R.load(path)
    out = ["", "Skipping the replay's dead fc2 and combine (experiments/skip_dead.yaml, `paper_figures/skip_dead_table.md`; "
           "strategies interleaved step by step in one run):", ""]
    for point, rs in R.by_point(recs).items():
        for name in ("full_recompute", "moe_recompute"):
            plain = R.first(rs, name=name, skip_dead=False, status="ok")
            skip = R.first(rs, name=name, skip_dead=True, status="ok")
            if not plain or not skip:
                continue
            out.append(f"- {point}, {name}: step {R.median_ms(skip):.0f} ms against {R.median_ms(plain):.0f} ms "
                       f"({R.median_ms(skip) / R.median_ms(plain):.3f}x; min-max {skip['step_ms']['min']:.0f}-"
                       f"{skip['step_ms']['max']:.0f} against {plain['step_ms']['min']:.0f}-{plain['step_ms']['max']:.0f}), "
                       f"activation {R.pct(R.activation(skip), R.activation(plain))}, verified "
                       f"{'yes' if skip.get('verified') else 'no'}.")
    return out + ["", R.source_line(path, recs), ""]
