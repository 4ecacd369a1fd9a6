#!/usr/bin/env python3
"""What is alive at the activation peak of one attention block's forward and backward, as
core/model/model.cpp computes it (q, k, v projections, grouped-query expand, scores / sqrt(d),
causal masked_fill, softmax, context, output projection), in eager PyTorch on a GPU or the CPU.

On the H100 every recomputing strategy peaked alike at gpu_peak's shape with attention, and far lower
without it (results/h100/gpu_peak), above what the memory model says by about one [heads, seq, seq]
tensor: this names the tensors alive at the peak and the line that allocated each. On CUDA it
replays the caching allocator's recorded history (torch.cuda.memory._record_memory_history); on a
CPU it replays the profiler's memory events. Prints one JSON object: the peak above the start, and
the live allocations at the peak, largest first.

usage: gpu_peak_probe.py [--device cuda|cpu] [--dtype bfloat16|float32] [--seq N] [--heads N]
                         [--kv-heads N] [--head-dim N] [--hidden N] [--out FILE.json]
"""
import argparse
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from memory_history import replay  # noqa: E402
from summaries import emit, source_commit  # noqa: E402

DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32}
BIG = 16 << 20  # allocations at least this large go in the timeline


def attention(x, wq, wk, wv, wo, s, H, KV, d):
    b = 1
    q = torch.matmul(x, wq).view(b, s, H, d).transpose(1, 2)

    def kv(w):
        return torch.matmul(x, w).view(b, s, KV, 1, d).expand(b, s, KV, H // KV, d).reshape(b, s, H, d).transpose(1, 2)

    k, v = kv(wk), kv(wv)
    scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(d)
    causal = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
    scores = scores.masked_fill(causal, -math.inf)
    ctx = torch.matmul(torch.softmax(scores, -1), v)
    return torch.matmul(ctx.transpose(1, 2).reshape(b * s, H * d), wo)


def live_at_peak_cuda(step):
    # Python frames only: C++ unwinding at every allocation takes minutes at these sizes.
    torch.cuda.memory._record_memory_history(max_entries=1_000_000, stacks="python")
    start = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    step()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - start
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    # The one replay (scripts/memory_history.py), over this step's events.
    _, alive, steps = replay([e for t in snap["device_traces"] for e in t])
    timeline = [{"action": e["action"], "bytes": e["size"], "live_after": cur, "where": _where(e.get("frames", []))}
                for e, cur in steps if e["size"] >= BIG]  # the large allocations and frees in order
    return peak, [(e["size"], _where(e.get("frames", []))) for e in alive], timeline


def _where(frames):
    here = [f for f in frames if f.get("filename", "").endswith("gpu_peak_probe.py")]
    f = here[0] if here else (frames[0] if frames else {})
    return f"{f.get('name', '?')}:{f.get('line', '?')}"


def live_at_peak_cpu(step):
    # The reference's profiler replay (tests/pytorch_reference.py): the peak only, no addresses.
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
    from pytorch_reference import step_peak
    return step_peak(step), [], []


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default="bfloat16", choices=DTYPES)
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--out", help="also write the JSON here")
    a = ap.parse_args(argv)
    if a.heads % a.kv_heads:
        ap.error("--heads must be a multiple of --kv-heads")
    g = torch.Generator().manual_seed(0)
    opt = dict(dtype=DTYPES[a.dtype], device=a.device)
    hd = a.heads * a.head_dim

    def w(i, o):
        return (torch.randn(i, o, generator=g) / math.sqrt(i)).to(**opt).requires_grad_()

    wq, wk, wv, wo = w(a.hidden, hd), w(a.hidden, a.kv_heads * a.head_dim), w(a.hidden, a.kv_heads * a.head_dim), w(hd, a.hidden)
    x = torch.randn(a.seq, a.hidden, generator=g).to(**opt).requires_grad_()

    def step():
        y = attention(x, wq, wk, wv, wo, a.seq, a.heads, a.kv_heads, a.head_dim)
        y.float().pow(2).mean().backward()

    step()  # warm-up: workspaces and the weights' gradients exist before the measured step
    peak, live, timeline = (live_at_peak_cuda if a.device == "cuda" else live_at_peak_cpu)(step)
    sst = a.heads * a.seq * a.seq * torch.empty((), dtype=DTYPES[a.dtype]).element_size()
    out = {"device": torch.cuda.get_device_name() if a.device == "cuda" else "cpu", "torch": torch.__version__,
           "git_commit": source_commit(),
           "shape": vars(a), "peak_bytes": peak, "heads_seq_seq_bytes": sst,
           "peak_in_heads_seq_seq": peak / sst,
           "live_at_peak": [{"bytes": s, "where": where} for s, where in sorted(live, reverse=True)][:40],
           "timeline": timeline}
    emit(out, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
