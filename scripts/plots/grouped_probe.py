"""scripts/gpu_grouped_probe.py's JSON (results/<gpu>/probes/grouped.json): the grouped expert GEMM's
rate by rows per expert at the validation models' shapes, against a GEMM per expert and one dense
GEMM, as a figure and a table; and the curve `memfine project`'s preset for that GPU takes from it."""
import json
import os
import statistics

from . import style as S

BACKENDS = (("grouped", "grouped GEMM (torch._grouped_mm)"), ("loop", "a GEMM per expert"))
# A shape is not a strategy: grey lines (style.layer_look), told apart by dash and by marker.
SHAPE_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


def load(path):
    with open(path) as f:
        return json.load(f)


def rows_of(doc, backend, split="even"):
    return [r for r in doc["rows"] if r["backend"] == backend and r["split"] == split and "error" not in r]


def curve(doc):
    """[rows per expert, TFLOP/s]: the median over the probe's shapes of the grouped GEMM's forward and
    both backward products together (what the projection prices with one rate), rows split evenly."""
    by = {}
    for r in rows_of(doc, "grouped"):
        by.setdefault(r["rows_per_expert"], []).append(r["tflops"])
    return [[rows, round(statistics.median(v), 1)] for rows, v in sorted(by.items())]


def work_curve(doc):
    """[GFLOP, TFLOP/s]: the best rate any of the probe's shapes reached at or below each work of a
    layer's grouped call (its local experts' FC1 and FC2 forward, 6 x rows x hidden x ffn an expert),
    rows split evenly: the points where that best rises. A call of less work, whatever its rows per
    expert, fills the GPU less; the projection caps its rate by rows with it."""
    best_at = {}
    for r in rows_of(doc, "grouped"):
        work = round(6 * r["rows_per_expert"] * r["experts"] * r["hidden"] * r["ffn"] / 1e9, 1)
        best_at[work] = max(best_at.get(work, 0.0), r["tflops"])
    out, best = [], 0.0
    for work, tflops in sorted(best_at.items()):
        if tflops > best:
            best = tflops
            out.append([work, round(tflops, 1)])
    return out


def _shapes(doc):
    seen = []
    for r in doc["rows"]:
        if r["model"] not in seen:
            seen.append(r["model"])
    return seen


def grouped_probe(path, out_dir):
    doc = load(path)
    shapes = _shapes(doc)
    rows = sorted({r["rows_per_expert"] for r in doc["rows"]})
    src = (f"Source: {os.path.relpath(path)} (commit {doc.get('git_commit', '?')}, PyTorch {doc.get('torch', '?')}, "
           f"{doc.get('device', '?')}, {doc.get('dtype', '?')}, median of {doc.get('repeats', '?')} timed runs a case)")
    fig, axes, lax = S.figure(1, 2, legend_row=True, figsize=(8, 3.6), sharey=True)
    handles = []
    for ax, (backend, title) in zip(axes, BACKENDS):
        for i, model in enumerate(shapes):
            pts = sorted((r["rows_per_expert"], r["tflops"]) for r in rows_of(doc, backend) if r["model"] == model)
            if pts:
                line, = ax.plot(*zip(*pts), marker=SHAPE_MARKERS[i % len(SHAPE_MARKERS)], ms=3.5,
                                **S.layer_look(i, len(shapes)))
                if backend == "grouped":
                    handles.append((line, model))
        med = curve(doc)
        ref, = ax.plot(*zip(*med), color="black", lw=2.2, alpha=0.35, label="median, grouped")
        ax.set_xscale("log", base=2)
        ax.set_xticks(rows, [str(r) for r in rows])
        ax.set_ylim(bottom=0)
        S.dress(ax, "rows per expert (split evenly)", "TFLOP/s (forward + both gradients)", title, legend=False)
    S.legend(lax, [h for h, _ in handles] + [ref], [m for _, m in handles] + ["the grouped GEMM's median over shapes"],
             ncol=4)
    S.suptitle(fig, f"The grouped expert GEMM by rows per expert at the validation models' shapes, "
                    f"{doc.get('device', '?')} ({doc.get('dtype', '?')})")
    caption = ("Each layer's local experts' two projections (h -> 2F, F -> h) at the model's shape and local "
               "experts; TFLOP/s count 2 x rows x k x n a product.\n" + src)
    out = S.save(fig, out_dir, "grouped_probe", caption)
    header = ["shape (hidden, expert width, local experts)"] + [f"{r} rows" for r in rows]
    table = []
    for model in shapes:
        one = [r for r in doc["rows"] if r["model"] == model]
        h = one[0]
        cells = []
        for n in rows:
            g = next((r for r in rows_of(doc, "grouped") if r["model"] == model and r["rows_per_expert"] == n), None)
            lp = next((r for r in rows_of(doc, "loop") if r["model"] == model and r["rows_per_expert"] == n), None)
            cells.append(f"{g['tflops']:.0f} ({lp['tflops']:.0f})" if g and lp else "-")
        table.append([f"{model} ({h['hidden']}, {h['ffn']}, {h['experts']})"] + cells)
    table.append(["median over shapes, grouped"] + [f"{v:.0f}" for _, v in curve(doc)])
    notes = ["TFLOP/s of the forward and both gradient products together, rows split evenly among the experts: "
             "the grouped GEMM (torch._grouped_mm), in parentheses a GEMM per expert; the last row is the curve "
             "`memfine project`'s preset for this GPU takes (experiments/project/hardware.yaml).", src]
    out += S.write_table(out_dir, "grouped_probe_table", "The grouped expert GEMM by rows per expert", header, table,
                         notes)
    return out
