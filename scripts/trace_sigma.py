"""The spread of a learned router's expert loads as a lognormal law's sigma: for each step and layer
of a routing trace (`memfine train --trace-out`: step,layer,expert,tokens), the standard deviation
of log(load / mean load) over the experts, averaged over the steps asked for. The learned runs of
experiments/project/validation/pair_*_learned.yaml take their routing law from it
(`imbalance: {kind: lognormal, sigma: ...}`): a router this suite trained, not the runs checked."""
import argparse
import csv
import math
import statistics
import sys
from collections import defaultdict


def sigma(path, first, last):
    loads = defaultdict(dict)
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            step = int(row["step"])
            if first <= step < last:
                loads[(step, int(row["layer"]))][int(row["expert"])] = int(row["tokens"])
    if not loads:
        sys.exit(f"trace_sigma: {path} has no steps in [{first}, {last})")
    spreads = []
    for counts in loads.values():
        mean = sum(counts.values()) / len(counts)
        # An expert that received nothing counts as half a token (the log needs a load).
        spreads.append(statistics.pstdev(math.log(max(c, 0.5) / mean) for c in counts.values()))
    return statistics.mean(spreads), len(loads)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="trace_sigma.py", description=__doc__)
    ap.add_argument("--trace", default="experiments/data/quality_routing.csv", help="the routing trace")
    ap.add_argument("--first", type=int, default=100, help="first step counted (default 100: a trained router)")
    ap.add_argument("--last", type=int, default=300, help="steps before this one (default 300)")
    a = ap.parse_args(argv)
    s, n = sigma(a.trace, a.first, a.last)
    print(f"sigma {s:.2f} (the mean over {n} step-layers of steps {a.first}-{a.last - 1} of {a.trace})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
