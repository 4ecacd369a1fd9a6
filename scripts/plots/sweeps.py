"""Our own sweeps: memory and time against imbalance, chunk count, capacity factor and budget; the
memory model's error; the fused kernels; every strategy at one shape (baselines, GPU runs)."""
import json
import os

from . import records as R
from . import style as S


def with_drops(recs, label):
    """The label, with the dropped share where the strategy drops assignments (capacity): a lower
    memory beside dropless strategies is not the same model."""
    d = [r["dropped_fraction"] for r in recs if r["strategy"] == label and R.drops(r) and r["status"] == "ok"]
    from .generic import _share_range
    return f"{label} (drops {_share_range(d)})" if d else label


def imbalance(path, out_dir):
    recs = R.load(path)
    fig, (a1, a2) = S.figure(1, 2, figsize=(12, 4.2))
    top = max((R.activation(r) or 0) for r in recs) / R.MIB * 1.1
    for label in dict.fromkeys(r["strategy"] for r in recs):
        pts = sorted(((r["overload_factor"], r) for r in recs if r["strategy"] == label), key=lambda t: t[0])
        ok = [(x, r) for x, r in pts if r["status"] == "ok"]
        c = S.color_of(pts[0][1])
        mk = S.marker_of(label)
        a1.plot([x for x, _ in ok], [R.activation(r) / R.MIB for _, r in ok], "-", marker=mk, label=with_drops(recs, label),
                color=c)
        a2.plot([x for x, _ in ok], [R.median_ms(r) for _, r in ok], "-", marker=mk, label=with_drops(recs, label), color=c)
        for x, r in pts:
            if r["status"] != "ok":
                S.mark_oom(a1, x, top, color=c)
    S.dress(a1, "overload factor (s' / balanced share)", "activation peak (MiB)", "activation memory against imbalance",
            legend=False)
    # Above the panel, not inside it: there it would cover the lines.
    a1.legend(fontsize=7, loc="lower left", bbox_to_anchor=(0.0, 1.1), ncol=3)
    S.dress(a2, "overload factor (s' / balanced share)", "median step time (ms)", "step time against imbalance", legend=False)
    fig.suptitle(f"Memory and time as routing imbalance grows, {R.device_label(recs)}", fontsize=10)
    return S.save(fig, out_dir, "imbalance_memory", R.source_line(path, recs) + " | " +
                  R.config_line(recs[0], skip=R.sweep_axes(recs)) + "; " + R.swept_line(recs))


def fixed_chunks(recs):
    """memfine at a fixed chunk count (experts stored), sorted by it: [(chunks, record)]."""
    return sorted(((R.params_of(r)["chunks"], r) for r in R.select(recs, name="memfine", experts="stored", status="ok")
                   if isinstance(R.params_of(r).get("chunks"), int)), key=lambda t: t[0])


def chunks(path, out_dir, stem="chunks_step_time", what="MemFine's chunk count"):
    recs = R.load(path)
    mem = fixed_chunks(recs)
    refs = [r for r in recs if R.name_of(r) != "memfine" and r["status"] == "ok"]
    fig, (a1, a2) = S.figure(1, 2, figsize=(12, 4.2))
    xs = [c for c, _ in mem]
    a1.plot(xs, [R.median_ms(r) for _, r in mem], "o-", label="memfine")
    a1.fill_between(xs, [r["step_ms"]["min"] for _, r in mem], [r["step_ms"]["max"] for _, r in mem], alpha=0.2)
    a2.plot(xs, [R.activation(r) / R.MIB for _, r in mem], "o-", label="memfine")
    for r in refs:
        a1.axhline(R.median_ms(r), ls="--", lw=1, color=S.color_of(r), label=r["strategy"])
        a2.axhline(R.activation(r) / R.MIB, ls="--", lw=1, color=S.color_of(r), label=r["strategy"])
    for ax, yl, t in ((a1, "median step time (ms), band: min-max", "step time against chunk count"),
                      (a2, "activation peak (MiB)", "activation peak against chunk count")):
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs)
        ax.set_xticklabels([str(c) for c in xs])
        S.dress(ax, "chunks", yl, t)
    fig.suptitle(f"{what}, {R.device_label(recs)}", fontsize=10)
    return S.save(fig, out_dir, stem, R.source_line(path, recs) + " | " + R.config_line(recs[0]))


def capacity(path, out_dir):
    recs = R.load(path)
    fig, (a1, a2) = S.figure(1, 2, figsize=(12, 4.2))
    dropless = R.first(recs, role="reference", status="ok")
    for policy, style in (("probs", dict(marker="o", ls="-", ms=8)), ("position", dict(marker="x", ls="--", ms=8))):
        ok = sorted(((R.params_of(r)["capacity_factor"], r)
                     for r in R.select(recs, name="capacity", drop_policy=policy, status="ok")), key=lambda t: t[0])
        a1.plot([f for f, _ in ok], [100 * r["dropped_fraction"] for _, r in ok], label=f"drop policy {policy}", **style)
        a2.plot([f for f, _ in ok], [R.activation(r) / R.MIB for _, r in ok], label=f"drop policy {policy}", **style)
    if dropless:
        a2.axhline(R.activation(dropless) / R.MIB, ls="--", color="0.4", label=f"dropless ({dropless['strategy']})")
    S.dress(a1, "capacity factor", "assignments dropped (%)", "dropped share (the policy picks which, not how many)")
    S.dress(a2, "capacity factor", "activation peak (MiB)", "memory against capacity factor")
    fig.suptitle(f"Capacity capping: what it drops and what it saves, {R.device_label(recs)}", fontsize=10)
    return S.save(fig, out_dir, "capacity_dropped", R.source_line(path, recs) + " | " + R.config_line(recs[0]))


def budget_mib(r):
    return R.point_values(r["point"])["memory.budget"]


def budget_sweep(path, out_dir):
    """Throughput against the budget, every strategy interleaved at each budget: our ratios to
    full recomputation and to MACT at the same budget, the paper's Figure 4 (Model II) beside them."""
    from .paper import claims
    recs = R.load(path)
    pts = sorted(R.by_point(recs).items(), key=lambda kv: budget_mib(kv[1][0]))
    labels = list(dict.fromkeys(r["strategy"] for r in recs))
    fig, (a1, a2) = S.figure(1, 2, figsize=(13, 4.6))
    rows = []
    for i, label in enumerate(labels):
        xs, ys, oom, c = [], [], [], None
        for point, rs in pts:
            r = next((r for r in rs if r["strategy"] == label), None)
            if r is None:
                continue
            c = S.color_of(r)
            (xs if r["status"] == "ok" else oom).append(budget_mib(r))
            if r["status"] == "ok":
                ys.append(r["tokens_per_s"])
        a1.plot(xs, ys, marker="o", ls="-", color=c, label=label)
        for x in oom:  # one row of marks per strategy, so they do not hide each other
            a1.plot([x], [-120.0 * (i + 1)], marker="x", color=c, ms=7, ls="none")
    for point, rs in pts:
        full, m = R.first(rs, role="baseline", status="ok"), R.first(rs, status="ok", **R.MACT)
        for r in rs:
            ok = r["status"] == "ok"
            rows.append([f"{budget_mib(r):.0f}", r["strategy"], r["status"], chunk_range(r.get("chunks")),
                         f"{R.activation(r) / R.MIB:.1f}" if ok else "-", f"{R.median_ms(r):.2f}" if ok else "-",
                         f"{R.median_ms(full) / R.median_ms(r):.3f}x" if ok and full else "-",
                         f"{R.median_ms(m) / R.median_ms(r):.3f}x" if ok and m else "-"])
    # Right: speed against full recomputation where it fits.
    for label in labels:
        xs, ys, c = [], [], None
        for point, rs in pts:
            full = R.first(rs, role="baseline", status="ok")
            r = next((r for r in rs if r["strategy"] == label and r["status"] == "ok"), None)
            if full and r:
                xs.append(budget_mib(r))
                ys.append(R.median_ms(full) / R.median_ms(r))
                c = S.color_of(r)
        if xs:
            a2.plot(xs, ys, marker="o", color=c, label=label)
    cl = claims()
    for key, name, ls in (("tgs_mact_vs_full_II", "MACT", "--"), ("tgs_fixed8_vs_full_II", "fixed 8 chunks", ":")):
        a2.axhline(1 + cl[key], ls=ls, color="0.3", lw=1, label=f"paper, Model II: {name} {1 + cl[key]:.4f}x")
    a2.axhline(1.0, color="0.6", lw=0.8)
    S.dress(a1, "memory budget (MiB)", "tokens per second (x: out of memory)", "throughput against the budget")
    S.dress(a2, "memory budget (MiB)", "full recomputation's step time / this one's",
            "speed against full recomputation, where it fits")
    fig.suptitle(f"Every strategy at every budget, {R.device_label(recs)}", fontsize=10)
    caption = R.source_line(path, recs) + " | " + R.config_line(recs[0], skip=("memory.budget",))
    paths = S.save(fig, out_dir, "budget_sweep", caption)
    notes = ["budget in MiB (static memory included); activation peak in MiB; step = median ms over the timed steps; "
             "vs full, vs MACT = their step time / this one's at the same budget (- where they ran out of memory).",
             "chunks: per layer, min-max over steps and layers; 0 = a layer stored whole (no recomputation).",
             f"The paper (Figure 4, Model II): MACT {1 + cl['tgs_mact_vs_full_II']:.4f}x full recomputation, a fixed 8 "
             f"chunks {1 + cl['tgs_fixed8_vs_full_II']:.4f}x.", R.source_line(path, recs)]
    return paths + S.write_table(out_dir, "budget_sweep_table", "Throughput against the memory budget",
                                 ["budget MiB", "strategy", "status", "chunks", "act. MiB", "step ms", "vs full", "vs MACT"],
                                 rows, notes)


def model_error(path, out_dir):
    everything = R.load(path)
    recs = [r for r in everything if r["status"] == "ok" and r.get("predicted_activation_bytes")]
    # Strategies the model does not cover are listed, not dropped: with the reason the records give.
    unpredicted = {}
    covered = {r["strategy"] for r in recs}
    for r in everything:
        if r["status"] == "ok" and not r.get("predicted_activation_bytes") and r["strategy"] not in covered:
            unpredicted.setdefault(r["strategy"], [0, r.get("unpredicted_why") or "no prediction recorded"])[0] += 1
    by_strategy = {}
    for r in recs:
        err = (r["predicted_activation_bytes"] - R.activation(r)) / R.activation(r)
        by_strategy.setdefault(r["strategy"], []).append((err, r["point"]))
    rows = []
    for s, errs in by_strategy.items():
        worst = max(errs, key=lambda e: abs(e[0]))
        mean_abs = sum(abs(e) for e, _ in errs) / len(errs)
        rows.append([s, len(errs), f"{100 * mean_abs:.2f}%", f"{100 * min(e for e, _ in errs):+.2f}%",
                     f"{100 * max(e for e, _ in errs):+.2f}%", f"{100 * worst[0]:+.2f}% at {worst[1]}"])
    for s, (n, why) in unpredicted.items():
        rows.append([s, n, "not predicted: " + why, "-", "-", "-"])
    all_errs = [e for errs in by_strategy.values() for e, _ in errs]
    within = sum(abs(e) <= 0.05 for e in all_errs)
    worst = f"{100 * max(all_errs, key=abs):+.2f}%" if all_errs else "-"
    notes = [f"{within} of {len(all_errs)} points within 5%; worst {worst}.",
             "error = (predicted - measured) / measured activation peak; the model is core/predict/memory_model.cpp.",
             R.source_line(path, recs)]
    return S.write_table(out_dir, "model_error_table",
                         "Implementation memory model: predicted against measured activation peak",
                         ["strategy", "points", "mean |error|", "min", "max", "worst"], rows, notes)


def kernels(path, out_dir, name="kernels_table", title="Fused dispatch/combine kernels against ATen"):
    """Fused dispatch/combine against ATen's, per point (without the kernels key) and strategy; of
    real ranks (launch), the hottest one (largest activation peak) for each."""
    recs = [r for r in R.load(path) if r["status"] == "ok"]
    pairs = {}
    for r in recs:
        kern = r["config"]["kernels"]
        rest = ",".join(p for p in r["point"].split(",") if not p.startswith("kernels=")) or "base"
        k = pairs.setdefault((rest, r["strategy"]), {})
        if kern not in k or R.activation(r) > R.activation(k[kern]):
            k[kern] = r
    rows, fused_errs = [], []
    err = lambda r: (r["predicted_activation_bytes"] - R.activation(r)) / R.activation(r) if r.get("predicted_activation_bytes") else None
    for (point, strategy), k in pairs.items():
        a, f = k.get("aten"), k.get("fused")
        if not a or not f:
            continue
        ef = err(f)
        if ef is not None:
            fused_errs.append(ef)
        rows.append([point, strategy, f"{R.activation(a) / R.MIB:.1f}", f"{R.activation(f) / R.MIB:.1f}",
                     R.pct(R.activation(f), R.activation(a)), f"{R.median_ms(a):.1f}", f"{R.median_ms(f):.1f}",
                     f"{R.median_ms(a) / R.median_ms(f):.2f}x", "-" if ef is None else f"{100 * ef:+.1f}%"])
    notes = ["activation = measured activation peak (MiB); speed-up = ATen's median step time / fused's.",
             "The two kernels are different sweep points, so their step times are not interleaved: read small speed-ups as noise.",
             "model error = (predicted - measured) / measured for the fused run; the implementation model accounts ATen's ops"
             + (f" (fused: {100 * min(fused_errs):+.1f}% .. {100 * max(fused_errs):+.1f}%)." if fused_errs else "."),
             R.source_line(path, recs)]
    if any(r.get("world_size", 1) > 1 for r in recs):
        notes.insert(0, f"{recs[0]['world_size']} real ranks ({recs[0].get('backend', '?')}): each row is the hottest rank "
                        "(largest activation peak) of that kernel's run.")
    return S.write_table(out_dir, name, title,
                         ["point", "strategy", "ATen act. MiB", "fused act. MiB", "change", "ATen ms", "fused ms", "speed-up",
                          "model error (fused)"], rows, notes)


def kernel_ops(path, out_dir):
    """dispatch -> combine alone (memfine_bench's BM_DispatchCombine): ATen's ops against the fused
    ones per shape, medians over repetitions."""
    try:
        bench = json.load(open(path))
    except ValueError as e:
        raise R.ResultsError(f"{path}: not Google Benchmark JSON ({e})")
    runs = {}
    for b in bench.get("benchmarks", []):
        name = b.get("run_name", b.get("name", ""))
        if not name.startswith("BM_DispatchCombine/"):
            continue
        agg = b.get("aggregate_name", "median" if b.get("run_type") != "aggregate" else None)
        if agg not in ("median", "cv"):
            continue
        parts = name.split("/")  # BM_DispatchCombine / point / kernels / manual_time
        unit = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[b.get("time_unit", "ns")]
        entry = runs.setdefault(parts[1], {}).setdefault(parts[2], {"label": b.get("label", ""), "rows": b.get("rows")})
        entry[agg] = b["real_time"] * (unit if agg == "median" else 1.0)
    rows = []
    for point, k in runs.items():
        a, f = k.get("aten"), k.get("fused")
        if not a or not f or "median" not in a or "median" not in f:
            continue
        cv = lambda e: f" (cv {100 * e['cv']:.1f}%)" if "cv" in e else ""
        rows.append([point, f"{a['rows']:.0f}" if a.get("rows") else "-", f"{a['median']:.3f}{cv(a)}",
                     f"{f['median']:.3f}{cv(f)}", f"{a['median'] / f['median']:.2f}x"])
    if not rows:
        raise R.ResultsError(f"{path}: no BM_DispatchCombine pairs (aten and fused)")
    ctx = bench.get("context", {})
    label = next(iter(next(iter(runs.values())).values()))["label"]
    notes = ["dispatch -> combine, forward and backward, on one layer's routing (the dispatched rows stand in for the "
             "experts' outputs); ms = median over repetitions, the timer waits for the device; speed-up = ATen / fused.",
             f"device, dtype: {label.rsplit(',', 1)[0]}. On a CPU the fused ops are the host reference of the CUDA kernels "
             f"(one thread, rows in order) while ATen uses {ctx.get('libtorch_threads', '?')} threads.",
             f"Source: {os.path.relpath(path)} ({ctx.get('host_name', '?')}, {ctx.get('num_cpus', '?')} CPUs, LibTorch "
             f"{ctx.get('libtorch', '?')}, {ctx.get('date', '?')}): build/memfine_bench --moe_config={ctx.get('moe_config', '?')} "
             "--benchmark_filter=DispatchCombine --benchmark_repetitions=5"]
    return S.write_table(out_dir, "kernel_ops_table", "dispatch and combine alone: fused kernels against ATen",
                         ["shape", "s'", "ATen ms", "fused ms", "speed-up"], rows, notes)


def bf16_peak(records):
    """(device, dense bf16 TFLOP/s) of the records' device from experiments/data/device_peaks.csv:
    the first name contained in the device's; (None, None) when none is."""
    name = R.env_of(records).get("device_name", "")
    return next(((r["device"], float(r["bf16_dense_tflops"])) for r in R.read_csv("device_peaks.csv") if r["device"] in name),
                (None, None))


def chunk_range(chunks):
    """A chunk count, or min-max over steps and layers where MACT's grid varies (as the run's table)."""
    if chunks is None:
        return "-"
    flat, todo = [], [chunks]
    while todo:
        c = todo.pop()
        if isinstance(c, list):
            todo.extend(c)
        else:
            flat.append(c)
    if not flat:
        return "-"
    lo, hi = min(flat), max(flat)
    return str(lo) if lo == hi else f"{lo}-{hi}"


def strategies(path, out_dir, stem, title):
    """Every strategy's activation peak, step time and achieved rate, per point, against the
    baseline strategy (full recomputation, as its registration says) at the same point; with a bar
    chart of both, each panel naming its own point's configuration and capacity's dropped share."""
    from .generic import bars
    recs = R.load(path)
    peak_name, peak = bf16_peak(recs)
    unit, div = S.bytes_unit([R.activation(r) for r in recs])
    # A lossy strategy's gradient error is its result: a column where one ran.
    lossy = any(r.get("verified") is None and r.get("grad_max_rel_err") is not None for r in recs)
    rows = []
    for point, rs in R.by_point(recs).items():
        full = R.first(rs, role="baseline", status="ok")
        for r in rs:
            ok = r["status"] == "ok"
            tf = r.get("tflops") if ok else None
            rows.append([point, r["strategy"], r["status"], r.get("tokens_received", "-"), chunk_range(r.get("chunks")),
                         f"{100 * r['dropped_fraction']:.1f}%" if R.drops(r) else "-",
                         f"{R.activation(r) / div:.2f}" if ok else "-",
                         f"{r['predicted_activation_bytes'] / div:.2f}" if r.get("predicted_activation_bytes") else "-",
                         f"{r['static_bytes'] / div:.2f}" if r.get("static_bytes") else "-",
                         f"{R.median_ms(r):.1f} ({r['step_ms']['min']:.1f}-{r['step_ms']['max']:.1f})" if ok else "-",
                         R.pct(R.activation(r), R.activation(full)) if ok and full else "-",
                         f"{R.median_ms(full) / R.median_ms(r):.2f}x" if ok and full else "-",
                         f"{tf:.3g}" if tf else "-", f"{100 * tf / peak:.1f}%" if tf and peak else "-"]
                        + ([f"{r['grad_max_rel_err']:.1e}" if r.get("grad_max_rel_err") is not None else "-"]
                           if lossy else []))
    notes = [f"activation, predicted (implementation model) and static in {unit}; step = median (min-max) ms over the timed steps; "
             "vs full = activation change and speed (full recomputation's step time / this one's) at the same point.",
             "s' = rows the hottest rank's experts receive per layer (the paper's s'); out-of-memory points are results (status "
             "oom); dropped = capacity capping's dropped share of assignments: it computes another model.",
             ("TFLOP/s = the step's model FLOPs (core/model/flops.cpp, recomputation not counted) / median step time; "
              + (f"% peak against the {peak_name}'s dense bf16 peak of {peak:.0f} TFLOP/s (experiments/data/device_peaks.csv)."
                 if peak else "no bf16 peak known for this device.")),
             R.device_label(recs) + "; " + R.config_line(recs[0], skip=R.sweep_axes(recs)) + "; " + R.swept_line(recs),
             R.source_line(path, recs)]
    if lossy:
        notes.insert(2, "grad err = largest relative difference of loss and gradients against the plain computation "
                        "(verify's measure): a lossy strategy's result, held to no tolerance; a dropless one's within "
                        "its dtype's tolerance.")
    out = S.write_table(out_dir, stem + "_table", title,
                        ["point", "strategy", "status", "s'", "chunks", "dropped", f"act. {unit}", f"pred. {unit}",
                         f"static {unit}", "step ms", "act. vs full", "speed vs full", "TFLOP/s", "% bf16 peak"]
                        + (["grad err"] if lossy else []), rows, notes)
    points = list(R.by_point(R.hottest(recs)).items())
    fig, axes = S.figure(2, len(points), figsize=(4.6 * len(points) + 1, 7), squeeze=False)
    for i, (point, rs) in enumerate(points):
        bars(axes[0][i], axes[1][i], rs, R.point_title(point) + "\n" + R.config_line(rs[0], skip=("model.layers", "model.hidden",
                                                                                    "model.ffn_hidden", "model.seq")))
    fig.suptitle(f"{title}, {R.device_label(recs)}\non the bars: ratio to full recomputation; hatched: drops assignments "
                 "(another model)", fontsize=9)
    return out + S.save(fig, out_dir, stem, R.source_line(path, recs) + " | " + R.config_line(recs[0], skip=R.sweep_axes(recs)))
