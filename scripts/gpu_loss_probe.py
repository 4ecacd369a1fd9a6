#!/usr/bin/env python3
"""What the loss holds on this GPU, for `memfine project`'s framework.loss (core/project/profile.cpp
loss_bytes_per_token): cross-entropy over bf16 logits [tokens, vocab] as the frameworks run it,
measured from the allocator: what its forward keeps for backward (`held`) and the most it holds
beyond the logits through forward and backward (`peak`, the logits' gradient included), each in
bytes per logit (per token per vocabulary entry: a loss_bytes_per_token of x V is x here; the bf16
logits themselves, 2, are not counted). Variants: torchtitan's loss, the logits upcast to fp32
(components/loss.py), run eager and compiled by torch.compile (its compile.components "loss",
the DeepSeek-V3 configs' default since its PR 1608); and cross-entropy on the bf16 logits. On a CPU
(a dry run) `held` is what autograd saves (saved_tensors_hooks) and `peak` is not measured.
Prints one JSON object: the device, PyTorch, the commit, and a row per variant; a variant this
PyTorch lacks (torch.compile before 2.0) gives its row an error.

usage: gpu_loss_probe.py [--out FILE.json] [--tokens N] [--vocab N] [--device cpu]
"""
import argparse
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_grouped_probe import measured  # noqa: E402
from summaries import emit, source_commit  # noqa: E402


def upcast(pred, labels):
    """torchtitan's cross_entropy_loss: the logits upcast to fp32 inside the loss."""
    return F.cross_entropy(pred.float(), labels)


def plain(pred, labels):
    return F.cross_entropy(pred, labels)


def compiled(fn):
    """fn under torch.compile, built on first use; an error row where this PyTorch has none."""
    if not hasattr(torch, "compile"):
        raise NotImplementedError(f"torch.compile needs PyTorch 2 (this is {torch.__version__})")
    return torch.compile(fn)


VARIANTS = [("eager fp32 upcast", lambda: upcast), ("compiled fp32 upcast", lambda: compiled(upcast)),
            ("eager bf16", lambda: plain)]


def saved_bytes(fn, pred, labels):
    """Bytes autograd saves for fn's backward beyond pred itself (each storage once)."""
    seen = {}

    def pack(t):
        if t.data_ptr() != pred.data_ptr():
            seen[t.data_ptr()] = t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = fn(pred, labels)
    loss.backward()
    return sum(seen.values())


def cuda_bytes(fn, pred, labels):
    """(held, peak) bytes beyond the logits: kept from forward to backward, and the most at any time."""
    fn(pred, labels).backward()  # compiles, and warms the allocator
    pred.grad = None
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    loss = fn(pred, labels)
    held = torch.cuda.memory_allocated() - base
    loss.backward()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    pred.grad = None
    return held, peak


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--vocab", type=int, default=102400, help="DeepSeek-V3-16B's, torchtitan's runs")
    ap.add_argument("--out", help="also write the JSON here")
    a = ap.parse_args(argv)
    if a.tokens < 1 or a.vocab < 2:
        ap.error("--tokens must be at least 1 and --vocab at least 2")
    torch.manual_seed(0)
    pred = torch.randn(a.tokens, a.vocab, device=a.device, dtype=torch.bfloat16, requires_grad=True)
    labels = torch.randint(0, a.vocab, (a.tokens,), device=a.device)
    logits = a.tokens * a.vocab
    rows = []
    for name, make in VARIANTS:
        def fill(row, make=make):
            fn = make()
            if a.device == "cuda":
                held, peak = cuda_bytes(fn, pred, labels)
                row.update(held_per_logit=held / logits, peak_per_logit=peak / logits)
            else:
                row.update(held_per_logit=saved_bytes(fn, pred, labels) / logits)
        measured({"variant": name}, fill, a.device, rows)
    emit({"device": torch.cuda.get_device_name() if a.device == "cuda" else "cpu", "torch": torch.__version__,
          "git_commit": source_commit(), "tokens": a.tokens, "vocab": a.vocab, "rows": rows}, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
