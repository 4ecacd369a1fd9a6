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

from . import bars as B
from . import records as R
from . import style as S


def _title(group, folder_label):
    return (f"{folder_label}: " if folder_label else "") + B.point_title(group[0]["point"], group)


def _caption(path, recs):
    swept = R.sweep_axes(recs)
    return (R.source_line(path, recs) + " | " + R.config_line(R.config_of(recs), skip=swept) +
            ("; " + R.swept_line(recs) if swept else ""))


def _share_range(shares):
    lo, hi = 100 * min(shares), 100 * max(shares)
    return f"{lo:.0f}%" if round(lo) == round(hi) else f"{lo:.0f}-{hi:.0f}%"


def run_points(path, recs, out, stem, folder_label=""):
    """One column per point: activation peak above, step time below (at most 12 points)."""
    groups = list(R.by_point(R.hottest(recs)).values())[:12]
    fig = B.draw(groups, [_title(g, folder_label) for g in groups])
    base = R.first(recs, role="baseline")
    S.suptitle(fig, "Activation peak and step time per strategy\n" +
                 B.subtitle(recs, S.label_words(base["strategy"]) if base else "the baseline"))
    return S.save(fig, out, stem, _caption(path, recs))


def run_sweep(path, recs, out, stem, axis, folder_label=""):
    """A swept key as the x-axis, a line per strategy (offset a little, so that none hides another);
    other swept keys as columns; one legend above them all."""
    recs = R.hottest(recs)
    others = [k for k in R.sweep_axes(recs) if k != axis]
    facets = {}
    for r in recs:
        v = R.point_values(r["point"])
        facets.setdefault(tuple((k, v.get(k)) for k in others), []).append(r)
    facets = list(facets.items())[:6]
    labels = list(dict.fromkeys(r["strategy"] for r in recs))
    fig, axes, lax = S.figure(2, len(facets), legend_row=True, sharex="col",
                              figsize=(min(10.0, max(7.0, 1.2 + 3.1 * len(facets))), 5.4 + 0.12 * len(labels)),
                              squeeze=False)
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
    xs_all = [xpos(R.point_values(r["point"])[axis]) for r in recs]
    span = (max(xs_all) - min(xs_all)) or 1.0
    handles = {}
    for i, (key, group) in enumerate(facets):
        a1, a2 = axes[0][i], axes[1][i]
        top = max([(R.activation(r) or 0) / div for r in group] + [1e-9])
        oom_at = {}
        for k, label in enumerate(labels):
            dx = S.dodge(k, len(labels), span)
            pts = sorted(((xpos(R.point_values(r["point"])[axis]) + dx, r) for r in group if r["strategy"] == label),
                         key=lambda t: t[0])
            if not pts:
                continue
            ok = [(x, r) for x, r in pts if r["status"] == "ok"]
            drops = [r["dropped_fraction"] for _, r in ok if R.drops(r)]
            name = S.label_words(label) + (f" (drops {_share_range(drops)})" if drops else "")
            handles.setdefault(name, S.legend_handle(pts[0][1]))
            a1.plot([x for x, _ in ok], [R.activation(r) / div for _, r in ok], **S.look(pts[0][1], ms=4))
            sp = [S.spread_ms(r) for _, r in ok]
            a2.errorbar([x for x, _ in ok], [m for m, _, _ in sp], yerr=[[m - lo for m, lo, _ in sp], [hi - m for m, _, hi in sp]],
                        capsize=1.5, elinewidth=0.7, **S.look(pts[0][1], ms=4))
            for x, r in pts:
                if r["status"] != "ok":
                    j = oom_at.setdefault(round(x - dx, 9), [])
                    j.append(label)
                    S.mark_oom(a1, x, top * (1.06 + 0.08 * (len(j) - 1)), r["status"].upper(), color=S.color_of(r))
        facet = R.point_title(list(key)) if key else ""
        a1.set_ylim(0, top * (1.15 + 0.08 * max([len(v) for v in oom_at.values()] + [0])))
        a2.set_ylim(0, max([S.spread_ms(r)[2] for r in group if r["status"] == "ok"] + [1e-9]) * 1.1)
        for ax, yl in ((a1, f"activation peak ({unit})"), (a2, "median step time (ms)")):
            ax.set_ylabel(yl)
            if not numeric:
                ax.set_xticks(range(len(order)))
                ax.set_xticklabels([str(v) for v in order])
        if overload:
            ticks = []  # one label where two overloads lie closer than a twentieth of the axis
            for v, o in sorted(overload.items(), key=lambda t: t[1]):
                if not ticks or o - ticks[-1][1] > 0.05 * span:
                    ticks.append((v, o))
            a2.set_xticks([o for _, o in ticks])
            a2.set_xticklabels([f"{o:.1f}x\n{v:g}" if isinstance(v, (int, float)) else f"{o:.1f}x\n{v}" for v, o in ticks])
        a1.set_title(": ".join(t for t in (folder_label, facet) if t))
        a2.set_xlabel(f"overload: hottest rank's rows / balanced share\n(below it: {R.key_words(axis)})" if overload
                      else R.key_words(axis))
    S.legend(lax, list(handles.values()), list(handles.keys()), ncol=min(3, len(handles)))
    S.suptitle(fig, f"Every strategy against {'the measured overload' if overload else R.key_words(axis)}\n"
                 "x: out of memory; whiskers: min-max step time over the timed steps; points offset a little sideways")
    return S.save(fig, out, stem, _caption(path, recs) + (" | columns: " + ", ".join(others) if others else ""))


def chunk_grid(ax, grid, steps, title, layer0=0, values=()):
    """MACT's chunk count per layer (rows) and step (columns), one colour per count in every figure
    (style.chunk_colour); returns the image and the counts its colour bar lists."""
    cmap, norm, index, counts = S.chunk_scale([v for row in grid for v in row] + list(values))
    im = ax.imshow([[index[v] for v in row] for row in grid], aspect="auto", cmap=cmap, norm=norm, origin="upper",
                   interpolation="nearest")
    every_l = 1 if len(grid) <= 16 else -(-len(grid) // 12)
    ax.set_yticks(range(0, len(grid), every_l))
    ax.set_yticklabels([str(layer0 + i) for i in range(0, len(grid), every_l)])
    step_labels = [str(s) for s in steps]
    # About a dozen labels at round steps, so that a shared x axis stays legible.
    every = 1 if len(step_labels) <= 20 else next(k for k in (2, 5, 10, 20, 25, 50, 100, 200, 500, 1000)
                                                  if len(step_labels) / k <= 12)
    ax.set_xticks(range(0, len(step_labels), every))
    ax.set_xticklabels(step_labels[::every])
    ax.set_title(title)
    return im, counts


def run_chunks(path, recs, out, stem):
    """MACT's grid of a run's records whose chunks vary per step and layer (at most 4 points)."""
    grids = [r for r in R.hottest(recs) if r["status"] == "ok" and isinstance(r.get("chunks"), list) and r["chunks"]
             and isinstance(r["chunks"][0], list)][:4]
    if not grids:
        return []
    fig, axes = S.figure(len(grids), 1, figsize=(7.5, 0.9 + 2.2 * len(grids)), squeeze=False, sharex=True)
    every = {v for r in grids for step in r["chunks"] for v in step}
    for ax, r in zip(axes[:, 0], grids):
        grid = [list(col) for col in zip(*r["chunks"])]
        im, counts = chunk_grid(ax, grid, r.get("chunk_steps") or range(len(r["chunks"])),
                                f"{S.label_words(r['strategy'])} at {R.point_title(r['point'])}", values=every)
        ax.set_ylabel("layer")
    axes[-1][0].set_xlabel("step")
    S.chunk_colorbar(fig, im, counts, list(axes[:, 0]))
    S.suptitle(fig, "Chunks chosen per layer and step")
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
    fig, axes, lax = S.figure(n, 1, legend_row=True, figsize=(7.5, 2.1 * n + 1.6), squeeze=False)
    a_loss, a_peak, a_recv = axes[0][0], axes[1][0], axes[2][0]
    handles, curves, top = [], {}, 0.0
    for (point, label), rs in runs.items():
        name = S.label_words(label) + (f" at {R.point_title(point)}" if point != "base" else "")
        ok = [r for r in rs if r["status"] == "ok"]
        a_loss.plot([(r["step"] + 1) * tokens for r in ok], [r["loss"] for r in ok], "-", color=S.color_of(rs[0]), lw=0.8,
                    alpha=0.5)
        ev = [r for r in ok if r.get("eval_loss") is not None]
        a_loss.plot([(r["step"] + 1) * tokens for r in ev], [r["eval_loss"] for r in ev], **S.look(rs[0], ms=3))
        # A run whose losses are another's (the same computation): said, since its line lies under that one.
        losses = {r["step"]: r["loss"] for r in ok}
        twin = next((f"{'equal to' if ls == losses else 'within 1% of'} those of {other}" for other, ls in curves.items()
                     if len(losses) > 1 and ls.keys() == losses.keys()
                     and all(abs(ls[k] - v) <= 0.01 * abs(v) for k, v in losses.items())), None)
        curves.setdefault(name, losses)
        peaks = [r for r in rs if r.get("peak_activation_bytes") is not None]
        a_peak.plot([r["step"] for r in peaks], [r["peak_activation_bytes"] / R.MIB for r in peaks], lw=1,
                    **S.look(rs[0], marker=None))
        top = max([top] + [r["peak_activation_bytes"] / R.MIB for r in peaks])
        for r in rs:
            if r["status"] != "ok":
                S.mark_oom(a_peak, r["step"], (r.get("peak_activation_bytes") or 0) / R.MIB, r["status"].upper(),
                           color=S.color_of(rs[0]))
        handles.append((S.legend_handle(rs[0], line=len(peaks) > 1, ms=3), name + (f" (losses {twin})" if twin else "")))
    budget = (cfg.get("memory") or {}).get("budget")
    if budget is not None:
        room = (budget - head["static_bytes"]) / R.MIB
        handles.append((a_peak.axhline(room, color="black", ls="--", lw=0.9), "the budget's room for activations"))
        top = max(top, room)
    a_peak.margins(x=0.03)
    a_peak.set_ylim(0, top * 1.15 or 1.0)
    S.legend(lax, [h for h, _ in handles], [t for _, t in handles], ncol=2)
    S.dress(a_loss, "training tokens", "loss (nats; line: training,\ndots: held-out)", "Loss against tokens",
            legend=False)
    S.dress(a_peak, "step", "activation peak (MiB)" + (", fullest rank" if ranks > 1 else ""),
            "Peak per step (x: the run ended there)", legend=False)
    first = max(runs.values(), key=lambda rs: sum(r["status"] == "ok" for r in rs))  # the longest run
    ok = [r for r in first if r["status"] == "ok"]
    ranks_seen = head.get("stats_ep", ranks)
    # The overload factor: s' over the balanced share, the layer's assignments over the ranks.
    for layer in range(m["layers"]):
        a_recv.plot([r["step"] for r in ok],
                    [r["tokens_received_per_layer"][layer] * ranks_seen / max(1, sum(r["expert_tokens"][layer])) for r in ok],
                    lw=0.9, label=f"layer {layer}", **S.layer_look(layer, m["layers"]))
    a_recv.axhline(1.0, color="0.6", lw=0.8)
    S.dress(a_recv, "step", "overload (hottest rank's rows\n/ balanced share)",
            f"Rows the hottest of {ranks_seen} ranks receives per layer ({S.label_words(first[0]['strategy'])})",
            legend=False)
    if m["layers"] <= 8:
        a_recv.legend(loc="upper right", ncol=min(4, m["layers"]), fontsize=S.SMALL)
    if grid_run:
        (point, label), rs = grid_run
        ok = [r for r in rs if r["status"] == "ok" and isinstance(r.get("chunks"), list)]
        grid = [[r["chunks"][l] for r in ok] for l in range(m["layers"])]
        im, counts = chunk_grid(axes[3][0], grid, [r["step"] for r in ok], f"Chunks per layer and step ({label})")
        axes[3][0].set_xlabel("step")
        axes[3][0].set_ylabel("layer")
        S.chunk_colorbar(fig, im, counts, axes[3][0])
    S.suptitle(fig, ((folder_label + ": ") if folder_label else "") + "Training: " + R.config_line(cfg)
                 + (f", {ranks} real ranks" if ranks > 1 else ""))
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
    fig = B.draw([g for _, g in cols], [_title(g, label) for label, g in cols])
    S.suptitle(fig, "Side by side: activation peak and step time per strategy\n" +
                 B.subtitle([r for _, g in cols for r in g], "the baseline"))
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
