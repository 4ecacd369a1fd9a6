#!/usr/bin/env python3
"""What torch.compile changes in an MoE decoder block on this GPU, for `memfine project`'s torchtitan
profile, which prices no fusion (its runs name `--compile.enable` or not, and the validation's
compiled and eager runs of one layout differ by far more than its price of the GEMMs could): one
block in torchtitan's form (RMSNorm, q/k norms, RoPE, causal SDPA with grouped KV heads, a softmax
top-k router, tokens permuted to the experts padded as torchtitan pads them, a grouped SwiGLU, their
outputs weighted and added back), Qwen3-30B-A3B's shape by default, its forward and backward timed
eager and compiled (median of --repeats), and what each holds from forward to backward and at its
peak (the allocator's, beyond the block's input and weights), per token. This is a block of this
script, not torchtitan's code: its measure is the compiled over the eager time and memory of the
same operators. On a CPU (a dry run, tiny shapes) the experts run one GEMM each and only times are
given; a PyTorch without torch.compile gives the compiled rows an error.

usage: gpu_compile_probe.py [--out FILE.json] [--batches 1,4] [--seq 8192] [--device cpu] [--small]
"""
import argparse
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_attention_probe import eager  # noqa: E402
from gpu_grouped_probe import measured, timer  # noqa: E402
from summaries import emit, source_commit  # noqa: E402

QWEN3_30B = dict(hidden=2048, heads=32, kv_heads=4, head_dim=128, experts=128, topk=8, ffn=768)
SMALL = dict(hidden=64, heads=4, kv_heads=2, head_dim=16, experts=8, topk=2, ffn=32)
ALIGN = 16  # torchtitan pads each expert's rows to this for the grouped GEMM


def rms(x, w, eps=1e-6):
    return (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)).type_as(x) * w


def rope(x, cos, sin):
    """Rotary embedding on [b, s, heads, d] by halves."""
    a, b = x.chunk(2, dim=-1)
    return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)


def sdpa(q, k, v):
    """Causal attention on [b, heads, s, d]: PyTorch's fused kernel, or, before PyTorch 2, the attention
    probe's written-out reference."""
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return eager(q, k, v, 0)[0]


def experts_of(x, w13, w2, counts, grouped):
    """SwiGLU experts on rows already sorted by expert, each expert's rows padded to ALIGN."""
    if grouped:
        offs = torch.cumsum(counts, 0).to(torch.int32)
        h = torch._grouped_mm(x, w13, offs=offs)
        g, u = h.chunk(2, dim=-1)
        return torch._grouped_mm(F.silu(g) * u, w2, offs=offs)
    out, start = [], 0
    for e, n in enumerate(counts.tolist()):
        g, u = (x[start:start + n] @ w13[e]).chunk(2, dim=-1)
        out.append((F.silu(g) * u) @ w2[e])
        start += n
    return torch.cat(out + [x.new_zeros(x.shape[0] - start, w2.shape[-1])])


def block(p, x, cos, sin, c, grouped):
    b, s, h = x.shape
    y = rms(x, p["attn_norm"])
    q = (y @ p["wq"]).view(b, s, c["heads"], c["head_dim"])
    k = (y @ p["wk"]).view(b, s, c["kv_heads"], c["head_dim"])
    v = (y @ p["wv"]).view(b, s, c["kv_heads"], c["head_dim"])
    q, k = rope(rms(q, p["q_norm"]), cos, sin), rope(rms(k, p["k_norm"]), cos, sin)
    rep = c["heads"] // c["kv_heads"]
    k, v = k.repeat_interleave(rep, dim=2), v.repeat_interleave(rep, dim=2)
    a = sdpa(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
    x = x + a.transpose(1, 2).reshape(b, s, -1) @ p["wo"]
    return x + moe(p, x.view(-1, h), c, grouped).view(b, s, h)


def moe(p, t, c, grouped):
    """The MoE half on [tokens, hidden]: route, permute (rows sorted by expert into a buffer of a fixed
    size, each expert's group padded), the experts, their outputs weighted and added back."""
    y = rms(t, p["ffn_norm"])
    probs = torch.softmax((y @ p["router"]).float(), dim=-1)
    top, idx = probs.topk(c["topk"], dim=-1)
    top = (top / top.sum(-1, keepdim=True)).type_as(y)
    flat = idx.view(-1)
    order = flat.argsort(stable=True)
    counts = torch.bincount(flat, minlength=c["experts"])
    padded = (counts + ALIGN - 1) // ALIGN * ALIGN
    start_in = torch.cumsum(counts, 0) - counts
    start_out = torch.cumsum(padded, 0) - padded
    e_sorted = flat[order]
    dest = start_out[e_sorted] + torch.arange(flat.numel(), device=t.device) - start_in[e_sorted]
    rows = y.new_zeros(flat.numel() + c["experts"] * ALIGN, y.shape[1]).index_copy(0, dest, y[order // c["topk"]])
    out = experts_of(rows, p["w13"], p["w2"], padded, grouped)[dest] * top.view(-1, 1)[order]
    return torch.zeros_like(t).index_add(0, order // c["topk"], out)


def params(c, device, dtype, g):
    h, d, E, f = c["hidden"], c["head_dim"], c["experts"], c["ffn"]
    shapes = dict(attn_norm=(h,), ffn_norm=(h,), q_norm=(d,), k_norm=(d,), wq=(h, c["heads"] * d),
                  wk=(h, c["kv_heads"] * d), wv=(h, c["kv_heads"] * d), wo=(c["heads"] * d, h), router=(h, E),
                  w13=(E, h, 2 * f), w2=(E, f, h))
    return {n: ((torch.ones(s) if len(s) == 1 else torch.randn(s, generator=g) / math.sqrt(s[-2]))
                .to(device, dtype).requires_grad_()) for n, s in shapes.items()}


def case(c, batch, seq, variant, device, dtype, repeats):
    g = torch.Generator().manual_seed(0)
    p = params(c, device, dtype, g)
    x = torch.randn(batch, seq, c["hidden"], generator=g).to(device, dtype).requires_grad_()
    ang = torch.arange(seq).float()[:, None] / 1e6 ** (torch.arange(c["head_dim"] // 2).float() / (c["head_dim"] // 2))
    cos, sin = (f(ang).to(device, dtype)[None, :, None, :] for f in (torch.cos, torch.sin))
    grouped = device == "cuda" and hasattr(torch, "_grouped_mm")
    fn = block
    if variant == "compiled":
        if not hasattr(torch, "compile"):
            raise NotImplementedError(f"torch.compile needs PyTorch 2 (this is {torch.__version__})")
        fn = torch.compile(block)

    def step():
        fn(p, x, cos, sin, c, grouped).float().pow(2).mean().backward()

    tokens = batch * seq
    row = {"ms": timer(device)(step, repeats), "tokens": tokens, "experts_kernel": "grouped_mm" if grouped else "loop"}
    if device == "cuda":
        for t in [x, *p.values()]:
            t.grad = None
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        out = fn(p, x, cos, sin, c, grouped).float().pow(2).mean()
        held = torch.cuda.memory_allocated() - base
        out.backward()
        torch.cuda.synchronize()
        row.update(held_bytes_per_token=held / tokens,
                   peak_bytes_per_token=(torch.cuda.max_memory_allocated() - base) / tokens)
    return row


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--batches", default="1,4", help="sequences a step, comma-separated")
    ap.add_argument("--seq", type=int, default=8192)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--small", action="store_true", help="a tiny block (the CPU's dry run)")
    ap.add_argument("--out", help="also write the JSON here")
    a = ap.parse_args(argv)
    batches = [int(b) for b in a.batches.split(",") if b]
    if not batches or min(batches) < 1 or a.seq < 2 or a.repeats < 1:
        ap.error("--batches must be positive integers, --seq at least 2 and --repeats at least 1")
    c = SMALL if a.small else QWEN3_30B
    dtype = torch.bfloat16 if a.device == "cuda" else torch.float32
    rows = []
    for batch in batches:
        for variant in ("eager", "compiled"):
            measured({"variant": variant, "batch": batch, "seq": a.seq},
                     lambda r, b=batch, v=variant: r.update(case(c, b, a.seq, v, a.device, dtype, a.repeats)),
                     a.device, rows)
    emit({"device": torch.cuda.get_device_name() if a.device == "cuda" else "cpu", "torch": torch.__version__,
          "git_commit": source_commit(), "shape": c, "rows": rows}, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
