#!/usr/bin/env python3
"""Each published run's first projection: the earliest committed version of
results/model/project_validation.jsonl that projected it (same case file, same strategy), read
from this checkout's git history, into results/model/project_first.jsonl. A run's first
projection is what `memfine project` said before any change made after it entered the validation
set; the validation table sets its error beside the current one (issue: a check set is not a
tuning set). Runs that enter later get theirs when their first projection is committed. The
layer-level checks' alike: --src results/model/project_layers.jsonl --out
results/model/project_layers_first.jsonl.

    scripts/python scripts/first_projections.py [--src results/model/project_validation.jsonl]
                                                [--out results/model/project_first.jsonl]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from plots import validation as V  # noqa: E402
SRC = "results/model/project_validation.jsonl"
# What a first projection keeps of its line: where it was made, and what the checks compare.
KEPT = ("case_file", "strategy", "git_commit", "date", "fits", "fit", "need_gb", "peak_gb", "reserved_gb",
        "tokens_per_s_gpu", "model_tflops_gpu", "step_s", "published", "tokens_per_s_gpu_range", "need_gb_range",
        "moe_layer_ms")


def git(*args):
    return subprocess.run(["git", "-C", ROOT] + list(args), check=True, capture_output=True, text=True).stdout


def versions(src=SRC):
    """(results commit, its lines) for every committed version of `src`, oldest first."""
    for commit in git("log", "--reverse", "--format=%H", "--", src).split():
        try:
            text = git("show", f"{commit}:{src}")
        except subprocess.CalledProcessError:
            continue  # the file was removed in this commit
        yield commit, [json.loads(line) for line in text.splitlines() if line.strip()]


def published_runs(lines):
    return {(r["case_file"], r["strategy"]): r for r in lines if r.get("published") and r.get("strategy")}


def throughput_error(r, values):
    """The projection's speed over the published, less 1: the validation table's error, as a share."""
    e = V._speed_error(r, values)
    return None if e is None else e / 100


def summary(first, current):
    """Median absolute throughput error, first and current, over the runs the validation table counts
    (neither a calibration source nor a known regression), against today's published figures."""
    errs = []
    for key, now in current.items():
        pub = now["published"]
        if pub.get("calibration") or pub.get("known_issue") or key not in first:
            continue
        e1, e2 = throughput_error(first[key], pub["values"]), throughput_error(now, pub["values"])
        if e1 is not None and e2 is not None:
            errs.append((abs(e1), abs(e2)))
    if not errs:
        return "no counted run"
    med = statistics.median
    return (f"{len(errs)} counted runs: median throughput error {100 * med([a for a, _ in errs]):.1f}% at their first "
            f"projection, {100 * med([b for _, b in errs]):.1f}% now; over 25%: {sum(a > 0.25 for a, _ in errs)} first, "
            f"{sum(b > 0.25 for _, b in errs)} now")


def main(argv=None):
    ap = argparse.ArgumentParser(prog="first_projections.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--src", default=SRC, help="the projections' file, relative to the checkout (default %(default)s)")
    ap.add_argument("--out", default=os.path.join(ROOT, "results", "model", "project_first.jsonl"))
    a = ap.parse_args(argv)
    with open(os.path.join(ROOT, a.src)) as f:
        current = published_runs(json.loads(line) for line in f if line.strip())
    first = {}
    for commit, lines in versions(a.src):
        for key, r in published_runs(lines).items():
            if key in current and key not in first:
                first[key] = dict({k: r[k] for k in KEPT if k in r}, results_commit=commit[:12])
    missing = sorted(set(current) - set(first))
    for case, strategy in missing:
        print(f"first_projections: {case} {strategy}: no committed projection before today's", file=sys.stderr)
    tmp = a.out + ".tmp"
    with open(tmp, "w") as f:
        for key in sorted(first):
            f.write(json.dumps(first[key], sort_keys=True) + "\n")
    os.replace(tmp, a.out)
    print(f"first_projections: wrote {a.out} ({len(first)} runs; {len(missing)} without one)")
    print("first_projections: " + summary(first, current))
    return 0


if __name__ == "__main__":
    sys.exit(main())
