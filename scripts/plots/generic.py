"""`memfine plot DIR... [--out FOLDER]`: figures of any results folder from its records alone.

A run's records: per point, activation peak and step time of every strategy (out of memory marked,
capacity's dropped share and the ratio to the baseline on the bars); a swept key as the x-axis with
a line per strategy; MACT's chunk grid. A training run's: loss and held-out loss against tokens,
the peak per step against the budget, s' per layer, MACT's chunk grid. Titles and captions come from
the records' configuration, never from the experiment's name; several folders are drawn side by side.
"""
import argparse
import os
import sys

from . import records as R
from . import style as S


def _title(group, folder_label):
    point = group[0]["point"]
    return (f"{folder_label}: " if folder_label else "") + R.point_title(point)


def _caption(path, recs):
    swept = R.sweep_axes(recs)
    return (R.source_line(path, recs) + " | " + R.config_line(R.config_of(recs), skip=swept) +
            ("; " + R.swept_line(recs) if swept else ""))


def _share_range(shares):
    lo, hi = 100 * min(shares), 100 * max(shares)
    return f"{lo:.0f}%" if round(lo) == round(hi) else f"{lo:.0f}-{hi:.0f}%"


def _ratio(r, base, key):
    a, b = key(r), key(base) if base else None
    return f"{a / b:.2f}x" if a and b else ""


def bars(ax_mem, ax_time, group, title):
    """Activation peak and step time per strategy at one point: OOM marked, dropped share and the
    ratio against the baseline written on the bars."""
    base = R.first(group, role="baseline", status="ok")
    unit, div = S.bytes_unit([R.activation(r) for r in group])
    xs = range(len(group))
    top_mem = max([(R.activation(r) or 0) / div for r in group] + [1e-9])
    # The time axis holds every bar's error bar and its label (the slowest timed step).
    top_ms = max([(R.step_max_ms(r) or 0) for r in group] + [1e-9])
    for x, r in zip(xs, group):
        c = S.color_of(r)
        if r["status"] != "ok":
            for ax, top in ((ax_mem, top_mem), (ax_time, top_ms)):
                S.mark_oom(ax, x, 0.05 * top, r["status"].upper(), color=c)
            continue
        a, ms = R.activation(r) / div, R.median_ms(r)
        ax_mem.bar(x, a, color=c, hatch="//" if R.drops(r) else None, edgecolor="white" if R.drops(r) else None)
        s = r.get("step_ms") or {}
        err = [[ms - s.get("min", ms)], [s.get("max", ms) - ms]] if isinstance(s, dict) else None
        ax_time.bar(x, ms, color=c, yerr=err, capsize=2, hatch="//" if R.drops(r) else None,
                    edgecolor="white" if R.drops(r) else None)
        note_mem, note_time = _ratio(r, base, R.activation), _ratio(r, base, R.median_ms)
        if R.drops(r):
            note_mem += f"\ndrops {100 * r['dropped_fraction']:.0f}%"
        # Many bars: their labels stand upright, or neighbours' run into each other.
        turn = 90 if len(group) > 10 else 0
        ax_mem.text(x, a, note_mem, ha="center", va="bottom", fontsize=6, rotation=turn)
        ax_time.text(x, s.get("max", ms) if isinstance(s, dict) else ms, note_time, ha="center", va="bottom",
                     fontsize=6, rotation=turn)
    for ax, top in ((ax_mem, top_mem), (ax_time, top_ms)):
        ax.set_ylim(0, top * (1.4 if len(group) > 10 else 1.25))
        ax.set_xticks(list(xs))
    ax_mem.set_xticklabels([])
    ax_time.set_xticklabels([r["strategy"] for r in group], rotation=35, ha="right", fontsize=6)
    ax_mem.set_ylabel(f"activation peak ({unit})", fontsize=8)
    ax_time.set_ylabel("median step (ms), min-max", fontsize=8)
    ax_mem.set_title(title, fontsize=8)


def run_points(path, recs, out, stem, folder_label=""):
    """One column per point: activation peak above, step time below."""
    groups = list(R.by_point(R.hottest(recs)).values())[:12]
    fig, axes = S.figure(2, len(groups), figsize=(max(4.5, 3.2 * len(groups)), 6.2), squeeze=False)
    for i, g in enumerate(groups):
        bars(axes[0][i], axes[1][i], g, _title(g, folder_label))
    base = R.first(recs, role="baseline")
    fig.suptitle("Activation peak and step time per strategy\n" +
                 (f"on the bars: ratio to {base['strategy']} (the baseline); " if base else "") +
                 "hatched: drops assignments (another model)", fontsize=8)
    return S.save(fig, out, stem, _caption(path, recs))


def run_sweep(path, recs, out, stem, axis, folder_label=""):
    """A swept key as the x-axis, a line per strategy; other swept keys as columns."""
    recs = R.hottest(recs)
    others = [k for k in R.sweep_axes(recs) if k != axis]
    facets = {}
    for r in recs:
        v = R.point_values(r["point"])
        facets.setdefault(tuple((k, v.get(k)) for k in others), []).append(r)
    facets = list(facets.items())[:6]
    fig, axes = S.figure(2, len(facets), figsize=(max(5.5, 4.6 * len(facets)), 6.4), squeeze=False)
    unit, div = S.bytes_unit([R.activation(r) for r in recs])
    numeric = all(isinstance(R.point_values(r["point"]).get(axis), (int, float)) for r in recs)
    order = [v for v in R.sweep_axes(recs)[axis]]
    xpos = (lambda v: v) if numeric else (lambda v: order.index(v))
    # A routing law's parameter is not the imbalance (zipf saturates under top-k): the axis is the
    # measured overload at each of its values, labelled with the value.
    overload = {}
    if axis.startswith("workload.") and all(isinstance(r.get("overload_factor"), (int, float)) for r in recs):
        for r in recs:
            v = R.point_values(r["point"])[axis]
            overload[v] = max(overload.get(v, 0), r["overload_factor"])
        xpos, numeric = (lambda v: overload[v]), True
    for i, (key, group) in enumerate(facets):
        a1, a2 = axes[0][i], axes[1][i]
        top = max([(R.activation(r) or 0) / div for r in group] + [1e-9])
        for label in dict.fromkeys(r["strategy"] for r in group):
            pts = sorted(((xpos(R.point_values(r["point"])[axis]), r) for r in group if r["strategy"] == label),
                         key=lambda t: t[0])
            ok = [(x, r) for x, r in pts if r["status"] == "ok"]
            c = S.color_of(pts[0][1])
            drops = [r["dropped_fraction"] for _, r in ok if R.drops(r)]
            name = label + (f" (drops {_share_range(drops)})" if drops else "")
            mk = S.marker_of(pts[0][1])
            a1.plot([x for x, _ in ok], [R.activation(r) / div for _, r in ok], "-", marker=mk, color=c, label=name, ms=4)
            a2.plot([x for x, _ in ok], [R.median_ms(r) for _, r in ok], "-", marker=mk, color=c, label=name, ms=4)
            for x, r in pts:
                if r["status"] != "ok":
                    S.mark_oom(a1, x, top * 1.05, r["status"].upper(), color=c)
        facet = R.point_title(list(key)) if key else ""
        for ax, yl in ((a1, f"activation peak ({unit})"), (a2, "median step time (ms)")):
            ax.set_ylabel(yl, fontsize=8)
            if not numeric:
                ax.set_xticks(range(len(order)))
                ax.set_xticklabels([str(v) for v in order], fontsize=7)
        if overload:
            for ax in (a1, a2):
                ax.set_xticks(sorted(set(overload.values())))
            a2.set_xticks(sorted(overload.values()))
            a2.set_xticklabels([f"{o:.1f}x\n{axis.split('.')[-1]} {v}" for v, o in sorted(overload.items(), key=lambda t: t[1])],
                               fontsize=7)
        a1.set_title(((folder_label + ": ") if folder_label else "") + (facet or ""), fontsize=8)
        a2.set_xlabel("overload: s' over the balanced share (the law's " + axis + " below it)" if overload
                      else axis + (" (MiB)" if axis == "memory.budget" else ""))
        a1.legend(fontsize=6)
    fig.suptitle(f"Every strategy against {'the measured overload' if overload else axis} (x: out of memory)", fontsize=9)
    return S.save(fig, out, stem, _caption(path, recs) + (" | columns: " + ", ".join(others) if others else ""))


def chunk_grid(ax, grid, steps, title, layer0=0):
    """MACT's chunk count per layer (rows) and step (columns); the colour scale covers only the
    counts that occur."""
    import matplotlib.colors as mcolors
    values = sorted({v for row in grid for v in row})
    cmap = S.plt.get_cmap("viridis", max(2, len(values)))
    index = {v: i for i, v in enumerate(values)}
    im = ax.imshow([[index[v] for v in row] for row in grid], aspect="auto", cmap=cmap,
                   norm=mcolors.BoundaryNorm([i - 0.5 for i in range(len(values) + 1)], cmap.N), origin="upper")
    if len(grid[0]) <= 40 and len(grid) * len(grid[0]) <= 600:  # digits only where a cell is wide enough to read
        for i, row in enumerate(grid):
            for j, v in enumerate(row):
                ax.text(j, i, str(v), ha="center", va="center", fontsize=5, color="white" if index[v] < len(values) / 2 else "black")
    ax.set_yticks(range(len(grid)))
    ax.set_yticklabels([str(layer0 + i) for i in range(len(grid))], fontsize=6)
    step_labels = [str(s) for s in steps]
    # Every step where they fit; about a dozen labels otherwise, so that a shared x axis stays legible.
    every = 1 if len(step_labels) <= 24 else -(-len(step_labels) // 12)
    ax.set_xticks(range(0, len(step_labels), every))
    ax.set_xticklabels(step_labels[::every], fontsize=6)
    ax.set_title(title, fontsize=8)
    return im, values


def run_chunks(path, recs, out, stem):
    """MACT's grid of a run's records whose chunks vary per step and layer (at most 4 points)."""
    grids = [r for r in R.hottest(recs) if r["status"] == "ok" and isinstance(r.get("chunks"), list) and r["chunks"]
             and isinstance(r["chunks"][0], list)][:4]
    if not grids:
        return []
    fig, axes = S.figure(1, len(grids), figsize=(5.5 * len(grids), 4), squeeze=False)
    for ax, r in zip(axes[0], grids):
        grid = [list(col) for col in zip(*r["chunks"])]
        im, values = chunk_grid(ax, grid, r.get("chunk_steps") or range(len(r["chunks"])), f"{r['strategy']} at {r['point']}")
        ax.set_xlabel("step")
        ax.set_ylabel("layer")
        cb = fig.colorbar(im, ax=ax, ticks=range(len(values)))
        cb.ax.set_yticklabels([str(v) for v in values])
        cb.set_label("chunks (0: stored)", fontsize=7)
    fig.suptitle("Chunks chosen per layer and step", fontsize=9)
    return S.save(fig, out, stem, _caption(path, recs), tight=False)


def train_runs(recs):
    """{(point, strategy): [records by step]} with each run's head (its first record)."""
    runs = {}
    for r in recs:
        runs.setdefault((r["point"], r["strategy"]), []).append(r)
    for rs in runs.values():
        rs.sort(key=lambda r: r["step"])
    return runs


def train(path, recs, out, stem, folder_label=""):
    """A training run: losses against tokens, the peak per step against the budget, s' per layer,
    and MACT's chunk grid where a strategy chooses per step."""
    runs = train_runs(recs)
    head = next(r for r in recs if r.get("config"))
    cfg = head["config"]
    m = cfg["model"]
    ranks = head.get("ranks", 1)
    tokens = m["seq"] * m.get("micro_batch", 1) * ranks
    # A grid where a strategy chooses per layer and step (MACT), not a fixed count.
    grid_run = next(((k, rs) for k, rs in runs.items()
                     if len({c for r in rs if isinstance(r.get("chunks"), list) for c in r["chunks"]}) > 1
                     or R.params_of(rs[0]).get("chunks") == "auto"), None)
    n = 4 if grid_run else 3
    fig, axes = S.figure(n, 1, figsize=(8, 2.6 * n + 0.6), squeeze=False)
    a_loss, a_peak, a_recv = axes[0][0], axes[1][0], axes[2][0]
    for (point, label), rs in runs.items():
        c = S.color_of(rs[0])
        name = label + (f" @ {point}" if point != "base" else "")
        ok = [r for r in rs if r["status"] == "ok"]
        a_loss.plot([(r["step"] + 1) * tokens for r in ok], [r["loss"] for r in ok], "-", color=c, lw=0.8, alpha=0.5)
        ev = [r for r in ok if r.get("eval_loss") is not None]
        a_loss.plot([(r["step"] + 1) * tokens for r in ev], [r["eval_loss"] for r in ev], "o-", color=c, ms=3, label=name)
        peaks = [r for r in rs if r.get("peak_activation_bytes") is not None]
        a_peak.plot([r["step"] for r in peaks], [r["peak_activation_bytes"] / R.MIB for r in peaks], "-", color=c, lw=1,
                    label=name)
        for r in rs:
            if r["status"] != "ok":
                S.mark_oom(a_peak, r["step"], (r.get("peak_activation_bytes") or 0) / R.MIB, r["status"].upper(), color=c)
    budget = (cfg.get("memory") or {}).get("budget")
    if budget is not None:
        a_peak.axhline((budget - head["static_bytes"]) / R.MIB, color="red", ls="--", lw=0.9,
                       label="the budget's room for activations")
    S.dress(a_loss, "training tokens", "loss (line: training; dots: held-out)", "Loss against tokens")
    S.dress(a_peak, "step", "activation peak (MiB)" + (", fullest rank" if ranks > 1 else ""),
            "Peak per step (x: the run ended there)")
    first = max(runs.values(), key=lambda rs: sum(r["status"] == "ok" for r in rs))  # the longest run
    ok = [r for r in first if r["status"] == "ok"]
    ranks_seen = head.get("stats_ep", ranks)
    # The overload factor: s' over the balanced share, the layer's assignments over the ranks.
    for layer in range(m["layers"]):
        a_recv.plot([r["step"] for r in ok],
                    [r["tokens_received_per_layer"][layer] * ranks_seen / max(1, sum(r["expert_tokens"][layer])) for r in ok],
                    lw=0.9, label=f"layer {layer}")
    a_recv.axhline(1.0, color="0.6", lw=0.8)
    S.dress(a_recv, "step", "overload: s' / balanced share",
            f"Rows the hottest of {ranks_seen} ranks receives per layer ({first[0]['strategy']})")
    if m["layers"] > 8:
        a_recv.legend().remove()
    if grid_run:
        (point, label), rs = grid_run
        ok = [r for r in rs if r["status"] == "ok" and isinstance(r.get("chunks"), list)]
        grid = [[r["chunks"][l] for r in ok] for l in range(m["layers"])]
        im, values = chunk_grid(axes[3][0], grid, [r["step"] for r in ok], f"Chunks per layer and step ({label})")
        axes[3][0].set_xlabel("step")
        axes[3][0].set_ylabel("layer")
        cb = fig.colorbar(im, ax=axes[3][0], ticks=range(len(values)))
        cb.ax.set_yticklabels([str(v) for v in values])
    fig.suptitle(((folder_label + ": ") if folder_label else "") + "Training: " + R.config_line(cfg)
                 + (f", {ranks} real ranks" if ranks > 1 else ""), fontsize=9)
    return S.save(fig, out, stem, R.source_line(path, recs))


def plot_folder(folder, out, label=""):
    path = R.records_file(folder)
    recs = R.load(path, required=("experiment", "point", "strategy", "status") + (("step",) if R.is_training(path) else ()))
    name = recs[0]["experiment"]
    if R.is_training(path):
        return train(path, recs, out, f"{name}_train", label)
    axes = R.sweep_axes(recs)
    numeric = [k for k, vs in axes.items() if all(isinstance(v, (int, float)) for v in vs)]
    paths = []
    if axes:
        paths += run_sweep(path, recs, out, f"{name}_sweep", (numeric or list(axes))[0], label)
    paths += run_points(path, recs, out, f"{name}_points", label)
    paths += run_chunks(path, recs, out, f"{name}_chunks")
    return paths


def side_by_side(folders, out):
    """Several folders' points in one figure, a column each."""
    loaded = []
    for f in folders:
        path = R.records_file(f)
        if R.is_training(path):
            raise R.ResultsError(f"{path}: training runs are drawn one at a time (plot it alone)")
        loaded.append((f, path, R.hottest(R.load(path))))
    cols = [(os.path.basename(os.path.normpath(f)), g) for f, _, recs in loaded for g in R.by_point(recs).values()][:12]
    fig, axes = S.figure(2, len(cols), figsize=(max(5, 3.3 * len(cols)), 6.4), squeeze=False)
    for i, (label, g) in enumerate(cols):
        bars(axes[0][i], axes[1][i], g, _title(g, label))
    fig.suptitle("Side by side: activation peak and step time per strategy\non the bars: ratio to the baseline; "
                 "hatched: drops assignments (another model)", fontsize=8)
    caption = " | ".join(R.source_line(p, recs) for _, p, recs in loaded)
    return S.save(fig, out, "side_by_side", caption)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="memfine plot", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folders", nargs="+", help="results folders (results.jsonl or train.jsonl), or the files")
    ap.add_argument("--out", help="output folder (default: the first folder's figures/)")
    args = ap.parse_args(argv)
    out = args.out or os.path.join(args.folders[0] if os.path.isdir(args.folders[0]) else os.path.dirname(args.folders[0]),
                                   "figures")
    try:
        paths = []
        for f in args.folders:
            paths += plot_folder(f, out, os.path.basename(os.path.normpath(f)) if len(args.folders) > 1 else "")
        if len(args.folders) > 1:
            paths += side_by_side(args.folders, out)
    except (R.ResultsError, OSError) as e:
        print(f"memfine plot: {e}", file=sys.stderr)
        return 2
    for p in paths:
        print(p)
    return 0
