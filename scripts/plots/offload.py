"""Recompute, chunk or offload (experiments/offload.yaml): the frontier of device peak against step
time for every strategy, the host memory offloading holds, and the bandwidth above which
offloading an activation beats recomputing it."""
from . import bars as B
from . import records as R
from . import style as S
from .tables import markdown

# DeepSeek-V3's routed expert (hidden 7168, expert ffn 2048, bf16): one routed token-expert pair
# keeps its input row, its output row and z = [a | b] (the numbers the issue quotes), and costs
# its expert's forward to recompute (two GEMMs: 2 h 2g + 2 g h FLOPs).
DSV3 = {"hidden": 7168, "ffn_hidden": 2048, "bytes": 2}
H100_TFLOPS = 160.0  # the rate the break-even is quoted at (a sustained bf16 GEMM rate on an H100)
BANDWIDTHS = (("PCIe-class, a measured H100's host-to-device", 35.0), ("Grace-Hopper-class", 400.0))


def pair_bytes(hidden, ffn, elem):
    """Bytes one routed token-expert pair keeps that recomputing its expert would regenerate."""
    return elem * (2 * hidden + 2 * ffn)


def pair_flops(hidden, ffn):
    """FLOPs of one pair's expert forward: x [h] -> [a | b] [2g] -> out [h]."""
    return 2 * hidden * 2 * ffn + 2 * ffn * hidden


def break_even_gbps(bytes_, flops, tflops):
    """Offloading beats recomputing when copying the bytes takes less than recomputing them:
    bandwidth > bytes x rate / FLOPs (GB/s)."""
    return bytes_ * tflops * 1e12 / flops / 1e9


def offloads(r):
    return R.name_of(r) == "offload"


def copies_measured(r):
    """Offloading on a device: its copies ran on their own streams inside the measured step (each
    direction timed by events), so nothing about them is modelled."""
    return offloads(r) and r.get("offload_d2h_ms") is not None


def on_device(recs):
    """Whether these records' offloading ran on a device, its copies measured rather than modelled."""
    return any(copies_measured(r) for r in recs)


def frontier_ms(r):
    """Step time on the frontier: measured; for offloading emulated on a CPU, less the emulation's own
    copying (measured) plus the copies' exposed time (modelled from the bandwidth)."""
    ms = R.median_ms(r)
    if offloads(r) and not copies_measured(r):
        ms += r.get("copy_ms_modelled", 0.0) - r.get("offload_emulation_ms", 0.0)
    return ms


def pareto(rs):
    """The strategies no other beats on both device peak and step time."""
    return [r for r in rs if not any(R.activation(o) <= R.activation(r) and frontier_ms(o) <= frontier_ms(r)
                                     and (R.activation(o), frontier_ms(o)) != (R.activation(r), frontier_ms(r))
                                     for o in rs)]


def short(r):
    """A label that fits a plot: the strategy and what differs."""
    p = R.params_of(r)
    if not offloads(r):
        return r["strategy"]
    mods = p.get("modules", [])
    what = "all modules" if len(mods) >= 8 else "+".join(mods)
    extra = [f"{k}={p[k]}" for k, default in (("experts", "stored"), ("chunks", 1)) if p.get(k, default) != default]
    bw = p.get("h2d_gbps", 35)
    return f"offload({what}{', ' + ', '.join(extra) if extra else ''}; {bw:g} GB/s)"


def measured_rate(rs):
    """The reference strategy's achieved rate at a point (TFLOP/s): what a recomputation runs at."""
    ref = R.first(rs, role="reference", status="ok")
    return ref.get("tflops") if ref else None


def offload(path, out_dir):
    recs = R.load(path)
    unit, div = S.bytes_unit([R.activation(r) for r in recs if r["status"] == "ok"])
    rows = []
    points = list(R.by_point(recs).items())
    for point, rs in points:
        front = pareto([r for r in rs if r["status"] == "ok" and not R.drops(r)])
        for r in rs:
            ok = r["status"] == "ok"
            host = r.get("offload_host_peak_bytes")
            phost = r.get("predicted_offload_host_peak_bytes")
            rows.append([point, r["strategy"], r["status"],
                         f"{R.activation(r) / div:.2f}" if ok else "-",
                         f"{r['predicted_activation_bytes'] / div:.2f}" if r.get("predicted_activation_bytes") else "-",
                         f"{host / div:.2f}" if host is not None else "-",
                         f"{phost / div:.2f}" if phost is not None else "-",
                         f"{R.median_ms(r):.1f}" if ok else "-",
                         f"{r['offload_emulation_ms']:.1f}" if ok and offloads(r) and not copies_measured(r) else "-",
                         (f"{r['offload_d2h_ms']:.1f} / {r['offload_h2d_ms']:.1f} (measured)" if copies_measured(r) else
                          f"{r['copy_ms_modelled']:.2f}") if ok and offloads(r) else "-",
                         f"{frontier_ms(r):.1f}" if ok else "-",
                         "yes" if r in front else "",
                         "ok" if r.get("verified") else ("-" if r.get("verified") is None else "FAILED")])
    measured = on_device(recs)
    steps = ("step = median measured ms, offloading's copies on their own streams inside it; copies = the time its "
             "copies out / back took on those streams (measured by events); frontier = step." if measured else
             "step = median measured ms on this CPU; emul. = the emulation's own copying inside it (measured, absent "
             "on a device); copies = the time compute waits for copies, modelled from the strategy's host bandwidth "
             "(h2d_gbps / d2h_gbps) against the measured compute between the events that issue and need them "
             "(copy_ms_modelled: modelled, never measured); frontier = step - emul. + copies.")
    notes = [f"device = the meter's activation peak, pred. = the implementation model's, host = offloading's pool at "
             f"its peak (measured / predicted), all in {unit}.", steps,
             "pareto = no dropless strategy at this point has both a lower device peak and a shorter frontier time. "
             "capacity drops assignments (another model) and stays off the frontier.",
             R.device_label(recs) + "; " + R.config_line(recs[0], skip=R.sweep_axes(recs)) + "; " + R.swept_line(recs),
             R.source_line(path, recs)]
    out = S.write_table(out_dir, "offload_table", "Recompute, chunk or offload: device peak, host peak, step time",
                        ["point", "strategy", "status", f"device {unit}", f"pred. {unit}", f"host {unit}",
                         f"host pred. {unit}", "step ms", "emul. ms", "copies ms", "frontier ms", "pareto",
                         "verified"], rows, notes, formats=("md", "csv"))

    out += S.save(_frontier_figure(recs, points, unit, div), out_dir, "offload",
                  R.device_label(recs) + "; " + R.config_line(recs[0], skip=R.sweep_axes(recs)) + "; "
                  + R.source_line(path, recs) + (". Offloading's points are measured steps, its copies inside them."
                                                 if measured else
                                                 ". Offloading's points add modelled copy waits to measured compute."))
    # The break-even is H100 arithmetic for a CPU's modelled copies; a GPU's copies are measured.
    return out + ([] if measured else break_even(out_dir))


def _frontier_figure(recs, points, unit, div):
    """Device peak against step time, a panel per point on common axes; offloading's points (measured
    compute plus a modelled copy wait) hollow-edged stars, the 400 GB/s twin a ring around its 35 GB/s one."""
    cols = min(2, len(points))
    nrows = (len(points) + cols - 1) // cols
    fig, axes, lax = S.figure(nrows, cols, legend_row=True, figsize=(8 if cols == 2 else 6.5, 2.9 * nrows + 1.6), squeeze=False,
                              sharex=True, sharey=True)
    cells = [ax for row in axes for ax in row]
    handles = {}
    for ax, (point, rs) in zip(cells, points):
        ok = [r for r in rs if r["status"] == "ok"]
        front = pareto([r for r in ok if not R.drops(r)])
        for r in ok:
            x, y = frontier_ms(r), R.activation(r) / div
            m, lo, hi = S.spread_ms(r)
            fast = offloads(r) and R.params_of(r).get("h2d_gbps", 35) > 100
            lk = S.look(r)
            if fast:  # the same computation at 400 GB/s: a ring around the 35 GB/s star
                h = ax.scatter([x], [y], marker="o", s=140, facecolors="none", edgecolors=lk["color"], lw=1.2, zorder=2)
                handles.setdefault("offload at 400 GB/s (ring)", ax.scatter([], [], marker="o", s=140, facecolors="none",
                                                                           edgecolors="0.3", lw=1.2))
                continue
            ax.errorbar([x], [y], xerr=[[m - lo], [hi - m]], fmt="none", ecolor=lk["color"], elinewidth=0.7, capsize=1.5,
                        alpha=0.7, zorder=2)
            h = ax.scatter([x], [y], marker=lk["marker"], s=110 if offloads(r) else 45, color=lk["color"],
                           edgecolors="black" if offloads(r) else lk["mec"], linewidths=0.6, zorder=3)
            name = S.label_words(short_key(r)) + (" (modelled copy wait)" if offloads(r) and not copies_measured(r)
                                                  else "")
            handles.setdefault(name + (" (drops assignments)" if R.drops(r) else ""), h)
        fr = sorted(front, key=frontier_ms)
        line, = ax.plot([frontier_ms(r) for r in fr], [R.activation(r) / div for r in fr], "--", color="0.5", lw=0.8,
                        zorder=1)
        handles.setdefault("pareto frontier (dropless)", line)
        ax.set_title(R.point_title(point))
        ax.grid(color="0.92", lw=0.5)
    for ax in cells[len(points):]:
        ax.axis("off")
    for ax in axes[-1]:
        ax.set_xlabel("step time (ms)")
    for row in axes:
        row[0].set_ylabel(f"device peak ({unit})")
    S.legend(lax, list(handles.values()), list(handles.keys()), ncol=2)
    how = ("every point measured, offloading (stars) with its copies on their own streams" if on_device(recs) else
           "measured, except offloading (stars): measured compute plus a copy wait modelled at 35 GB/s host-to-device "
           "(ring: 400 GB/s)")
    S.suptitle(fig, f"Recompute, chunk or offload: device peak against step time, {R.device_label(recs)}\n"
                    f"{how}; whiskers: min-max over {B.timed_steps(recs)}")
    return fig


def short_key(r):
    """An offloading strategy's label without its bandwidth (one entry for both), any other's label."""
    if not offloads(r):
        return r["strategy"]
    p = {k: v for k, v in R.params_of(r).items() if k in R.parse_label(r["strategy"])[1] and k not in ("h2d_gbps", "d2h_gbps")}
    text = lambda v: "[" + ",".join(map(str, v)) + "]" if isinstance(v, list) else str(v)
    return "offload(" + ",".join(f"{k}={text(v)}" for k, v in p.items()) + ")"


def break_even(out_dir):
    """Arithmetic, not a measurement: per routed pair at DeepSeek-V3's shape, copying its bytes
    against recomputing its expert on an H100 (its own figure, apart from the CPU's measurements)."""
    fig, ax = S.figure(1, 1, figsize=(5.0, 3.6))
    bws = [10 ** (k / 40) for k in range(0, 141)]  # 1 .. 3000 GB/s
    bws = [b for b in bws if b <= 3000]
    b, f = pair_bytes(DSV3["hidden"], DSV3["ffn_hidden"], DSV3["bytes"]), pair_flops(DSV3["hidden"], DSV3["ffn_hidden"])
    ax.loglog(bws, [b / (bw * 1e9) * 1e6 for bw in bws], color=S.FAMILY["offload"], lw=1.6,
              label="copy one pair's bytes (DeepSeek-V3, bf16)")
    rec_us = f / (H100_TFLOPS * 1e12) * 1e6
    ax.axhline(rec_us, color="black", ls="--", lw=1.2, label=f"recompute it at {H100_TFLOPS:g} TFLOP/s (H100)")
    be = break_even_gbps(b, f, H100_TFLOPS)
    ax.axvline(be, color="black", lw=0.8)
    ax.annotate(f"break-even\n{be:.0f} GB/s", (be, rec_us), fontsize=S.SMALL, xytext=(4, 10), textcoords="offset points")
    for k, (label, bw) in enumerate(BANDWIDTHS):  # the first's words left of its line, the second's right
        ax.axvline(bw, color="0.45", lw=0.8, ls=":")
        ax.annotate(f"{bw:g} GB/s\n{label.split(',')[0]}", (bw, 1.0), xycoords=("data", "axes fraction"),
                    xytext=(-3 if k == 0 else 3, -3), textcoords="offset points", fontsize=S.SMALL, color="0.3", va="top",
                    ha="right" if k == 0 else "left")
    ax.set_xlim(bws[0], bws[-1])
    S.dress(ax, "host bandwidth (GB/s)", "µs per routed token-expert pair",
            "Offload beats recompute right of the break-even (H100, arithmetic)", legend=False)
    ax.legend(loc="lower left", frameon=False)
    caption = (f"Not measured: one routed pair keeps {b:,.0f} bytes (hidden {DSV3['hidden']}, expert ffn "
               f"{DSV3['ffn_hidden']}, bf16) and recomputing its expert costs {f / 1e6:.1f} MFLOP at an assumed "
               f"{H100_TFLOPS:g} TFLOP/s; dotted: the offload experiment's two host bandwidths.")
    return S.save(fig, out_dir, "offload_break_even", caption)


def lines(path):
    """REPORT.md's section, decided by the records."""
    recs = R.load(path)
    b, f = pair_bytes(DSV3["hidden"], DSV3["ffn_hidden"], DSV3["bytes"]), pair_flops(DSV3["hidden"], DSV3["ffn_hidden"])
    be = break_even_gbps(b, f, H100_TFLOPS)
    offs = [r for r in recs if r["status"] == "ok" and offloads(r)]
    dev_err = [e for e in map(R.model_error, offs) if e is not None]
    host_exact = sum(r.get("predicted_offload_host_peak_bytes") == r.get("offload_host_peak_bytes") for r in offs)
    model = (f" The implementation model predicted offloading's device peaks within {100 * min(dev_err):+.1f}% to "
             f"{100 * max(dev_err):+.1f}% and its host peak to the byte in {host_exact} of {len(offs)} records."
             if dev_err else "")
    out = ["## Recompute, chunk or offload", "",
           "Every family of memory saver at one shape (experiments/offload.yaml; `paper_figures/offload_table.md`, "
           "`offload.png`; the break-even below: `offload_break_even.png`). Offloading's copies are modelled on this CPU (host and device are one memory): its step "
           "time is measured compute plus the modelled time compute waits for copies at the strategy's host bandwidth; "
           "its device peak and host peak are measured." + model + " Each cell: device peak (change against "
           "no_recompute), step time against no_recompute's (offloading's: the frontier's time).", ""]
    out += markdown(["point", "no_recompute", "least device peak (dropless)", "least offload", "memfine(chunks=4)",
                     "pareto frontier"])
    cpu_rates = []
    for point, rs in R.by_point(recs).items():
        ok = [r for r in rs if r["status"] == "ok" and not R.drops(r)]
        ref = R.first(ok, role="reference")
        if not ref:
            continue
        rate = measured_rate(rs)
        if rate:
            cpu_rates.append(rate)
        cell = lambda r: (f"{short(r)}: {R.activation(r) / R.MIB:.1f} MiB ({R.pct(R.activation(r), R.activation(ref))}), "
                          f"{frontier_ms(r) / frontier_ms(ref):.2f}x time") if r else "-"
        least = min(ok, key=R.activation)
        offs = [r for r in ok if offloads(r)]
        least_off = min(offs, key=lambda r: (R.activation(r), frontier_ms(r))) if offs else None
        mf = R.first(ok, name="memfine", chunks=4)
        front = ", ".join(short(r) for r in sorted(pareto(ok), key=frontier_ms))
        out.append(f"| {point} | {R.activation(ref) / R.MIB:.1f} MiB, {frontier_ms(ref):.0f} ms | {cell(least)} | "
                   f"{cell(least_off)} | {cell(mf)} | {front} |")
    out += ["", R.source_line(path, recs), ""]
    # What the bandwidth changed: the same computation is run at both; on this CPU the difference
    # between the pair is the modelled copy wait plus timing noise.
    twins = []
    for r in offs:
        p = dict(R.params_of(r))
        if p.get("h2d_gbps", 35) > 100:
            continue
        t = next((o for o in offs if o["point"] == r["point"] and
                  {**R.params_of(o), "h2d_gbps": p.get("h2d_gbps"), "d2h_gbps": p.get("d2h_gbps")} == p and o is not r),
                 None)
        if t:
            twins.append((r, t))
    if offs:
        waits = [r.get("copy_ms_modelled", 0.0) for r in offs]
        emul = [r.get("offload_emulation_ms", 0.0) / R.median_ms(r) for r in offs]
        text = (f"Offloading's modelled copy wait was at most {max(waits):.2f} ms a step here (the copies hide behind "
                f"this CPU's slow compute); the emulation's own copying took {100 * min(emul):.1f}-{100 * max(emul):.1f}% "
                "of the measured step and is taken out of the frontier's time.")
        if twins:
            gap = max(abs(R.median_ms(a) - R.median_ms(b)) / R.median_ms(a) for a, b in twins)
            text += (f" Each offloading strategy ran at both bandwidths: identical computations whose median step "
                     f"times differed by up to {100 * gap:.1f}%, so time differences below that are noise here.")
        out += [text, ""]
    m = recs[0]["config"]["model"]
    elem = {"float64": 8, "bfloat16": 2, "float16": 2}.get(recs[0]["config"].get("dtype"), 4)
    ob, of = pair_bytes(m["hidden"], m["ffn_hidden"], elem), pair_flops(m["hidden"], m["ffn_hidden"])
    out += ["**The break-even.** Offloading an activation beats recomputing it when the host bandwidth exceeds "
            "(its bytes x the recompute's FLOP rate) / (its recompute FLOPs). At DeepSeek-V3's MoE shape (hidden "
            f"{DSV3['hidden']}, expert ffn {DSV3['ffn_hidden']}, bf16) one routed token-expert pair keeps its input "
            f"row, its output row and z = [a | b]: {b:,} bytes ({b / 1e3:.1f} KB), and recomputing its expert costs "
            f"{f / 1e6:.1f} MFLOP; at {H100_TFLOPS:g} TFLOP/s that is {f / (H100_TFLOPS * 1e12) * 1e6:.2f} µs per "
            f"pair against {b / 35e9 * 1e6:.2f} µs to copy it at 35 GB/s and {b / 400e9 * 1e6:.3f} µs at 400 GB/s: "
            f"break-even **{be:.1f} GB/s**. So on a "
            "PCIe-class link (35 GB/s) copying such a pair takes "
            f"{be / 35:.1f}x as long as recomputing it, and offloading pays only where the copy hides behind other "
            f"compute; on a Grace-Hopper-class link (400 GB/s) it takes {be / 400:.2f}x."]
    if cpu_rates:
        lo, hi = min(cpu_rates), max(cpu_rates)
        out += ["", f"Where our measurements put it: this CPU's reference strategy ran at {lo:.3g}-{hi:.3g} TFLOP/s, so "
                f"at this experiment's shape (hidden {m['hidden']}, ffn {m['ffn_hidden']}, {elem}-byte elements: "
                f"{ob:,} bytes and {of / 1e6:.1f} MFLOP per pair) the break-even is "
                f"{break_even_gbps(ob, of, lo):.2f}-{break_even_gbps(ob, of, hi):.2f} GB/s: any host link would beat "
                "recomputation here, which is why every copy hides behind compute in the table (exposed time near "
                "zero at 35 GB/s). On an H100 the same arithmetic gives the break-even above: offloading's time cost "
                "is a GPU's question, which the CPU emulation can only model; its memory (device and host peaks) is "
                "measured here and predicted by the model for any shape."]
    return out + [""]
