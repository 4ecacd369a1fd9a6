"""REPORT.md's split of what a fixed 8 chunks cost against full recomputation, at each measured
imbalance: the measured gap, the part the cost model puts on this CPU (each chunk's dispatch, combine
and autograd calls; the experts' products on an eighth of their rows through this machine's measured
curve), the rest, and the paper's GPUs' side estimated by `memfine project`'s step model."""
import json
import os
import statistics

from cost_model import curve

from . import records as R

CHUNKS = 8


def _predicted(rec, cm):
    """Per timed step, the cost model's ms for 8 chunks beyond one: (calls, small products), each the mean
    over steps. A rank's rows are taken as split evenly over its local experts."""
    f = curve(cm["expert_fwd_bwd_ms"])
    m = rec["config"]["model"]
    local = m["experts"] // rec["config"]["parallel"]["ep"]
    steps = rec.get("tokens_received_per_step") or [rec.get("tokens_received_per_layer") or []]
    calls = (CHUNKS - 1) * cm["per_chunk_ms"] * m["layers"]
    small = statistics.mean(sum(local * (CHUNKS * f(s / local / CHUNKS) - f(s / local)) for s in layers)
                            for layers in steps)
    return calls, small


def _gpu_estimate(model_dir):
    """(layout, full_recompute's step s, 8 chunks' step s, chunk part s, the launch wait's growth s) at each
    layout projected."""
    path = os.path.join(model_dir, "project_paper_chunks.jsonl")
    if not os.path.exists(path):
        return [], None
    rows = [json.loads(line) for line in open(path) if line.strip()]
    by = {}
    for r in rows:
        lay = r["layout"]
        key = f"TP{lay['tp']} PP{lay['pp']} EP{lay['ep']}"
        by.setdefault(key, {})[r["name"]] = r
    def launch(r):
        return r["step_parts_s"].get("launch", 0)

    out = [(k, v["full_recompute"]["step_s"], v["memfine"]["step_s"], v["memfine"]["step_parts_s"]["chunk_overhead"],
            launch(v["memfine"]) - launch(v["full_recompute"]))
           for k, v in sorted(by.items()) if "full_recompute" in v and "memfine" in v]
    return out, rows[0] if rows else None


def lines(ctxs, results_dir, model_dir):
    cm_path = os.path.join(results_dir, "cost_model.json")
    if not os.path.exists(cm_path):
        return []
    with open(cm_path) as f:
        cm = json.load(f)
    out = ["## What 8 chunks cost: this CPU's part and the method's",
           f"Fixed {CHUNKS} chunks against full recomputation where full recomputation fits (Model II's budget), "
           "strategies interleaved in each run. The cost model (`scripts/fit-cost-model`, fitted on this machine "
           "at the experiments' layer shape) prices what a chunk adds: each chunk's dispatch, combine and autograd "
           f"calls ({cm['per_chunk_ms']:.3f} ms a chunk here) and every local expert's products on an eighth of its "
           "rows (this machine's measured rate at that many rows). Both are this CPU's: on a GPU a chunk's calls are "
           "kernel launches, and its products run on the grouped GEMM's curve, which the estimate below uses."]
    for ctx in ctxs:
        loose = ctx["loose"]
        diffs, fulls = [], []
        for rs in ctx["runs"]:
            full, fixed = ctx["at"](loose, R.BASELINE, rs), ctx["at"](loose, R.FIXED8, rs)
            if full and fixed and full["status"] == fixed["status"] == "ok":
                diffs.append(R.median_ms(fixed) - R.median_ms(full))
                fulls.append(R.median_ms(full))
        fixed = ctx["at"](loose, R.FIXED8)
        if not diffs or not fixed:
            continue
        gap, base = statistics.median(diffs), statistics.median(fulls)
        calls, small = _predicted(fixed, cm)
        rest = gap - calls - small
        runs = f" (median of {len(diffs)} runs, {min(diffs):.0f} to {max(diffs):.0f} ms)" if len(diffs) > 1 else ""
        more = f"{gap:.0f} ms a step more" if gap >= 0 else f"{-gap:.0f} ms a step less"
        out.append(f"- `{ctx['name']}` (s' up to {ctx['overload']:.1f}x): 8 chunks took {more} than "
                   f"full recomputation's {base:.0f} ms{runs}, {100 * gap / base:+.1f}%. The cost model puts "
                   f"{calls:.0f} ms ({100 * calls / base:.1f}% of full recomputation's step) on the chunks' calls and "
                   f"{small:.0f} ms ({100 * small / base:+.1f}%) on products at an eighth of the rows; the rest, "
                   f"{rest:.0f} ms ({100 * rest / base:+.1f}%), is what the model does not attribute (the timing's "
                   "noise, and what one chunk costs beyond full recomputation's replay).")
    est, first = _gpu_estimate(model_dir)
    if est:
        parts = "; ".join(f"{k}: {100 * (full / mine - 1):+.1f}% throughput, of which the chunks' products "
                          f"{100 * chunk / mine:.1f}% of the step and their launches {100 * wait / mine:.1f}%"
                          for k, full, mine, chunk, wait in est)
        out.append(f"- **Estimate** for the paper's GPUs (`memfine project experiments/project_paper_chunks.yaml`: "
                   f"Model II's shapes, s' {first['overload']['worst']:.1f}x, 32 H100, {R.commit_text(first['git_commit'])}): "
                   f"8 chunks against full recomputation, {parts}. The launches: each chunk runs the MoE's kernels "
                   "again, at the preset's host time per launch (where the GPU waits for them); the paper measured "
                   "-5.39% for its fixed 8 chunks on Model II.")
    return out + [""]
