#!/usr/bin/env python3
"""The suite's model written as a PyTorch user would, to check our baselines against it.

Reads what `memfine export` wrote (weights, input, target, routing of every step), builds the same
decoder stack in eager PyTorch (a loop over experts with index_select / index_add_, and
torch.utils.checkpoint per decoder layer for recomputation), trains it with torch.optim.Adam for
the point's warmup + repeats steps, and prints one JSON line per variant:

  no_recompute            everything stored
  checkpoint              torch.utils.checkpoint(layer, use_reentrant=False) per decoder layer
  checkpoint_reentrant    torch.utils.checkpoint(layer, use_reentrant=True); the first layer's input
                          is made to require a gradient, as users must for it to train

Each line holds the loss after the last step, the activation peak (the largest, over the timed
steps, of the bytes allocated during a step beyond those in use when it began) and the median
step time. The peak is measured by PyTorch's own profiler (its allocation events replayed in
order), not by memfine's meter. Timing runs without the profiler, in a separate pass from the
same initial state.

usage: pytorch_reference.py DIR [--variants a,b,...] [--threads N]
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F
import torch.utils.checkpoint

DTYPES = {"float32": torch.float32, "float64": torch.float64, "int64": torch.int64}
VARIANTS = ("no_recompute", "checkpoint", "checkpoint_reentrant")


def load(dirname):
    with open(os.path.join(dirname, "state.json")) as f:
        meta = json.load(f)
    with open(os.path.join(dirname, "state.bin"), "rb") as f:
        raw = f.read()
    tensors = {}
    for t in meta["tensors"]:
        dt = DTYPES[t["dtype"]]
        n = math.prod(t["shape"])
        size = n * torch.empty((), dtype=dt).element_size()
        buf = bytearray(raw[t["offset"]:t["offset"] + size])
        tensors[t["name"]] = torch.frombuffer(buf, dtype=dt).reshape(t["shape"]).clone() if n else torch.empty(t["shape"], dtype=dt)
    return meta, tensors


def rms_norm(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def attention(x, p, m):
    b, s, H, KV, d = m["micro_batch"], m["seq"], m["heads"], m["kv_heads"], m["head_dim"]
    q = torch.matmul(x, p["wq"]).view(b, s, H, d).transpose(1, 2)

    def kv(w):  # grouped-query: each kv head serves H / KV query heads
        return torch.matmul(x, w).view(b, s, KV, 1, d).expand(b, s, KV, H // KV, d).reshape(b, s, H, d).transpose(1, 2)

    k, v = kv(p["wk"]), kv(p["wv"])
    scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(d)
    causal = torch.ones(s, s, dtype=torch.bool).triu(1)
    scores = scores.masked_fill(causal, -math.inf)
    ctx = torch.matmul(torch.softmax(scores, -1), v)
    return torch.matmul(ctx.transpose(1, 2).reshape(b * s, H * d), p["wo"])


def swiglu(x, w_in, w_out):
    gate, up = torch.matmul(x, w_in).chunk(2, -1)
    return torch.matmul(F.silu(gate) * up, w_out)


def layer(x, p, m, ids):
    h = x + attention(rms_norm(x, p["norm1"]), p, m) if m["attention"] == "gqa" else x
    xn = rms_norm(h, p["norm2"])
    probs = torch.softmax(torch.matmul(xn, p["router"]), -1).gather(1, ids)  # route
    k = ids.size(1)
    flat_ids, flat_probs = ids.reshape(-1), probs.reshape(-1)
    y = torch.zeros_like(xn)
    for e in range(len(p["w_in"])):  # dispatch -> experts -> combine, one expert at a time
        slot = (flat_ids == e).nonzero().reshape(-1)
        if slot.numel() == 0:
            continue
        token = torch.div(slot, k, rounding_mode="floor")
        out = swiglu(xn.index_select(0, token), p["w_in"][e], p["w_out"][e])
        y.index_add_(0, token, out * flat_probs.index_select(0, slot).unsqueeze(1))
    if "shared_in" in p:
        y = y + swiglu(xn, p["shared_in"], p["shared_out"])
    return h + y


class Model:
    def __init__(self, meta, tensors):
        self.m = meta["config"]["model"]
        self.layers = []
        for l in range(self.m["layers"]):
            pre = f"layers.{l}."
            p = {k[len(pre):]: v for k, v in tensors.items() if k.startswith(pre) and "." not in k[len(pre):]}
            p["w_in"] = [tensors[f"{pre}w_in.{e}"] for e in range(self.m["experts"])]
            p["w_out"] = [tensors[f"{pre}w_out.{e}"] for e in range(self.m["experts"])]
            self.layers.append(p)
        self.final_norm = tensors["final_norm"]
        self.params = []  # memfine's order: per layer the replicated weights, then experts; final norm
        for p in self.layers:
            self.params += [v for k, v in p.items() if k not in ("w_in", "w_out")] + p["w_in"] + p["w_out"]
        self.params.append(self.final_norm)
        for t in self.params:
            t.requires_grad_(True)

    def loss(self, x, target, routing, variant):
        h = x
        for l, p in enumerate(self.layers):
            ids = routing[l]
            if variant == "no_recompute":
                h = layer(h, p, self.m, ids)
            else:
                reentrant = variant == "checkpoint_reentrant"
                if reentrant and not h.requires_grad:
                    h = h.detach().requires_grad_(True)
                h = torch.utils.checkpoint.checkpoint(lambda a, p=p, ids=ids: layer(a, p, self.m, ids), h,
                                                      use_reentrant=reentrant)
        return (rms_norm(h, self.final_norm) - target).pow(2).mean()


def make_state(meta, tensors):
    model = Model(meta, {k: v.clone() for k, v in tensors.items()})
    # As memfine's Adam: gradients and both moments exist before the first step, so a step's
    # allocations are its activations alone.
    opt = torch.optim.Adam(model.params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, foreach=False)
    for t in model.params:
        t.grad = torch.zeros_like(t)
        opt.state[t] = {"step": torch.tensor(0.0), "exp_avg": torch.zeros_like(t), "exp_avg_sq": torch.zeros_like(t)}
    return model, opt


def train_step(model, opt, x, target, routing, variant):
    opt.zero_grad(set_to_none=False)
    loss = model.loss(x, target, routing, variant)
    value = loss.item()
    loss.backward()
    del loss
    opt.step()
    return value


def step_peak(fn):
    """Runs fn under the profiler; the largest running sum of its allocation events (bytes beyond
    those in use when it began)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    events.sort(key=lambda e: e.start_us())  # stable: ties keep the order they were recorded in
    cur = peak = 0
    for e in events:
        cur += e.nbytes()
        peak = max(peak, cur)
    return peak


def run(meta, tensors, variant):
    cfg = meta["config"]
    warmup, steps = cfg["warmup"], meta["steps"]
    L = cfg["model"]["layers"]
    routing = [[tensors[f"routing.{s}.{l}"] for l in range(L)] for s in range(steps)]
    x, target = tensors["input"], tensors["target"]
    model, opt = make_state(meta, tensors)  # timing pass
    times, loss = [], None
    for s in range(steps):
        t0 = time.perf_counter()
        loss = train_step(model, opt, x, target, routing[s], variant)
        if s >= warmup:
            times.append((time.perf_counter() - t0) * 1e3)
    model, opt = make_state(meta, tensors)  # memory pass: the same steps under the profiler
    peaks, mem_loss = [], None
    for s in range(steps):
        out = {}
        peak = step_peak(lambda: out.__setitem__("loss", train_step(model, opt, x, target, routing[s], variant)))
        mem_loss = out["loss"]
        if s >= warmup:
            peaks.append(peak)
    if mem_loss != loss:
        raise SystemExit(f"pytorch_reference: {variant}: the profiled pass gave loss {mem_loss}, the timed pass {loss}")
    return {"variant": variant, "loss": loss, "peak_activation_bytes": max(peaks) if peaks else None,
            "step_ms": {"median": statistics.median(times), "min": min(times), "max": max(times)} if times else None,
            "torch": torch.__version__, "threads": torch.get_num_threads()}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir", help="a folder written by `memfine export`")
    ap.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated, from " + ", ".join(VARIANTS))
    ap.add_argument("--threads", type=int, default=None, help="intra-op threads (default: the experiment's)")
    a = ap.parse_args()
    try:
        meta, tensors = load(a.dir)
    except (OSError, ValueError, KeyError) as e:
        raise SystemExit(f"pytorch_reference: cannot read {a.dir}: {e}")
    threads = a.threads if a.threads is not None else meta["config"].get("threads", 0)
    torch.set_num_threads(threads if threads > 0 else os.cpu_count())
    torch.set_default_dtype(DTYPES[meta["config"]["dtype"]])
    for v in a.variants.split(","):
        if v not in VARIANTS:
            raise SystemExit(f"pytorch_reference: unknown variant '{v}' (known: {', '.join(VARIANTS)})")
        print(json.dumps(run(meta, tensors, v)), flush=True)


if __name__ == "__main__":
    main()
