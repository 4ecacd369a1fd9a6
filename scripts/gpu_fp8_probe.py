#!/usr/bin/env python3
"""FP8 over bf16 for a linear's GEMMs on this GPU, for `memfine project`'s fp8_gemm_speedup_curve
(experiments/project/hardware.yaml, today from two published benchmarks on an H100): one expert's
two projections (fc1: h to 2F, fc2: F to h) at the validation runs' models' shapes (those of
scripts/gpu_grouped_probe.py), at 128 to 8192 rows, each timed three ways, as a linear's GEMMs run in
training: the forward (x W^T), the data gradient (dY W) and the weight gradient (dY^T x). In bf16
(torch.mm) and in FP8 (torch._scaled_mm: E4M3 operands scaled per tensor, bf16 out, what Transformer
Engine's per-tensor recipes run on Hopper), each FP8 operand cast beforehand in the layout its GEMM
takes (Hopper's FP8 GEMMs take no transposed operand: TE keeps a column-wise copy beside the
row-wise one), so that the ratio is the GEMMs' alone, as the curve's is. The casts apart: a [rows, h]
bf16 input's amax pass, its scaled cast to E4M3 and its column-wise copy, as TE's current scaling
runs them, against the 6 bytes an element `memfine project` prices them at (hbm_gb_s); and this
GPU's own HBM rate as BabelStream's Copy counts it (a tensor copied into another, its bytes read and
written), the figure hbm_gb_s takes (the H200 preset's is the datasheet's upper bound). The data
gradient's operand is E4M3 here where TE's hybrid recipe takes E5M2: the same tensor-core rate.
Prints one JSON object: the device, PyTorch, the commit, a row per GEMM case and per cast case.

usage: gpu_fp8_probe.py [--out FILE.json] [--repeats N] [--quick] [--device cpu]
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_grouped_probe import kernel_probe, measured, timer  # noqa: E402
from summaries import emit  # noqa: E402

ROWS = [128, 256, 512, 1024, 2048, 4096, 8192]
E4M3_MAX = 448.0  # the largest E4M3 value: a tensor's scale maps its amax there


def fp8_dtype():
    """E4M3 where this PyTorch has it (2.1 and later), else None."""
    return getattr(torch, "float8_e4m3fn", None)


def cast(t, dtype):
    """The per-tensor scaled cast: (t's FP8 copy, the scale that undoes it), as current scaling computes it."""
    amax = t.abs().amax().float().clamp(min=1e-12)
    scale = E4M3_MAX / amax
    return (t.float() * scale).to(dtype), (1.0 / scale).reshape(())


def products(x, w, dy, fp8):
    """The three GEMMs of a linear with weight w [n, k] on input x [rows, k] and output gradient dy
    [rows, n]: bf16 callables, or FP8 ones on operands cast here, each in the layout it takes."""
    if fp8 is None:
        return {"fwd": lambda: x @ w.t(), "dgrad": lambda: dy @ w, "wgrad": lambda: dy.t() @ x}
    xq, sx = cast(x, fp8)                       # row-wise x for the forward
    xtq, _ = cast(x.t().contiguous(), fp8)      # column-wise x for the weight gradient
    wq, sw = cast(w, fp8)                       # [n, k]: w^T column-major for the forward
    wtq, _ = cast(w.t().contiguous(), fp8)      # [k, n]: w column-major for the data gradient
    dyq, sd = cast(dy, fp8)
    dytq, _ = cast(dy.t().contiguous(), fp8)    # [n, rows] row-major for the weight gradient

    def mm(a, b, sa, sb):
        return torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)

    return {"fwd": lambda: mm(xq, wq.t(), sx, sw), "dgrad": lambda: mm(dyq, wtq.t(), sd, sw),
            "wgrad": lambda: mm(dytq, xtq.t(), sd, sx)}


def gemm_case(rows, k, n, dtype, fp8, device, repeats):
    """Milliseconds of the three GEMMs, bf16 and FP8, at one shape."""
    timed = timer(device)
    x = torch.randn(rows, k, dtype=dtype, device=device)
    dy = torch.randn(rows, n, dtype=dtype, device=device)
    w = torch.randn(n, k, dtype=dtype, device=device) / k ** 0.5
    out = {}
    for name, fns in (("bf16", products(x, w, dy, None)), ("fp8", products(x, w, dy, fp8) if fp8 else None)):
        if fns is None:
            continue
        for part, fn in fns.items():
            out[f"{name}_{part}_ms"] = timed(fn, repeats)
    return out


def cast_case(rows, h, dtype, fp8, device, repeats):
    """The casts of a [rows, h] input: the amax pass, the row-wise cast, the column-wise copy."""
    timed = timer(device)
    x = torch.randn(rows, h, dtype=dtype, device=device)
    amax = x.abs().amax().float()
    scale = E4M3_MAX / amax
    parts = {"amax_ms": lambda: x.abs().amax(), "cast_ms": lambda: (x.float() * scale).to(fp8),
             "columnwise_ms": lambda: (x.t().float() * scale).to(fp8).contiguous()}
    out = {name: timed(fn, repeats) for name, fn in parts.items()}
    ms = sum(out.values())
    out["ns_per_element"] = ms * 1e6 / (rows * h)
    out["gb_s_of_6_bytes"] = 6 * rows * h / (ms * 1e-3) / 1e9  # the rate at which 6 bytes an element would move
    return out


def copy_case(elements, dtype, device, repeats):
    """The HBM rate as BabelStream's Copy counts it: bytes read and written over the time."""
    timed = timer(device)
    a = torch.randn(elements, dtype=dtype, device=device)
    b = torch.empty_like(a)
    ms = timed(lambda: b.copy_(a), repeats)
    return {"elements": elements, "copy_ms": ms, "gb_s": 2 * a.element_size() * elements / (ms * 1e-3) / 1e9}


def gemm_row(r, dtype, fp8, device, repeats):
    """A GEMM case's times, its TFLOP/s in bf16 and in FP8 (all three GEMMs), and their ratio."""
    rows, k, n = r["rows"], r["k"], r["n"]
    r.update(gemm_case(rows, k, n, dtype, fp8, device, repeats))
    flops = 3 * 2.0 * rows * k * n
    for name in ("bf16",) + (("fp8",) if fp8 else ()):
        r[f"{name}_tflops"] = flops / (sum(r[f"{name}_{p}_ms"] for p in ("fwd", "dgrad", "wgrad")) * 1e-3) / 1e12
    if fp8:
        r["ratio"] = r["fp8_tflops"] / r["bf16_tflops"]
    else:
        r["error"] = "no FP8 GEMM here (torch._scaled_mm needs CUDA on sm89 or later, PyTorch 2.1+)"


def run(shapes, rows_list, dtype, device, repeats, copy_elements=1 << 28):
    fp8 = fp8_dtype() if device == "cuda" and hasattr(torch, "_scaled_mm") else None
    torch.manual_seed(0)
    out = []
    # 512 MiB a tensor in bf16: far past the H200's 50 MB L2, as BabelStream sizes its arrays.
    r = {"kind": "copy"}
    measured(r, lambda r: r.update(copy_case(copy_elements, dtype, device, repeats)), device, out)
    for model, h, F, _experts in shapes:
        for rows in rows_list:
            for gemm, k, n in (("fc1", h, 2 * F), ("fc2", F, h)):
                r = {"kind": "gemm", "model": model, "gemm": gemm, "rows": rows, "k": k, "n": n}
                measured(r, lambda r: gemm_row(r, dtype, fp8, device, repeats), device, out)
            if fp8 is not None:
                r = {"kind": "cast", "model": model, "rows": rows, "k": h}
                measured(r, lambda r: r.update(cast_case(rows, h, dtype, fp8, device, repeats)), device, out)
    return out


def main(argv=None):
    a = kernel_probe("gpu_fp8_probe.py", __doc__, argv)
    rows = run(a.shapes, [16, 32] if a.quick else ROWS, a.dtype, a.device, a.repeats,
               1 << 16 if a.quick else 1 << 28)
    fp8 = str(fp8_dtype()).replace("torch.", "") if a.device == "cuda" else None
    emit({**a.header, "fp8": fp8, "rows": rows}, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
