#!/usr/bin/env python3
"""What offloading's copies cost on this GPU, measured: device-to-host and host-to-device bandwidth
from pinned and from pageable host memory at sizes from 1 MiB to 1 GiB; the same copies on a stream
of their own while a bf16 matrix product runs on the compute stream (what each slows the other by);
and the break-even bandwidth against recomputation at DeepSeek-V3's expert shape (hidden 7168,
ffn 2048): the bandwidth at which copying the first expert GEMM's output out and back takes as long
as recomputing it. The offloading model's h2d_gbps / d2h_gbps come from here. Prints one JSON object.

usage: gpu_copy_probe.py [--out FILE.json] [--repeats N]
"""
import argparse
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from summaries import emit, source_commit  # noqa: E402


def timed(fn, repeats, stream=None):
    """Median milliseconds of fn() over `repeats`, timed with CUDA events on `stream`."""
    stream = stream or torch.cuda.current_stream()
    fn()
    torch.cuda.synchronize()
    ms = []
    for _ in range(repeats):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(stream):
            a.record()
            fn()
            b.record()
        torch.cuda.synchronize()
        ms.append(a.elapsed_time(b))
    return statistics.median(ms)


def bandwidths(repeats):
    rows = []
    for mib in (1, 4, 16, 64, 256, 1024):
        n = mib << 20
        dev = torch.empty(n, dtype=torch.uint8, device="cuda")
        for pinned in (True, False):
            host = torch.empty(n, dtype=torch.uint8, pin_memory=pinned)
            d2h = timed(lambda: host.copy_(dev, non_blocking=pinned), repeats)
            h2d = timed(lambda: dev.copy_(host, non_blocking=pinned), repeats)
            rows.append({"mib": mib, "pinned": pinned, "d2h_gb_s": n / d2h / 1e6, "h2d_gb_s": n / h2d / 1e6,
                         "d2h_ms": d2h, "h2d_ms": h2d})
    return rows


def overlapped(repeats):
    """A 1 GiB pinned copy each way on a side stream against a bf16 product on the compute stream."""
    n = 1 << 30
    dev = torch.empty(n, dtype=torch.uint8, device="cuda")
    host = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    side = torch.cuda.Stream()
    reps = 8  # products per timing: about as long as the copy

    def products():
        for _ in range(reps):
            torch.mm(a, b)

    alone_mm = timed(products, repeats)
    out = {"matmul_alone_ms": alone_mm, "matmul_tflops": reps * 2 * 8192**3 / alone_mm / 1e9}
    for name, copy in (("d2h", lambda: host.copy_(dev, non_blocking=True)),
                       ("h2d", lambda: dev.copy_(host, non_blocking=True))):
        alone = timed(copy, repeats, side)
        both_copy, both_mm = [], []
        for _ in range(repeats):
            torch.cuda.synchronize()
            e = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
            e[0].record(torch.cuda.current_stream())
            side.wait_event(e[0])
            with torch.cuda.stream(side):
                copy()
            e[1].record(side)
            products()
            e[2].record(torch.cuda.current_stream())
            torch.cuda.synchronize()
            both_copy.append(e[0].elapsed_time(e[1]))
            both_mm.append(e[0].elapsed_time(e[2]))
        out[name] = {"alone_ms": alone, "alone_gb_s": n / alone / 1e6,
                     "with_matmul_ms": statistics.median(both_copy),
                     "with_matmul_gb_s": n / statistics.median(both_copy) / 1e6,
                     "matmul_with_copy_ms": statistics.median(both_mm),
                     "matmul_slowdown": statistics.median(both_mm) / alone_mm}
    return out


def break_even(repeats):
    """DeepSeek-V3's expert: x [rows, 7168] @ w1 [7168, 2*2048] (gate and up), bf16. Recomputing the
    output costs one such product; offloading it moves rows*4096*2 bytes out and back."""
    rows_out = []
    for rows in (2048, 8192, 32768):
        x = torch.randn(rows, 7168, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(7168, 4096, device="cuda", dtype=torch.bfloat16)
        ms = timed(lambda: torch.mm(x, w), repeats)
        nbytes = rows * 4096 * 2
        rows_out.append({"rows": rows, "fc1_ms": ms, "fc1_tflops": 2 * rows * 7168 * 4096 / ms / 1e9,
                         "output_bytes": nbytes,
                         # one way (the copy out overlaps forward, the copy back backward): each way
                         # must move the output within one recompute's time to beat recomputing
                         "break_even_gb_s": nbytes / ms / 1e6})
    return rows_out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out")
    ap.add_argument("--repeats", type=int, default=10)
    a = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("gpu_copy_probe: no CUDA device")
    res = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "git_commit": source_commit(),
           "bandwidth": bandwidths(a.repeats), "overlap": overlapped(a.repeats),
           "break_even": break_even(a.repeats)}
    emit(res, a.out)


if __name__ == "__main__":
    main()
