"""REPORT.md's GPU section: what the GPU folders (results/<gpu>/, beside the CPU results) measured,
each sentence decided by the records it cites."""
import glob
import os
import statistics

from . import records as R
from .paper import claims
from .sweeps import bf16_peak


def _recs(gpu_dir, name):
    path = os.path.join(gpu_dir, name, "results.jsonl")
    return (R.load(path), path) if os.path.exists(path) else ([], path)


def _ok(rs, strategy):
    return next((r for r in rs if r["strategy"] == strategy and r["status"] == "ok"), None)


def _over(slow, fast):
    """How many times faster `fast` ran than `slow` (two records; None where either is missing)."""
    return R.median_ms(slow) / R.median_ms(fast) if slow and fast else None


def _speed(rs, strategy, base="full_recompute"):
    return _over(_ok(rs, base), _ok(rs, strategy))


def _source(recs, path):
    env = R.env_of(recs)
    return (f"`{os.path.relpath(path)}`: {env.get('device_name', '?')}, LibTorch {env.get('libtorch', '?')}, "
            f"{R.commit_text(env.get('git_commit', '?'))}")


def grouped_lines(gpu_dir):
    recs, path = _recs(gpu_dir, "gpu_grouped")
    if not recs:
        return []
    by = {}
    for r in recs:
        by.setdefault((r["config"].get("expert_gemm"), r["ep"]), []).append(r)
    eps = sorted({ep for _, ep in by})
    paper = 1 + claims()["tgs_fixed8_vs_full_II"]  # the paper's fixed 8 chunks against full recomputation
    out = [f"Grouped expert GEMMs against one per expert ({_source(recs, path)}; speed = full recomputation's step "
           "time / the strategy's, at the same point):", ""]
    for ep in eps:
        loop, grouped = by.get(("loop", ep), []), by.get(("grouped", ep), [])
        parts = []
        for s in ("memfine(chunks=2)", "memfine(chunks=4)", "memfine(chunks=8)"):
            a, b = _speed(loop, s), _speed(grouped, s)
            if a and b:
                parts.append(f"{s.split('=')[1].rstrip(')')} chunks {a:.2f}x -> {b:.2f}x")
        ratios = {s: _over(_ok(loop, s), _ok(grouped, s)) for s in sorted({r["strategy"] for r in loop})}
        ratios = {s: x for s, x in ratios.items() if x is not None}
        faster = [s for s, x in ratios.items() if x > 1]
        out.append(f"- EP {ep}, loop -> grouped: {'; '.join(parts)} (the paper's 8 chunks: {paper:.3f}x). The grouped "
                   f"GEMM's speed-up per strategy: " + ", ".join(f"{s} {x:.2f}x" for s, x in ratios.items())
                   + f"; faster for {len(faster)} of {len(ratios)}.")
        eight = _speed(grouped, "memfine(chunks=8)")
        if eight is not None:
            verdict = "reaches" if eight >= paper - 0.02 else "does not reach"
            out.append(f"  8 chunks with grouped GEMMs {verdict} the paper's cost ({eight:.2f}x against {paper:.3f}x).")
    return out + [""]


def peak_lines(gpu_dir):
    recs, path = _recs(gpu_dir, "gpu_peak")
    if not recs:
        return []
    out = [f"What sets the activation peak on the GPU ({_source(recs, path)}):", ""]
    for point, rs in R.by_point(recs).items():
        peaks = [f"{r['strategy']} {R.activation(r) / 2**30:.2f} GiB (model {r['predicted_activation_bytes'] / 2**30:.2f})"
                 for r in rs if r["status"] == "ok" and r.get("predicted_activation_bytes")]
        out.append(f"- {point}: " + ", ".join(peaks) + ".")
    return out + [""]


def budget_lines(gpu_dir):
    recs, path = _recs(gpu_dir, "gpu_budget")
    if not recs:
        return []
    budget = next((r["budget_bytes"] for r in recs if r.get("budget_bytes")), None)
    gemm = R.config_of(recs).get("expert_gemm", "loop")
    cells = []
    for r in recs:
        if r["status"] == "ok":
            cells.append(f"{r['strategy']} fits ({R.activation(r) / 2**30:.2f} GiB of activations, the model said "
                         f"{r['predicted_activation_bytes'] / 2**30:.2f})")
        else:
            cells.append(f"{r['strategy']} {r['status']} ({r.get('error') or '-'})")
    return [f"Under a budget of {budget / 2**30:.1f} GiB ({_source(recs, path)}, expert GEMMs {gemm}): "
            + "; ".join(cells) + ".", ""]


def model_lines(gpu_dir):
    recs, path = _recs(gpu_dir, "gpu_model_accuracy")
    ok = [r for r in recs if r["status"] == "ok" and R.activation(r) and r.get("predicted_activation_bytes")]
    if not ok:
        return []
    err = [100 * R.model_error(r) for r in ok]
    low = min(err)
    return [f"The implementation memory model against the CUDA meter ({_source(recs, path)}): {len(ok)} points, median "
            f"|error| {statistics.median(abs(e) for e in err):.1f}%, {sum(abs(e) <= 5 for e in err)} within 5%, "
            f"{sum(e < -5 for e in err)} more than 5% low (lowest {low:+.1f}%): MACT's 5% headroom does not cover it "
            "where the model reads low.", ""]


def rate_lines(gpu_dir):
    recs, path = _recs(gpu_dir, "gpu_baselines")
    if not recs:
        return []
    name, peak = bf16_peak(recs)
    if not peak:
        return []
    out = [f"Model TFLOP/s and share of the {name}'s {peak:g} TFLOP/s bf16 peak ({_source(recs, path)}):", ""]
    for point, rs in R.by_point(recs).items():
        cells = [f"{r['strategy']} {r['tflops']:.0f} ({100 * r['tflops'] / peak:.0f}%)" for r in rs
                 if r["status"] == "ok" and r.get("tflops")]
        out.append(f"- {point}: " + ", ".join(cells) + ".")
    return out + [""]


def lines(cpu_results):
    """One section per GPU folder beside `cpu_results` (results/h100, results/h200, ...)."""
    out = []
    for gpu_dir in sorted(glob.glob(os.path.join(os.path.dirname(os.path.abspath(cpu_results)), "[a-z]*[0-9]*"))):
        body = (grouped_lines(gpu_dir) + peak_lines(gpu_dir) + budget_lines(gpu_dir) + model_lines(gpu_dir)
                + rate_lines(gpu_dir))
        if body:
            out += [f"## On a GPU: `{os.path.relpath(gpu_dir)}`", "", *body]
    return out
