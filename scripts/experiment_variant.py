#!/usr/bin/env python3
"""Writes a smaller (--quick, for CI) or larger (--full, for bigger machines) copy of an experiment.

    scripts/python scripts/experiment_variant.py --quick experiments/chunk_sweep.yaml OUT.yaml
"""
import argparse
import os
import sys

import yaml


def variant(doc, mode):
    doc = dict(doc)
    model = dict(doc.get("model", {}))
    if mode == "quick":
        # Small enough that every experiment runs in seconds; shapes stay valid (divisibility).
        doc["warmup"] = 0
        doc["repeats"] = min(int(doc.get("repeats", 3)), 4 if doc.get("workload", {}).get("schedule") else 1)
        model["seq"] = min(int(model.get("seq", 256)), 128)
        model["hidden"] = min(int(model.get("hidden", 256)), 64)
        model["ffn_hidden"] = min(int(model.get("ffn_hidden", 512)), 128)
        model["layers"] = min(int(model.get("layers", 2)), 4)
        if doc.get("memory", {}).get("budget") not in (None, "none"):
            doc["memory"] = {"budget": "none"}
        sweep = doc.get("sweep") or {}
        if "train" in doc:  # a training run: a few steps, still evaluated and checkpointed
            t = dict(doc["train"])
            t["steps"] = min(int(t.get("steps", 100)), 10)
            t["warmup"] = min(int(t.get("warmup", 10)), 3)
            t["eval_every"] = t["checkpoint_every"] = 5
            t["eval_batches"] = min(int(t.get("eval_batches", 4)), 2)
            doc["train"] = t
        doc["sweep"] = {k: v[:2] for k, v in sweep.items() if k != "memory.budget"} or None
        if doc["sweep"] is None:
            del doc["sweep"]
    elif mode == "full":
        model["seq"] = int(model.get("seq", 256)) * 4
        model["hidden"] = int(model.get("hidden", 256)) * 4
        model["ffn_hidden"] = int(model.get("ffn_hidden", 512)) * 4
        doc["name"] = doc["name"] + "_full"
        if doc.get("memory", {}).get("budget") not in (None, "none"):
            doc["memory"] = {"budget": "none"}  # budgets are set for the default size
            sweep = dict(doc.get("sweep") or {})
            sweep.pop("memory.budget", None)
            doc["sweep"] = sweep or None
            if doc["sweep"] is None:
                del doc["sweep"]
    if doc.get("cost_model"):
        # A cost model belongs to the machine it was fitted on (validate refuses another's), and a
        # variant runs where none may have been fitted: the planner that needs one is left out.
        del doc["cost_model"]
        doc["strategies"] = [s for s in doc.get("strategies", [])
                             if not (isinstance(s, dict) and s.get("objective") == "time")]
    doc["model"] = model
    return doc


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--quick", action="store_const", const="quick", dest="mode")
    mode.add_argument("--full", action="store_const", const="full", dest="mode")
    ap.add_argument("input")
    ap.add_argument("output")
    args = ap.parse_args(argv)
    with open(args.input) as f:
        doc = yaml.safe_load(f)
    out = variant(doc, args.mode)
    # Relative paths in the experiment (trace files) stay valid from the new location.
    here = lambda p: os.path.abspath(os.path.join(os.path.dirname(args.input), p))
    w = out.get("workload", {})
    if w.get("trace") and not os.path.isabs(w["trace"]):
        w["trace"] = here(w["trace"])
    if out.get("cost_model") and not os.path.isabs(out["cost_model"]):
        out["cost_model"] = here(out["cost_model"])
    with open(args.output, "w") as f:
        yaml.safe_dump(out, f, sort_keys=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
