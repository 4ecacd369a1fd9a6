#!/usr/bin/env python3
"""Writes a routing trace in Megatron-Core's format (--moe-routing-trace-path: one
router_trace_rank{r}.jsonl per rank, one JSON record per step and layer with each token's top-k
expert ids) from this suite's CSV trace (`step,layer,expert,tokens`, what `memfine train
--trace-out` writes): each step's counts scaled to `ranks x tokens x topk` assignments (largest
remainders, none over one per token), each token given distinct experts, the tokens dealt to the
ranks in order. What `experiments/megatron_trace_replay.yaml` replays; a user's own trace from
Megatron replays the same way (`workload: {kind: trace, trace: FOLDER}`).

    scripts/python scripts/megatron_trace.py CSV OUT_DIR --ranks 8 --tokens 256 --topk 2 [--steps 10]
"""
import argparse
import collections
import csv
import json
import os
import sys


def scaled(counts, total, cap):
    """Counts scaled to add up to `total`, none over `cap` (largest remainders)."""
    s = sum(counts)
    raw = [c * total / s for c in counts]
    out = [min(cap, int(x)) for x in raw]
    order = sorted(range(len(raw)), key=lambda i: raw[i] - int(raw[i]), reverse=True)
    i = 0
    while sum(out) < total:
        e = order[i % len(order)]
        if out[e] < cap:
            out[e] += 1
        i += 1
    return out


def tokens_of(counts, tokens, topk):
    """Each token's top-k expert ids: slot j of the expert-sorted list is token j % tokens's column
    j // tokens, so no token picks an expert twice (no count exceeds `tokens`)."""
    ids = [[0] * topk for _ in range(tokens)]
    j = 0
    for e, n in enumerate(counts):
        for _ in range(n):
            ids[j % tokens][j // tokens] = e
            j += 1
    return ids


def main(argv=None):
    ap = argparse.ArgumentParser(prog="megatron_trace.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv")
    ap.add_argument("out")
    ap.add_argument("--ranks", type=int, required=True)
    ap.add_argument("--tokens", type=int, required=True, help="tokens a rank routes in a step")
    ap.add_argument("--topk", type=int, required=True)
    ap.add_argument("--steps", type=int, default=0, help="the first N steps (0: all)")
    a = ap.parse_args(argv)
    by = collections.defaultdict(lambda: collections.defaultdict(dict))
    with open(a.csv) as f:
        for row in csv.DictReader(f):
            by[int(row["step"])][int(row["layer"])][int(row["expert"])] = int(row["tokens"])
    steps = sorted(by)[:a.steps or None]
    experts = 1 + max(e for s in by.values() for l in s.values() for e in l)
    total = a.ranks * a.tokens
    os.makedirs(a.out, exist_ok=True)
    files = [open(os.path.join(a.out, f"router_trace_rank{r}.jsonl"), "w") for r in range(a.ranks)]
    for step in steps:
        for layer in sorted(by[step]):
            counts = scaled([by[step][layer].get(e, 0) for e in range(experts)], total * a.topk, total)
            ids = tokens_of(counts, total, a.topk)
            for r, f in enumerate(files):
                f.write(json.dumps({"step": step, "stage": "pre_dispatch", "block": "decoder", "layer": layer + 1,
                                    "rank": r, "num_tokens": a.tokens, "topk": a.topk,
                                    "top_indices": ids[r * a.tokens:(r + 1) * a.tokens]},
                                   separators=(",", ":")) + "\n")
    for f in files:
        f.close()
    print(f"megatron_trace: wrote {a.ranks} files of {len(steps)} steps to {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
