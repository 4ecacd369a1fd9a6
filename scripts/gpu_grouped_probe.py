#!/usr/bin/env python3
"""The grouped expert GEMM's rate on this GPU by shape, for `memfine project`'s grouped GEMM curve
(experiments/project/hardware.yaml grouped_gemm_curve, today three points from three benchmarks at
one shape): a layer's local experts' two projections (fc1: h to 2F, fc2: F to h) at the hidden
size, expert width and local experts of the validation runs' models, at 256 to 8192 rows per expert,
the rows split evenly, as a uniform router's multinomial draw, and under the lognormal law
(sigma 0.77) this suite measured on its learned router. Each is timed three ways, as Megatron's
grouped experts run them: the forward (rows x W), the data gradient (dY x W^T) and the weight
gradient (X^T x dY, a [k, n] per expert), by two backends: `grouped` (torch._grouped_mm, one
CUTLASS kernel on sm90 in bf16, PyTorch 2.8 and later; core/moe/grouped.cpp's op) and `loop` (a
cuBLAS GEMM per expert, as Transformer Engine's GroupedLinear launches them, on one stream here);
and one dense GEMM of all the rows (`dense`, the ceiling). TFLOP/s count 2 x rows x k x n a
product. Beside them, `wgrad_acc`: the weight gradient added into an fp32 gradient buffer per
expert, as Megatron's gradient-accumulation fusion keeps it (Transformer Engine accumulates into
main_grad, cuBLAS's beta = 1): here the product and then the add, an upper bound of the fused
kernel's time, which reads and writes 8 bytes a weight however few the rows; and, with the loop,
`wgrad_fused`: the fused kernel itself, a GEMM per expert writing into the buffer (torch.addmm with
an fp32 out_dtype, PyTorch 2.8 and later), what `memfine project` prices as the longer of the
product and that traffic. Prints one JSON object:
the device, PyTorch, the commit, and a row per case.

usage: gpu_grouped_probe.py [--out FILE.json] [--repeats N] [--quick] [--device cpu]
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from summaries import emit, source_commit  # noqa: E402

# (model, hidden, expert ffn, local experts): the validation runs' MoE shapes at their EP
# (experiments/project/models.yaml; experiments/project/validation/).
SHAPES = [("qwen3_235b_a22b EP8", 4096, 1536, 16), ("qwen3_235b_a22b EP32", 4096, 1536, 4),
          ("qwen3_30b_a3b EP16", 2048, 768, 8), ("gpt_oss_120b EP8", 2880, 2880, 16),
          ("deepseek_v3 EP16", 7168, 2048, 16), ("mixtral_8x22b EP8", 6144, 16384, 1),
          ("moonlight_16b EP8", 2048, 1408, 8), ("mixtral_8x7b EP8", 4096, 14336, 1),
          ("grok1_314b EP8", 6144, 32768, 1)]
ROWS = [256, 512, 1024, 2048, 4096, 8192]
SPLITS = ["even", "multinomial", "lognormal"]
SIGMA = 0.77  # the lognormal law's spread of log expert loads (scripts/trace_sigma.py)
ALIGN = 16    # rows a group is padded to (CUTLASS's bf16 grouped GEMM wants 16-row groups)


def split(rows, experts, how, g):
    """Rows per expert summing to rows x experts, each a multiple of ALIGN (the last takes the rest)."""
    total = rows * experts
    if how == "even" or experts == 1:
        p = torch.full((experts,), 1.0 / experts)
    elif how == "multinomial":
        p = torch.bincount(torch.randint(experts, (total,), generator=g), minlength=experts).double() / total
    else:
        w = torch.exp(SIGMA * torch.randn(experts, generator=g, dtype=torch.float64))
        p = w / w.sum()
    sizes = [int(round(float(x) * total / ALIGN)) * ALIGN for x in p[:-1]]
    sizes.append(max(0, total - sum(sizes)))
    return sizes


def timer(device):
    """Median milliseconds of fn() over `repeats` after one warm-up: CUDA events, or the wall clock."""
    def timed(fn, repeats):
        fn()
        if device == "cuda":
            torch.cuda.synchronize()
        ms = []
        for _ in range(repeats):
            if device == "cuda":
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                fn()
                b.record()
                torch.cuda.synchronize()
                ms.append(a.elapsed_time(b))
            else:
                t = time.perf_counter()
                fn()
                ms.append(1e3 * (time.perf_counter() - t))
        return statistics.median(ms)
    return timed


def products(backend, sizes, offs):
    """(forward, data gradient, weight gradient) of x [rows, k] with w [experts, k, n] by `backend`."""
    if backend == "grouped":
        def fwd(x, w): return torch._grouped_mm(x, w, offs=offs)
        def dgrad(dy, w): return torch._grouped_mm(dy, w.transpose(-2, -1), offs=offs)
        def wgrad(x, dy): return torch._grouped_mm(x.t(), dy, offs=offs)
        return fwd, dgrad, wgrad

    def each(a, b, fn):
        return [fn(a_e, b_e) for a_e, b_e in zip(a, b)]

    def fwd(x, w): return torch.cat(each(x.split(sizes), w, torch.mm))
    def dgrad(dy, w): return torch.cat(each(dy.split(sizes), w, lambda d, w_e: d @ w_e.t()))
    def wgrad(x, dy): return torch.stack(each(x.split(sizes), dy.split(sizes), lambda a, d: a.t() @ d))
    return fwd, dgrad, wgrad


def fused_wgrad(sizes):
    """The weight gradient accumulated into an fp32 buffer [experts, k, n] by each expert's GEMM
    itself (cuBLAS's beta = 1 with an fp32 output), as Transformer Engine's GroupedLinear runs it
    under Megatron's gradient-accumulation fusion."""
    def run(x, dy, main_grad):
        for e, (a, d) in enumerate(zip(x.split(sizes), dy.split(sizes))):
            try:
                torch.addmm(main_grad[e], a.t(), d, out_dtype=torch.float32, out=main_grad[e])
            except TypeError as err:  # no out_dtype before PyTorch 2.8
                raise RuntimeError(str(err)) from err
    return run


def case(h, F, experts, sizes, backend, dtype, device, repeats):
    """TFLOP/s of the two projections' forward, data and weight gradients, and all three."""
    timed = timer(device)
    rows = sum(sizes)
    offs = torch.tensor(sizes, dtype=torch.int32).cumsum(0).to(torch.int32).to(device)
    out = {}
    total_ms = {"fwd": 0.0, "dgrad": 0.0, "wgrad": 0.0}
    flops, acc_ms, fused_ms = 0.0, 0.0, 0.0
    for k, n in ((h, 2 * F), (F, h)):
        # Drawn where they are used (the values do not matter to the time; the device's generator is
        # seeded in run()).
        x = torch.randn(rows, k, dtype=dtype, device=device)
        dy = torch.randn(rows, n, dtype=dtype, device=device)
        # [experts, n, k] stored, read as [experts, k, n]: the layout the CUTLASS kernel takes.
        w = (torch.randn(experts, n, k, dtype=dtype, device=device) / math.sqrt(k)).transpose(-2, -1)
        if backend == "dense":
            w2 = w[0].contiguous()
            parts = {"fwd": lambda: x @ w2, "dgrad": lambda: dy @ w2.t(), "wgrad": lambda: x.t() @ dy}
        else:
            fwd, dgrad, wgrad = products(backend, sizes, offs)
            parts = {"fwd": lambda: fwd(x, w), "dgrad": lambda: dgrad(dy, w), "wgrad": lambda: wgrad(x, dy)}
            main_grad = torch.zeros(experts, k, n, dtype=torch.float32, device=device)
            acc_ms += timed(lambda: main_grad.add_(wgrad(x, dy)), repeats)
            if backend == "loop" and fused_ms is not None:
                fused = fused_wgrad(sizes)
                try:
                    fused_ms += timed(lambda: fused(x, dy, main_grad), repeats)
                except RuntimeError as err:
                    fused_ms, out["wgrad_fused_error"] = None, str(err).splitlines()[0]
        for name, fn in parts.items():
            total_ms[name] += timed(fn, repeats)
        flops += 2.0 * rows * k * n
    for name, ms in total_ms.items():
        out[f"{name}_tflops"] = flops / (ms * 1e-3) / 1e12
    out["tflops"] = 3 * flops / (sum(total_ms.values()) * 1e-3) / 1e12
    if acc_ms > 0:
        out["wgrad_acc_tflops"] = flops / (acc_ms * 1e-3) / 1e12
    if fused_ms:
        out["wgrad_fused_tflops"] = flops / (fused_ms * 1e-3) / 1e12
    out["ms"] = sum(total_ms.values())
    return out


def measured(row, fill, device, out):
    """One case: `fill(row)` measures it into its row, or the row says why it could not (out of memory,
    no such kernel here); the row is kept and printed as it comes."""
    try:
        fill(row)
    except (RuntimeError, NotImplementedError) as e:
        row["error"] = str(e).splitlines()[0]
        if device == "cuda":
            torch.cuda.empty_cache()
    out.append(row)
    print(json.dumps(row), file=sys.stderr)


def run(shapes, rows_list, splits, backends, dtype, device, repeats, seed=0):
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    out = []
    for model, h, F, experts in shapes:
        for rows in rows_list:
            for how in splits:
                sizes = split(rows, experts, how, g)
                for backend in backends:
                    if backend == "dense" and how != "even":
                        continue  # one GEMM of all the rows: the split does not apply
                    r = {"model": model, "hidden": h, "ffn": F, "experts": experts, "rows_per_expert": rows,
                         "split": how, "largest_group": max(sizes), "backend": backend}
                    measured(r, lambda r: r.update(case(h, F, experts, sizes, backend, dtype, device, repeats)),
                             device, out)
    return out


def kernel_probe(prog, doc, argv):
    """A kernel probe's flags (--device, --repeats, --quick, --out), parsed, with its dtype (bf16 on a
    GPU, float32 for a CPU's dry run), its shapes and rows (one tiny shape and two row counts with
    --quick) and the header of what it prints: the device, PyTorch, the commit, the dtype."""
    ap = argparse.ArgumentParser(prog=prog, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--quick", action="store_true", help="one tiny shape, two row counts (a dry run)")
    ap.add_argument("--out", help="also write the JSON here")
    a = ap.parse_args(argv)
    if a.repeats < 1:
        ap.error("--repeats must be at least 1")
    a.dtype = torch.bfloat16 if a.device == "cuda" else torch.float32
    a.shapes = [("tiny", 64, 32, 4)] if a.quick else SHAPES
    a.header = {"device": torch.cuda.get_device_name() if a.device == "cuda" else "cpu", "torch": torch.__version__,
                "git_commit": source_commit(), "dtype": str(a.dtype).replace("torch.", ""), "repeats": a.repeats}
    return a


def main(argv=None):
    a = kernel_probe("gpu_grouped_probe.py", __doc__, argv)
    native = a.device == "cuda" and hasattr(torch, "_grouped_mm")
    backends = (["grouped"] if native else []) + ["loop", "dense"]
    rows = run(a.shapes, [16, 32] if a.quick else ROWS, SPLITS, backends, a.dtype, a.device, a.repeats)
    emit({**a.header, "backends": backends, "rows": rows}, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
