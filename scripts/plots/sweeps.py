"""Our own sweeps: memory and time against imbalance, chunk count, capacity factor and budget; the
memory model's error; the fused kernels; every strategy at one shape (baselines, GPU runs)."""
import json
import os

from . import bars as B
from . import names as N
from . import records as R
from . import style as S


def with_drops(recs, label, text=None):
    """The label (or `text` for it), with the dropped share where the strategy drops assignments
    (capacity): a lower memory beside dropless strategies is not the same model."""
    d = [r["dropped_fraction"] for r in recs if r["strategy"] == label and R.drops(r) and r["status"] == "ok"]
    from .generic import _share_range
    text = text or label
    return f"{text} (drops {_share_range(d)})" if d else text


def imbalance(path, out_dir):
    recs = R.load(path)
    labels = list(dict.fromkeys(r["strategy"] for r in recs))
    fig, (a1, a2), lax = S.figure(1, 2, legend_row=True, figsize=(8, 3.9))
    top = max((R.activation(r) or 0) for r in recs) / R.MIB * 1.1
    xs_all = [r["overload_factor"] for r in recs]
    span, handles = (max(xs_all) - min(xs_all)) or 1.0, []
    for k, label in enumerate(labels):
        dx = S.dodge(k, len(labels), span)
        pts = sorted(((r["overload_factor"], r) for r in recs if r["strategy"] == label), key=lambda t: t[0])
        ok = [(x + dx, r) for x, r in pts if r["status"] == "ok"]
        a1.plot([x for x, _ in ok], [R.activation(r) / R.MIB for _, r in ok], **S.look(label, ms=4))
        sp = [S.spread_ms(r) for _, r in ok]
        a2.errorbar([x for x, _ in ok], [m for m, _, _ in sp], yerr=[[m - lo for m, lo, _ in sp], [hi - m for m, _, hi in sp]],
                    capsize=1.5, elinewidth=0.7, **S.look(label, ms=4))
        handles.append((S.legend_handle(label), with_drops(recs, label, S.label_words(label))))
        for x, r in pts:
            if r["status"] != "ok":
                S.mark_oom(a1, x, top, color=S.color_of(r))
    a1.set_ylim(0, top * 1.12)
    a2.set_ylim(bottom=0)
    xl = "overload factor\n(hottest rank's rows / balanced share)"
    S.dress(a1, xl, "activation peak (MiB)", "activation memory against imbalance", legend=False)
    S.dress(a2, xl, "median step time (ms)", "step time against imbalance", legend=False)
    S.legend(lax, [h for h, _ in handles], [t for _, t in handles], ncol=3)
    S.suptitle(fig, f"Memory and time as routing imbalance grows, {R.device_label(recs)}\n"
                    f"whiskers: min-max over {B.timed_steps(recs)}; points offset a little sideways")
    return S.save(fig, out_dir, "imbalance_memory", R.source_line(path, recs) + " | " +
                  R.config_line(recs[0], skip=R.sweep_axes(recs)) + "; " + N.swept(recs))


def fixed_chunks(recs):
    """memfine at a fixed chunk count (experts stored), sorted by it: [(chunks, record)]."""
    return sorted(((R.params_of(r)["chunks"], r) for r in R.select(recs, name="memfine", experts="stored", status="ok")
                   if isinstance(R.params_of(r).get("chunks"), int)), key=lambda t: t[0])


def chunks(path, out_dir, stem="chunks_step_time", what="MemFine's chunk count"):
    recs = R.load(path)
    mem = fixed_chunks(recs)
    refs = [r for r in recs if R.name_of(r) != "memfine" and r["status"] == "ok"]
    fig, (a1, a2), lax = S.figure(1, 2, legend_row=True, figsize=(8, 3.7))
    xs = [c for c, _ in mem]
    sp = [S.spread_ms(r) for _, r in mem]
    look = S.look("memfine", ms=4)
    a1.plot(xs, [m for m, _, _ in sp], **look)
    a1.fill_between(xs, [lo for _, lo, _ in sp], [hi for _, _, hi in sp], alpha=0.2, color=look["color"], lw=0)
    a2.plot(xs, [R.activation(r) / R.MIB for _, r in mem], **look)
    handles = [(S.legend_handle("memfine"), "memfine (band: min-max)")]
    for r in refs:
        m, lo, hi = S.spread_ms(r)
        c = S.color_of(r)
        a1.axhline(m, ls="--", lw=1.2, color=c)
        a1.axhspan(lo, hi, color=c, alpha=0.12, lw=0)
        a2.axhline(R.activation(r) / R.MIB, ls="--", lw=1.2, color=c)
        handles.append((S.Line2D([], [], color=c, ls="--", lw=1.2), S.label_words(r["strategy"]) + " (band: min-max)"))
    a1.set_ylim(bottom=0)
    a2.set_ylim(bottom=0)
    for ax, yl, t in ((a1, "median step time (ms)", "step time against chunk count"),
                      (a2, "activation peak (MiB)", "activation peak against chunk count")):
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs)
        ax.set_xticklabels([str(c) for c in xs])
        ax.minorticks_off()
        S.dress(ax, "chunks (log scale)", yl, t, legend=False)
    S.legend(lax, [h for h, _ in handles], [t for _, t in handles], ncol=3)
    S.suptitle(fig, f"{what}: step time and activation peak, {R.device_label(recs)}\n"
                    f"bands: min-max step time over {B.timed_steps(recs)}")
    return S.save(fig, out_dir, stem, R.source_line(path, recs) + " | " + R.config_line(recs[0]))


def capacity(path, out_dir):
    recs = R.load(path)
    fig, (a1, a2), lax = S.figure(1, 2, legend_row=True, figsize=(8, 3.6))
    dropless = R.first(recs, role="reference", status="ok")
    series = {}
    for k, (policy, extra) in enumerate((("probs", dict(ms=5)), ("position", dict(ms=6, mfc="white", mew=1.2)))):
        ok = sorted(((R.params_of(r)["capacity_factor"], r)
                     for r in R.select(recs, name="capacity", drop_policy=policy, status="ok")), key=lambda t: t[0])
        if not ok:
            continue
        look = S.look("capacity", **extra)
        look["ls"] = S.dash_of(ok[0][1]["strategy"])
        words = {"probs": "drops the lowest probabilities", "position": "drops by position"}.get(policy, policy)
        dx = S.dodge(k, 2, ok[-1][0] - ok[0][0], 0.02)  # the policies coincide: side by side, both visible
        a1.plot([f + dx for f, _ in ok], [100 * r["dropped_fraction"] for _, r in ok], label=f"capacity, {words}", **look)
        a2.plot([f + dx for f, _ in ok], [R.activation(r) / R.MIB for _, r in ok], label=f"capacity, {words}", **look)
        series[policy] = [(f, r["dropped_fraction"], R.activation(r)) for f, r in ok]
    same = len(series) == 2 and series["probs"] == series["position"]
    if dropless:
        a2.axhline(R.activation(dropless) / R.MIB, ls="--", color=S.color_of(dropless),
                   label=f"dropless ({S.label_words(dropless['strategy'])})")
    a1.set_ylim(0, max(100 * d for v in series.values() for _, d, _ in v) * 1.15)
    a2.set_ylim(bottom=0, top=max([R.activation(dropless) if dropless else 0] + [a for v in series.values() for _, _, a in v])
                / R.MIB * 1.15)
    S.dress(a1, "capacity factor", "assignments dropped (%)", "dropped share", legend=False)
    S.dress(a2, "capacity factor", "activation peak (MiB)", "memory against capacity factor", legend=False)
    h, l = a2.get_legend_handles_labels()
    S.legend(lax, h, l, ncol=3)
    S.suptitle(fig, f"Capacity capping: what it drops and what it saves, {R.device_label(recs)}"
                    + ("\nthe two drop policies drop the same share and keep the same memory: their points coincide"
                       " (drawn a little apart; the policy picks which assignments, not how many)" if same else ""))
    return S.save(fig, out_dir, "capacity_dropped", R.source_line(path, recs) + " | " + R.config_line(recs[0]))


def budget_mib(r):
    return R.point_values(r["point"])["memory.budget"]


def _budget_figure(recs, pts, cl):
    """Left: tokens per second against the budget (whiskers: at the slowest and fastest timed step), the
    budgets where a strategy ran out of memory in a strip beneath; right: the speed-up against full
    recomputation (whiskers: this strategy's slowest and fastest step against full recomputation's median;
    band: full recomputation's own). The paper's GPU ratios stand outside the axes, marked as the paper's."""
    labels = list(dict.fromkeys(r["strategy"] for r in recs))
    fig, axes, lax = S.figure(2, 2, legend_row=True, figsize=(9, 4.6), sharex=True,
                              gridspec_kw={"height_ratios": [4, 0.25 * max(1, len({r["strategy"] for r in recs if r["status"] != "ok"}))]})
    (a1, a2), (strip, spare) = axes
    spare.axis("off")
    budgets = [budget_mib(rs[0]) for _, rs in pts]
    span = (max(budgets) - min(budgets)) or 1.0
    oom_rows = [l for l in labels if any(r["strategy"] == l and r["status"] != "ok" for r in recs)]
    handles = []
    for k, label in enumerate(labels):
        dx = S.dodge(k, len(labels), span, 0.01)
        got = [(budget_mib(r), r) for _, rs in pts for r in rs if r["strategy"] == label]
        ok = [(x, r) for x, r in got if r["status"] == "ok"]
        lk = S.look(label, ms=4)
        handles.append((S.legend_handle(label), S.label_words(label)))
        tps = [(r["tokens_per_s"], S.spread_ms(r)) for _, r in ok]
        a1.errorbar([x + dx for x, _ in ok], [t for t, _ in tps], yerr=[[t - t * m / hi for t, (m, lo, hi) in tps],
                                                                       [t * m / lo - t for t, (m, lo, hi) in tps]],
                    capsize=1.5, elinewidth=0.7, **lk)
        bad = [x for x, r in got if r["status"] != "ok"]
        if bad:
            strip.plot(bad, [oom_rows.index(label)] * len(bad), marker="x", color=lk["color"], ms=6, mew=1.5, ls="none")
        full_at = {budget_mib(rs[0]): R.first(rs, role="baseline", status="ok") for _, rs in pts}
        sp = [(x, R.median_ms(full_at[x]), S.spread_ms(r)) for x, r in ok if full_at.get(x)]
        if ok and R.matches(ok[0][1], role="baseline"):
            a2.fill_between([x for x, _, _ in sp], [f / hi for _, f, (m, lo, hi) in sp], [f / lo for _, f, (m, lo, hi) in sp],
                            color=lk["color"], alpha=0.15, lw=0)
            continue
        if sp:
            a2.errorbar([x + dx for x, _, _ in sp], [f / m for _, f, (m, _, _) in sp],
                        yerr=[[f / m - f / hi for _, f, (m, lo, hi) in sp], [f / lo - f / m for _, f, (m, lo, hi) in sp]],
                        capsize=1.5, elinewidth=0.7, **lk)
    a2.axhline(1.0, color=S.FAMILY["full_recompute"], lw=1.0)
    a1.set_ylim(bottom=0)
    strip.set_yticks(range(len(oom_rows)))
    strip.set_yticklabels([S.label_words(l) for l in oom_rows])
    strip.set_ylim(len(oom_rows) - 0.5, -0.5)
    strip.set_title("out of memory at these budgets", loc="left", fontsize=S.SMALL)
    strip.tick_params(axis="y", length=0)
    strip.set_xlabel("memory budget (MiB)")
    a2.tick_params(labelbottom=True)
    # The paper's GPU ratios: marks on the right edge, their words apart from each other beside it.
    for (key, name), up in ((("tgs_mact_vs_full_II", "MACT"), 1), (("tgs_fixed8_vs_full_II", "8 chunks"), -1)):
        y = 1 + cl[key]
        a2.plot([1.0], [y], marker="<", color="0.3", ms=5, transform=a2.get_yaxis_transform(), clip_on=False)
        a2.annotate(f"{name} {y:.4f}x", xy=(1.0, y), xycoords=("axes fraction", "data"), xytext=(6, 9 * up),
                    textcoords="offset points", fontsize=S.SMALL, color="0.3", va="center")
    a2.annotate("the paper\n(GPU, Model II):", xy=(1.0, 1.0), xycoords=("axes fraction", "data"), xytext=(6, 30),
                textcoords="offset points", fontsize=S.SMALL, color="0.3", va="bottom")
    S.dress(a1, "", "tokens per second", "throughput against the budget", legend=False)
    S.dress(a2, "memory budget (MiB)", "speed-up vs full recomputation (x)",
            "speed against full recomputation, where it fits", legend=False)
    S.legend(lax, [h for h, _ in handles], [t for _, t in handles], ncol=3)
    S.suptitle(fig, f"Every strategy at every budget, {R.device_label(recs)}\n"
                    f"whiskers: slowest and fastest of {B.timed_steps(recs)} (right: against full recomputation's median;"
                    " band: its own spread); points offset sideways")
    return fig


def budget_sweep(path, out_dir):
    """Throughput against the budget, every strategy interleaved at each budget: our ratios to
    full recomputation and to MACT at the same budget, the paper's Figure 4 (Model II) beside them."""
    from .paper import claims
    recs = R.load(path)
    pts = sorted(R.by_point(recs).items(), key=lambda kv: budget_mib(kv[1][0]))
    rows = []
    for point, rs in pts:
        full, m = R.first(rs, role="baseline", status="ok"), R.first(rs, status="ok", **R.MACT)
        for r in rs:
            ok = r["status"] == "ok"
            rows.append([f"{budget_mib(r):.0f}", r["strategy"], r["status"], chunk_range(r.get("chunks")),
                         f"{R.activation(r) / R.MIB:.1f}" if ok else "-", f"{R.median_ms(r):.2f}" if ok else "-",
                         f"{R.median_ms(full) / R.median_ms(r):.3f}x" if ok and full else "-",
                         f"{R.median_ms(m) / R.median_ms(r):.3f}x" if ok and m else "-"])
    cl = claims()
    paths = S.save(_budget_figure(recs, pts, cl), out_dir, "budget_sweep",
                   R.source_line(path, recs) + " | " + R.config_line(recs[0], skip=("memory.budget",)))
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
        err = R.model_error(r)
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
    err = R.model_error
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


def strategies(path, out_dir, stem, title, figure_title=None):
    """Every strategy's activation peak, step time and achieved rate, per point, against the
    baseline strategy (full recomputation, as its registration says) at the same point; with a bar
    chart of both, each panel naming its own point's configuration and capacity's dropped share."""
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
    fig = B.draw([rs for _, rs in points], [B.point_title(point, rs) for point, rs in points],
                 {i: room for i, (_, rs) in enumerate(points) if (room := _room(rs, div)) is not None})
    S.suptitle(fig, f"{figure_title or title}, {R.device_label(recs)}\n" + B.subtitle(recs))
    return out + S.save(fig, out_dir, stem, R.source_line(path, recs) + " | " + R.config_line(recs[0], skip=R.sweep_axes(recs)))


def _room(rs, div):
    """The budget's room for activations (budget less static memory) where every strategy has the same static."""
    budget = (rs[0]["config"].get("memory") or {}).get("budget")
    statics = {r.get("static_bytes") for r in rs}
    return (budget - statics.pop()) / div if budget and len(statics) == 1 and None not in statics else None
