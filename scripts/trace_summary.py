#!/usr/bin/env python3
"""Where a profiled step's time went (`memfine run --profile DIR` writes the traces): for each trace,
the step's span, the GPU's busy time (kernels, copies and fills, overlaps counted once) and idle
time, kernel launches, the runtime calls that make the host wait for the GPU (synchronisations and
blocking copies), and the kernels that took the most GPU time. A table on stdout; --json FILE for
programs. Traces may be gzipped.

usage: trace_summary.py TRACE.json[.gz] ... [--top N] [--json FILE]
"""
import gzip
import json
import os
import sys

import summaries

GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
# Runtime calls after which the host has waited for the device.
WAITS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy ", "cudaMemcpy\0")


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)


def union_us(intervals):
    total, end = 0.0, None
    for s, e in sorted(intervals):
        if end is None or s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


def summarize(path, top):
    events = [e for e in load(path).get("traceEvents", []) if e.get("ph") == "X" and "dur" in e]
    gpu = [e for e in events if e.get("cat") in GPU_CATS]
    cpu = [e for e in events if e.get("cat") in ("cpu_op", "user_annotation", "cuda_runtime", "cuda_driver")]
    if not events:
        raise ValueError(f"{path}: no timed events (is it a trace that `memfine run --profile` wrote?)")
    start = min(e["ts"] for e in events)
    end = max(e["ts"] + e["dur"] for e in events)
    busy = union_us([(e["ts"], e["ts"] + e["dur"]) for e in gpu])
    kernels = [e for e in gpu if e["cat"] == "kernel"]
    by_name = {}
    for e in kernels:
        n = e["name"]
        t, c = by_name.get(n, (0.0, 0))
        by_name[n] = (t + e["dur"], c + 1)
    runtime = [e for e in cpu if e.get("cat") in ("cuda_runtime", "cuda_driver")]
    waits = [e for e in runtime if any((e["name"] + "\0").startswith(w) for w in WAITS)]
    copies = {}
    for e in gpu:
        if e["cat"] == "gpu_memcpy":
            kind = e["name"].split(" ")[1] if " " in e["name"] else e["name"]
            t, b = copies.get(kind, (0.0, 0))
            copies[kind] = (t + e["dur"], b + int(e.get("args", {}).get("bytes", 0) or 0))
    return {
        "trace": os.path.basename(path),
        "span_ms": (end - start) / 1e3,
        "gpu_busy_ms": busy / 1e3,
        "gpu_idle_ms": (end - start - busy) / 1e3,
        "kernels": len(kernels),
        "kernel_ms": sum(e["dur"] for e in kernels) / 1e3,
        "mean_kernel_us": (sum(e["dur"] for e in kernels) / len(kernels)) if kernels else 0.0,
        "launches": sum(1 for e in runtime if "LaunchKernel" in e["name"] or "Launch" in e["name"]),
        "host_waits": len(waits),
        "host_wait_ms": sum(e["dur"] for e in waits) / 1e3,
        "copies": {k: {"ms": t / 1e3, "bytes": b} for k, (t, b) in copies.items()},
        "top_kernels": [{"name": n[:120], "ms": t / 1e3, "count": c}
                        for n, (t, c) in sorted(by_name.items(), key=lambda kv: -kv[1][0])[:top]],
    }


def show(rows):
    print(f"{'trace':60} {'span ms':>9} {'GPU busy':>9} {'idle':>8} {'kernels':>8} {'mean us':>8} {'waits':>6} {'wait ms':>8}")
    for r in rows:
        print(f"{r['trace'][:60]:60} {r['span_ms']:9.2f} {r['gpu_busy_ms']:9.2f} {r['gpu_idle_ms']:8.2f} "
              f"{r['kernels']:8d} {r['mean_kernel_us']:8.1f} {r['host_waits']:6d} {r['host_wait_ms']:8.2f}")
    for r in rows:
        print(f"\n{r['trace']}: top kernels by GPU time")
        for k in r["top_kernels"]:
            print(f"  {k['ms']:9.2f} ms {k['count']:6d}x  {k['name']}")


def main(argv=None):
    return summaries.main(argv, __doc__, "TRACE.json", 8, summarize, show)


if __name__ == "__main__":
    sys.exit(main())
