#!/usr/bin/env python3
"""Attention's rate on this GPU, for `memfine project`'s attention_tflops, attention_head_dim_curve
and sink_attention_head_dim_curve (experiments/project/hardware.yaml, today FlashAttention-3's paper
figures for an H100): the validation models' attention heads at their training sequence (4096, one
sequence, causal), forward and forward with backward, by the kernels the frameworks run:
PyTorch's scaled_dot_product_attention with its FlashAttention and cuDNN backends (torchtitan's and
NeMo AutoModel's SDPA), and FlexAttention, compiled in torch.compile's default mode (AutoModel's
GPT-OSS path, which autotunes its tiles), with a causal and a sliding-window block mask, with and
without GPT-OSS's learnable sinks. A sink is a logit per head
that joins each query's softmax and weighs no value: the plain attention's output scaled by
sigmoid(lse - sink), lse its log-sum-exp, as AutoModel folds the sinks into FlexAttention.
DeepSeek-V3's MLA heads (queries and keys 192 wide, values 128) run where a backend takes them
(torchtitan runs FlexAttention there).
TFLOP/s count what `memfine project` counts (core/model/flops.cpp, core/project/compute.cpp):
2 x (query-key width + value width) a query-key pair a head in forward, the pairs a causal mask keeps
(half the sequence a query) or a window (the window, less the first window's queries, which see
fewer); forward and backward at three times the forward's, as the projection divides them
(FlashAttention's papers count the backward at 2.5 times the forward: their rates are 7/6 of these).
Prints one JSON object: the device, PyTorch, the commit, and a row per case; a backend this PyTorch
lacks gives its row an error.

usage: gpu_attention_probe.py [--out FILE.json] [--repeats N] [--quick] [--device cpu]
"""
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_grouped_probe import kernel_probe, measured, timer  # noqa: E402
from summaries import emit  # noqa: E402

SEQ = 4096
# (model, heads, kv heads, head dim, window, sinks[, value head dim]): experiments/project/models.yaml's
# attention.
CASES = [("qwen3_235b_a22b", 64, 4, 128, 0, False), ("qwen3_30b_a3b", 32, 4, 128, 0, False),
         ("mixtral_8x7b", 32, 8, 128, 0, False), ("gpt_oss full", 64, 8, 64, 0, True),
         ("gpt_oss windowed", 64, 8, 64, 128, True), ("deepseek_v3 mla", 128, 128, 192, 0, False, 128)]
BACKWARD = 2.0  # the backward's FLOPs over the forward's, as the projection counts them


def keys_per_query(seq, window):
    """Keys a query attends to on average, as core/model/flops.cpp counts them."""
    if window <= 0:
        return seq / 2
    w = min(window, seq)
    return w - w * w / (2 * seq) + w / (2 * seq)


def forward_flops(seq, heads, head_dim, window, v_dim=None):
    return 2.0 * seq * keys_per_query(seq, window) * heads * (head_dim + (v_dim or head_dim))


def with_sinks(out, lse, sink):
    """The plain attention's output [b, H, s, d] as a softmax with one more logit a head (`sink`, [H])
    that weighs no value gives it: scaled by Z / (Z + e^sink), Z = e^lse."""
    return out * torch.sigmoid(lse - sink[None, :, None]).unsqueeze(-1).to(out.dtype)


def allowed(seq, window, device):
    """[s, s] booleans: key j is visible to query i (causal, within the window where one is set)."""
    i = torch.arange(seq, device=device)[:, None]
    j = torch.arange(seq, device=device)[None, :]
    keep = j <= i
    return keep & (i - j < window) if window > 0 else keep


def eager(q, k, v, window, sink=None):
    """Attention written out (any PyTorch, any device): (output, log-sum-exp); with `sink`, the sink
    joins each softmax as one more logit a head. The reference the kernels' rows stand beside."""
    rep = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
    s = q @ k.transpose(-2, -1)
    s = (s.float() if s.element_size() < 4 else s) / math.sqrt(q.shape[-1])  # half precision: in fp32
    s = s.masked_fill(~allowed(q.shape[2], window, q.device), float("-inf"))
    lse = torch.logsumexp(s, -1)
    if sink is not None:
        col = sink.to(s.dtype)[None, :, None, None].expand(*s.shape[:3], 1)
        p = torch.softmax(torch.cat([s, col], -1), -1)[..., :-1]
    else:
        p = torch.softmax(s, -1)
    return (p.to(v.dtype) @ v), lse


def sdpa(backend_name, gqa):
    """scaled_dot_product_attention on one backend, causal, no window, no sinks; None if absent.
    Without `gqa` the case gives it keys and values of every head (cuDNN's takes no enable_gqa)."""
    f = getattr(torch.nn.functional, "scaled_dot_product_attention", None)
    if f is None:
        return None
    from torch.nn.attention import SDPBackend, sdpa_kernel
    backend = getattr(SDPBackend, backend_name)

    def attend(q, k, v, window, sink):
        with sdpa_kernel([backend]):
            try:
                return f(q, k, v, is_causal=True, **({"enable_gqa": True} if gqa else {}))
            except TypeError as e:  # no enable_gqa before PyTorch 2.5
                raise RuntimeError(str(e)) from e
    attend.gqa = gqa
    return attend


def flex():
    """FlexAttention, compiled, with a causal or sliding-window block mask and the sinks folded in
    through its log-sum-exp; None if absent."""
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    except ImportError:
        return None
    # One graph a case and sink setting (forward and backward compile together at the first call).
    torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
    compiled = torch.compile(flex_attention, dynamic=False)
    masks = {}

    def attend(q, k, v, window, sink):
        seq = q.shape[2]
        if (seq, window) not in masks:
            def causal(b, h, i, j):
                return j <= i

            def windowed(b, h, i, j):
                return (j <= i) & (i - j < window)
            masks[seq, window] = create_block_mask(windowed if window > 0 else causal, None, None, seq, seq,
                                                   device=q.device)
        try:
            if sink is None:
                return compiled(q, k, v, block_mask=masks[seq, window], enable_gqa=True)
            out, lse = compiled(q, k, v, block_mask=masks[seq, window], enable_gqa=True, return_lse=True)
        except TypeError as e:  # an argument this PyTorch's FlexAttention does not take
            raise RuntimeError(str(e)) from e
        return with_sinks(out, lse, sink)
    return attend


def backends(device, quick):
    """name -> attend(q, k, v, window, sink), or the reason this PyTorch has none."""
    out = {}
    for name, make, why in (("flash", lambda: sdpa("FLASH_ATTENTION", True), "no scaled_dot_product_attention"),
                            ("cudnn", lambda: sdpa("CUDNN_ATTENTION", False), "no scaled_dot_product_attention"),
                            ("flex", flex, "no FlexAttention (PyTorch 2.5 and later)")):
        try:
            out[name] = make() or why
        except (ImportError, AttributeError) as e:
            out[name] = f"{why}: {e}"
    if quick or device != "cuda":
        out["eager"] = lambda q, k, v, window, sink: eager(q, k, v, window, sink)[0]
    return out


def case(attend, seq, heads, kv_heads, head_dim, window, sink, dtype, device, repeats, v_dim=None):
    """Milliseconds and TFLOP/s of the forward and of the forward with its backward; a backend that takes
    no grouped keys and values gets every head's; values `v_dim` wide where given."""
    timed = timer(device)
    kv_heads = kv_heads if getattr(attend, "gqa", True) else heads
    q = torch.randn(1, heads, seq, head_dim, dtype=dtype, device=device, requires_grad=True)
    k = torch.randn(1, kv_heads, seq, head_dim, dtype=dtype, device=device, requires_grad=True)
    v = torch.randn(1, kv_heads, seq, v_dim or head_dim, dtype=dtype, device=device, requires_grad=True)
    s = None if not sink else torch.zeros(heads, dtype=torch.float32, device=device, requires_grad=True)
    leaves = (q, k, v) + ((s,) if s is not None else ())
    dout = torch.randn(1, heads, seq, v_dim or head_dim, dtype=dtype, device=device)

    def both():
        torch.autograd.grad(attend(q, k, v, window, s), leaves, dout)
    # The forward as training runs it (saving for the backward): one compiled graph serves both.
    fwd_ms = timed(lambda: attend(q, k, v, window, s), repeats)
    both_ms = timed(both, repeats)
    flops = forward_flops(seq, heads, head_dim, window, v_dim)
    return {"fwd_ms": fwd_ms, "fwd_bwd_ms": both_ms, "fwd_tflops": flops / (fwd_ms * 1e-3) / 1e12,
            "fwd_bwd_tflops": (1 + BACKWARD) * flops / (both_ms * 1e-3) / 1e12}


def run(cases, seq, dtype, device, repeats, quick=False):
    torch.manual_seed(0)
    out = []
    kinds = backends(device, quick)
    for model, heads, kv_heads, head_dim, window, sinks, *v in cases:
        v_dim = v[0] if v else None
        for name, attend in kinds.items():
            # SDPA has neither windows nor sinks: it runs the windowless cases, without their sinks;
            # FlexAttention (compiled, a minute a graph) runs the windowed, sink and MLA cases it is there for.
            if name in ("flash", "cudnn") and window > 0 or name == "flex" and not (window or sinks or v_dim):
                continue
            for sink in ((False, True) if sinks and name in ("flex", "eager") else (False,)):
                r = {"model": model, "backend": name, "seq": seq, "heads": heads, "kv_heads": kv_heads,
                     "head_dim": head_dim, "v_head_dim": v_dim or head_dim, "window": window, "sinks": sink}
                if isinstance(attend, str):
                    r["error"] = attend
                    out.append(r)
                    continue
                measured(r, lambda r: r.update(case(attend, seq, heads, kv_heads, head_dim, window, sink, dtype,
                                                    device, repeats, v_dim)), device, out)
    return out


def main(argv=None):
    a = kernel_probe("gpu_attention_probe.py", __doc__, argv)
    cases = ([("tiny", 4, 2, 16, 0, False), ("tiny windowed", 4, 2, 16, 8, True), ("tiny mla", 4, 4, 24, 0, False, 16)]
             if a.quick else CASES)
    rows = run(cases, 64 if a.quick else SEQ, a.dtype, a.device, a.repeats, a.quick)
    emit({**a.header, "rows": rows}, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
