#!/usr/bin/env python3
"""The overload a pretrained router's published routing gives: from per-question expert shares of
top-k assignments ([questions, layers, experts] .npy files, each row summing to 1, as
ajtejankar/mixtral-vis-moe's frac_vecs/ holds Mixtral-8x7B's on MMLU), groups of consecutive
questions stand for a micro-batch, and one expert a rank (EP = experts) makes an expert's share x
experts the hottest rank's rows over its balanced share. Prints, for `imbalance: {overload, mean}`
of a project file:
  mean      what a step waits for: the hottest expert over its share, per layer and group, averaged
            over both (every layer's all-to-all waits for its hottest rank)
  overload  the worst layer of a group (the memory peak's), the median over the groups
and the per-layer medians, each from the files it names. Questions are weighted alike (the files
hold shares, not token counts)."""
import argparse
import glob
import json
import os
import statistics
import sys

import numpy as np


class BadInput(Exception):
    pass


def summarize(folder, group=20):
    """{files, groups, group, mean, overload, layer_medians} of the share files in `folder`."""
    files = sorted(glob.glob(os.path.join(folder, "*.npy")))
    if not files:
        raise BadInput(f"{folder}: no .npy files")
    if group < 1:
        raise BadInput("--group must be at least 1")
    per_layer, worst = None, []
    for f in files:
        try:
            x = np.load(f)
        except (OSError, ValueError) as e:
            raise BadInput(f"{f}: {e}")
        if x.ndim != 3 or not np.isfinite(x).all() or (x < 0).any():
            raise BadInput(f"{f}: expected finite non-negative [questions, layers, experts] shares")
        n, layers, experts = x.shape
        if per_layer is None:
            per_layer = [[] for _ in range(layers)]
        elif len(per_layer) != layers:
            raise BadInput(f"{f}: {layers} layers, the others {len(per_layer)}")
        for g in range(0, n - group + 1, group):
            s = x[g:g + group].sum(axis=0)                       # [layers, experts]
            if (s.sum(axis=1) <= 0).any():
                raise BadInput(f"{f}: questions {g}-{g + group - 1}: a layer with no assignments")
            ratio = s.max(axis=1) / (s.sum(axis=1) / experts)    # the hottest over its share, per layer
            for l, r in enumerate(ratio):
                per_layer[l].append(float(r))
            worst.append(float(ratio.max()))
    if not worst:
        raise BadInput(f"no file holds {group} questions")
    every = [r for rs in per_layer for r in rs]
    return {"files": len(files), "groups": len(worst), "group": group, "mean": statistics.fmean(every),
            "overload": statistics.median(worst), "layer_medians": [statistics.median(rs) for rs in per_layer]}


def main(argv=None):
    ap = argparse.ArgumentParser(prog="routing_overload.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder", help="a folder of [questions, layers, experts] .npy share files")
    ap.add_argument("--group", type=int, default=20, help="consecutive questions a micro-batch (default 20)")
    ap.add_argument("--json", action="store_true", help="one JSON object instead of text")
    a = ap.parse_args(argv)
    try:
        out = summarize(a.folder, a.group)
    except BadInput as e:
        print(f"routing_overload: {e}", file=sys.stderr)
        return 1
    if a.json:
        print(json.dumps(out))
        return 0
    print(f"{out['files']} files, {out['groups']} groups of {a.group} questions")
    print(f"mean (every layer and group): {out['mean']:.3f}")
    print(f"overload (a group's worst layer, median over groups): {out['overload']:.3f}")
    print("per-layer medians: " + " ".join(f"{m:.2f}" for m in out["layer_medians"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
