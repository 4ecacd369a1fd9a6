#!/usr/bin/env python3
"""The overload a pretrained router's published routing gives: from per-question expert shares of
top-k assignments ([questions, layers, experts] .npy files, each row summing to 1, as
ajtejankar/mixtral-vis-moe's frac_vecs/ holds Mixtral-8x7B's on MMLU), groups of questions stand
for a micro-batch, and one expert a rank (EP = experts) makes an expert's share x experts the
hottest rank's rows over its balanced share. By default a group is drawn from every file's questions
in a seeded random order, as a training run's micro-batch is: Megatron's GPTDataset shuffles its
documents (and its samples) before packing them into sequences, so a micro-batch holds documents of
unrelated topics; --consecutive groups each file's questions in file order instead (one subject of
MMLU a group: the most topic-coherent micro-batch). Prints, for `imbalance: {overload, mean}`
of a project file:
  mean      what a step waits for: the hottest expert over its share, per layer and group, averaged
            over both (every layer's all-to-all waits for its hottest rank)
  overload  the worst layer of a group (the memory peak's), the median over the groups
and the per-layer medians, each from the files it names. Questions are weighted alike (the files
hold shares, not token counts).

--counts FILE reads a whole dataset's counts instead: a pickled {layer: top-k assignments per expert}
(as Aaronhuang-778/MC-MoE's experts_act_frequency.pkl holds Mixtral-8x7B's over 128 windows of C4).
One aggregate per layer, so `mean` is the layers' mean of the hottest expert over its share over the
whole dataset and `overload` the largest of them: a micro-batch's hottest can only be hotter (the
hottest of an average is at most the average of the hottest). A pickle runs code as it loads: give
only a file you trust."""
import argparse
import glob
import json
import math
import os
import pickle
import statistics
import sys

import numpy as np


class BadInput(Exception):
    pass


def load(folder):
    """[(file, [questions, layers, experts] shares)] of the .npy files in `folder`, checked."""
    files = sorted(glob.glob(os.path.join(folder, "*.npy")))
    if not files:
        raise BadInput(f"{folder}: no .npy files")
    out = []
    for f in files:
        try:
            x = np.load(f)
        except (OSError, ValueError) as e:
            raise BadInput(f"{f}: {e}")
        if x.ndim != 3 or not np.isfinite(x).all() or (x < 0).any():
            raise BadInput(f"{f}: expected finite non-negative [questions, layers, experts] shares")
        if out and x.shape[1:] != out[0][1].shape[1:]:
            raise BadInput(f"{f}: {x.shape[1]} layers x {x.shape[2]} experts, the others "
                           f"{out[0][1].shape[1]} x {out[0][1].shape[2]}")
        out.append((f, x))
    return out


def summarize(folder, group=20, consecutive=False, seed=0):
    """{files, groups, group, order, mean, overload, layer_medians} of the share files in `folder`."""
    if group < 1:
        raise BadInput("--group must be at least 1")
    shares = load(folder)
    order = "consecutive" if consecutive else f"shuffled (seed {seed})"
    if consecutive:
        sources = shares
    else:  # every file's questions in one seeded random order, as shuffled documents are packed
        allq = np.concatenate([x for _, x in shares])
        sources = [(f"{folder} ({order})", allq[np.random.default_rng(seed).permutation(len(allq))])]
    per_layer, worst = [[] for _ in range(shares[0][1].shape[1])], []
    for f, x in sources:
        experts = x.shape[2]
        for g in range(0, len(x) - group + 1, group):
            s = x[g:g + group].sum(axis=0)                       # [layers, experts]
            if (s.sum(axis=1) <= 0).any():
                raise BadInput(f"{f}: questions {g}-{g + group - 1}: a layer with no assignments")
            ratio = s.max(axis=1) / (s.sum(axis=1) / experts)    # the hottest over its share, per layer
            for l, r in enumerate(ratio):
                per_layer[l].append(float(r))
            worst.append(float(ratio.max()))
    if not worst:
        raise BadInput(f"no group of {group} questions" + (" in any one file" if consecutive else ""))
    every = [r for rs in per_layer for r in rs]
    return {"files": len(shares), "groups": len(worst), "group": group, "order": order,
            "mean": statistics.fmean(every), "overload": statistics.median(worst),
            "layer_medians": [statistics.median(rs) for rs in per_layer]}


def from_counts(path):
    """{layers, experts, mean, overload, layer_figures} of a pickled {layer: counts per expert} file."""
    try:
        with open(path, "rb") as f:
            data = pickle.load(f)  # torch tensors unpickle through torch, which imports itself
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError, ValueError) as e:
        raise BadInput(f"{path}: {e}")
    if not isinstance(data, dict) or not data:
        raise BadInput(f"{path}: expected a pickled {{layer: counts per expert}}")
    figures, experts = [], None
    for layer in sorted(data):
        try:
            counts = [float(c) for c in (data[layer].tolist() if hasattr(data[layer], "tolist") else data[layer])]
        except (TypeError, ValueError):
            raise BadInput(f"{path}: layer {layer}: expected a list of counts")
        if not all(math.isfinite(c) and c >= 0 for c in counts) or sum(counts) <= 0:
            raise BadInput(f"{path}: layer {layer}: expected finite non-negative counts, not all zero")
        if experts is not None and len(counts) != experts:
            raise BadInput(f"{path}: layer {layer}: {len(counts)} experts, the others {experts}")
        experts = len(counts)
        figures.append(max(counts) / (sum(counts) / experts))
    return {"layers": len(figures), "experts": experts, "mean": statistics.fmean(figures),
            "overload": max(figures), "layer_figures": figures}


def main(argv=None):
    ap = argparse.ArgumentParser(prog="routing_overload.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder", nargs="?", help="a folder of [questions, layers, experts] .npy share files")
    ap.add_argument("--counts", metavar="FILE", help="a pickled {layer: counts per expert} of a whole dataset instead")
    ap.add_argument("--group", type=int, default=20, help="questions a micro-batch (default 20)")
    ap.add_argument("--consecutive", action="store_true",
                    help="group each file's questions in file order (default: all files' questions shuffled)")
    ap.add_argument("--seed", type=int, default=0, help="the shuffle's seed (default 0)")
    ap.add_argument("--json", action="store_true", help="one JSON object instead of text")
    a = ap.parse_args(argv)
    if (a.folder is None) == (a.counts is None):
        ap.error("give a folder of share files or --counts FILE")
    try:
        out = from_counts(a.counts) if a.counts else summarize(a.folder, a.group, a.consecutive, a.seed)
    except BadInput as e:
        print(f"routing_overload: {e}", file=sys.stderr)
        return 1
    if a.json:
        print(json.dumps(out))
        return 0
    if a.counts:
        print(f"{out['layers']} layers of {out['experts']} experts, one whole-dataset count each")
        print(f"mean (the layers' hottest over its share): {out['mean']:.3f}")
        print(f"overload (the hottest layer): {out['overload']:.3f}")
        print("per layer: " + " ".join(f"{m:.2f}" for m in out["layer_figures"]))
        return 0
    print(f"{out['files']} files, {out['groups']} groups of {a.group} questions, {out['order']}")
    print(f"mean (every layer and group): {out['mean']:.3f}")
    print(f"overload (a group's worst layer, median over groups): {out['overload']:.3f}")
    print("per-layer medians: " + " ".join(f"{m:.2f}" for m in out["layer_medians"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
