#!/usr/bin/env python3
"""Fits the step-time cost model from memfine_bench's JSON and checks it against the layer steps.

    scripts/python scripts/cost_model.py BENCH.json --out results/cpu/cost_model.json \
        --table paper_figures/cost_model_table.md

The model, per layer (times are medians over repetitions):
  no_recompute       S0                     (measured layer step)
  full_recompute     S1                     (measured layer step)
  memfine, 1 chunk   M1                     (measured layer step)
  memfine, c chunks  M1 + (c - 1) * o + sum over local experts e of [c * f(r_e / c) - f(r_e)]
where f(rows) is one expert's SwiGLU forward + backward time (measured from 16 to 65536 rows,
interpolated in log-log), r_e the rows local expert e receives (the benchmarked layer's, from the
bench's context `layer_expert_rows`; in a run, each layer's own), and o the fixed cost of one
chunk beyond its experts' (dispatch, combine, autograd calls), the one fitted number: least
squares over the chunk counts benchmarked, clamped at zero. memfine (C++) reads the JSON for
`objective: time`.
"""
import argparse
import bisect
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from plots.tables import markdown  # noqa: E402


def medians(bench):
    """name -> (median real time in ms, counters) for the aggregate rows (or single runs)."""
    out = {}
    for b in bench["benchmarks"]:
        if b.get("run_type") == "aggregate" and b.get("aggregate_name") != "median":
            continue
        name = b.get("run_name", b["name"])
        unit = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[b.get("time_unit", "ns")]
        out[name] = (b["real_time"] * unit, b)
    return out


def curve(points):
    """Log-log piecewise-linear interpolation through (rows, ms) points; linear beyond the ends."""
    pts = sorted(points)
    xs = [math.log(x) for x, _ in pts]
    ys = [math.log(y) for _, y in pts]

    def f(rows):
        if rows <= 0:
            return 0.0
        lx = math.log(rows)
        if lx <= xs[0]:
            return pts[0][1] * rows / pts[0][0]
        if lx >= xs[-1]:
            return pts[-1][1] * rows / pts[-1][0]
        i = bisect.bisect_right(xs, lx) - 1
        t = (lx - xs[i]) / (xs[i + 1] - xs[i])
        return math.exp(ys[i] + t * (ys[i + 1] - ys[i]))
    return f


def fit(bench_path):
    bench = json.load(open(bench_path))
    med = medians(bench)
    fw = [(b["rows"], ms) for n, (ms, b) in med.items() if n.startswith("BM_ExpertForward/")]
    fb = [(b["rows"], ms) for n, (ms, b) in med.items() if n.startswith("BM_ExpertForwardBackward/")]
    f = curve(fb)
    layer = {n: (ms, b) for n, (ms, b) in med.items() if n.startswith("BM_LayerStep/")}
    s0 = next(ms for n, (ms, b) in layer.items() if n.startswith("BM_LayerStep/0/"))
    s1, b1 = next((ms, b) for n, (ms, b) in layer.items() if n.startswith("BM_LayerStep/1/"))
    rows = b1["rows"]
    chunked = sorted((int(b["chunks"]), ms) for n, (ms, b) in layer.items() if n.startswith("BM_LayerStep/2/"))

    ctx = bench.get("context", {})
    if "layer_expert_rows" not in ctx:
        sys.exit(f"{bench_path}: no layer_expert_rows in its context: rerun scripts/fit-cost-model with this build")
    expert_rows = [int(r) for r in ctx["layer_expert_rows"].split(",")]
    if sum(expert_rows) != int(rows):
        sys.exit(f"{bench_path}: layer_expert_rows sum to {sum(expert_rows)}, the layer steps received {int(rows)}")

    def split_cost(c):
        return sum(c * f(r / c) - f(r) for r in expert_rows if r > 0)

    m1 = next(ms for c, ms in chunked if c == 1)
    num = sum((c - 1) * (ms - m1 - split_cost(c)) for c, ms in chunked)
    den = sum((c - 1) ** 2 for c, _ in chunked)
    # A chunk's fixed cost cannot be negative; a negative fit is measurement noise, so clamp it.
    o = max(0.0, num / den) if den else 0.0
    # The ceiling is the best dense GEMM rate over the sizes benchmarked, not one size's.
    ceiling = max((b["FLOPS"] for n, (ms, b) in med.items() if n.startswith("BM_Matmul/")), default=None)
    model = {
        "source": os.path.relpath(bench_path),
        "context": ctx,
        "rows": rows, "expert_rows": expert_rows,
        # Measured layer steps, by what the layer keeps: everything, its input only, one chunk.
        "layer_ms": {"stored": s0, "layer_recomputed": s1, "chunked_1": m1},
        "per_chunk_ms": o,
        "expert_fwd_bwd_ms": [[r, ms] for r, ms in sorted(fb)],
        "expert_fwd_ms": [[r, ms] for r, ms in sorted(fw)],
        "matmul_ceiling_flops": ceiling,
        "kernel_flops": {n: b.get("FLOPS") for n, (ms, b) in med.items() if b.get("FLOPS")},
    }
    checks = [(c, ms, m1 + (c - 1) * o + split_cost(c)) for c, ms in chunked if c > 1]
    return model, checks


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bench", help="memfine_bench JSON (--benchmark_out)")
    ap.add_argument("--out", required=True, help="cost model JSON to write")
    ap.add_argument("--table", help="Markdown table of predicted against measured layer steps")
    args = ap.parse_args(argv)
    model, checks = fit(args.bench)
    with open(args.out, "w") as f:
        json.dump(model, f, indent=1)
    worst = max(abs(p - m) / m for _, m, p in checks)
    lines = ["# Step-time cost model against the measured layer steps", "",
             *markdown(["strategy", "measured ms", "predicted ms", "error"]),
             f"| no_recompute | {model['layer_ms']['stored']:.2f} | (measured) | |",
             f"| full_recompute | {model['layer_ms']['layer_recomputed']:.2f} | (measured) | |",
             f"| memfine(chunks=1) | {model['layer_ms']['chunked_1']:.2f} | (measured) | |"]
    lines += [f"| memfine(chunks={c}) | {m:.2f} | {p:.2f} | {100 * (p - m) / m:+.1f}% |" for c, m, p in checks]
    ceiling = model["matmul_ceiling_flops"]
    lines += ["", f"Fitted: {model['per_chunk_ms']:.3f} ms per chunk; worst error {100 * worst:.1f}% (target 15%). "
              "Measured values are medians of 5 repetitions; the layer steps' own spread here is several percent "
              "(see the benchmark JSON's stddev/cv rows).",
              f"Machine ceiling (the best dense n^3 matmul over n = 512, 1024, 1536; same BLAS and threads): {ceiling / 1e9:.1f} GFLOP/s." if ceiling else "",
              "", *markdown(["kernel", "GFLOP/s", "fraction of the ceiling"])]
    for n, fl in sorted(model["kernel_flops"].items()):
        lines.append(f"| {n} | {fl / 1e9:.2f} | {fl / ceiling:.2f} |" if ceiling else f"| {n} | {fl / 1e9:.2f} | |")
    lines += ["", f"Source: {model['source']}; fitted by scripts/cost_model.py into {os.path.relpath(args.out)}."]
    if args.table:
        with open(args.table, "w") as f:
            f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
