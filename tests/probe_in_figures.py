#!/usr/bin/env python3
"""A strategy defined only in the tests (tests/probe_strategy.cpp) through `memfine run` and
`memfine predict` with a binary that links it, then the figures' tables: it must be verified,
predicted within 5%, carry its own counters, and appear in the model-error and strategies tables.

    probe_in_figures.py MEMFINE_PROBE_BINARY tests/probe.yaml
"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "scripts"))
from plots import generic, sweeps  # noqa: E402


def main(binary, yaml):
    with tempfile.TemporaryDirectory(prefix="memfine-probe-") as work:
        out = os.path.join(work, "probe")
        subprocess.run([binary, "run", yaml, "--out", out, "--no-progress"], check=True, stdout=subprocess.DEVNULL)
        recs = [json.loads(line) for line in open(os.path.join(out, "results.jsonl"))]
        probe = next(r for r in recs if r["strategy"] == "expert_probe")
        problems = []
        if probe["status"] != "ok":
            problems.append(f"status {probe['status']}: {probe['error']}")
        if probe.get("verified") is not True:
            problems.append(f"verify: {probe.get('verified')} ({probe.get('grad_max_rel_err')})")
        err = (probe["predicted_activation_bytes"] - probe["peak_activation_bytes"]) / probe["peak_activation_bytes"]
        if abs(err) > 0.05:
            problems.append(f"model error {100 * err:+.2f}%")
        if not probe.get("expert_rows"):
            problems.append("its counter expert_rows is missing or 0: the expert hook did not run, or counters were dropped")
        lines = subprocess.run([binary, "predict", "--json", yaml], check=True, capture_output=True, text=True).stdout.splitlines()
        predicted = next(json.loads(line) for line in lines if json.loads(line)["strategy"] == "expert_probe")
        if predicted["predicted_activation_bytes"] != probe["predicted_activation_bytes"]:
            problems.append("predict and run disagree on its prediction")
        tables = os.path.join(work, "tables")
        os.makedirs(tables)
        paths = sweeps.model_error(os.path.join(out, "results.jsonl"), tables)
        paths += sweeps.strategies(os.path.join(out, "results.jsonl"), tables, "probe", "probe")
        paths += generic.plot_folder(out, tables)  # memfine plot: any strategy, by its records alone
        for p in paths:
            if p.endswith(".md") and "expert_probe" not in open(p).read():
                problems.append(f"{os.path.basename(p)} does not list it")
        for p in problems:
            print(f"probe strategy: {p}", file=sys.stderr)
        print(f"probe strategy: model error {100 * err:+.2f}%, verify {probe['grad_max_rel_err']:.1e}, "
              f"expert rows {probe.get('expert_rows')}, {len(paths)} tables")
        return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
