"""REPORT.md's sections beyond the paper's headline (core sections measured by the default sweep):
what a chunk costs, the budget sweep, baselines in the field, our baselines against eager
PyTorch, learned routing replayed, capacity's cost in quality, training on real ranks."""
import glob
import json
import os
import statistics

from . import records as R
from .tables import markdown
from .paper import claims
from .quality import capped, encoded, overloads, quality_stats, train_ranks_stats
from .sweeps import budget_mib, fixed_chunks


def _path(results_dir, name, file="results.jsonl"):
    p = os.path.join(results_dir, name, file)
    return p if os.path.exists(p) else None


def _pct(x):
    return "n/a" if x is None else f"{100 * x:+.1f}%"


def _gain(ref, r):
    """Throughput of r against ref (ref's median step time / r's - 1); None where either failed."""
    ok = lambda x: x is not None and x["status"] == "ok"
    return R.median_ms(ref) / R.median_ms(r) - 1 if ok(ref) and ok(r) else None


def _flat(chunks):
    out, todo = [], [chunks]
    while todo:
        c = todo.pop()
        (todo.extend if isinstance(c, list) else out.append)(c)
    return [c for c in out if c is not None]


def host_work_lines(results_dir):
    """What a chunk costs the host (`chunk_ops`): operators and reads per step, per expert GEMM path."""
    path = _path(results_dir, "chunk_ops")
    if not path:
        return []
    recs = [r for r in R.load(path) if r["status"] == "ok" and "ops_per_step" in r]
    out = []
    for point, rs in sorted(R.by_point(recs).items()):
        full, eight = R.first(rs, role="baseline"), R.first(rs, **R.FIXED8)
        if not (full and eight):
            continue
        layers = full["config"]["model"]["layers"]
        per = (eight["ops_per_step"] - full["ops_per_step"]) / (7 * layers)
        counts = ", ".join(f"{r['strategy']} {r['ops_per_step']} ({r['host_syncs_per_step']} reads)" for r in rs)
        speed = R.median_ms(full) / R.median_ms(eight)
        out.append(f"- `{point}`: {counts}; 8 chunks add {per:.0f} operators an extra chunk and layer, and ran at "
                   f"{speed:.2f}x full recomputation's speed.")
    if not out:
        return []
    m = recs[0]["config"]["model"]
    return ([f"What a chunk costs the host (`chunk_ops`: {m['layers']} layers, {m['experts'] // recs[0]['ep']} local "
             f"experts of {m['experts']}, top-{m['topk']}, hot routing; operators dispatched a step at the top level "
             "and reads of device values, counted on LibTorch's dispatcher, the same on any machine; the times "
             "this machine's):"] + out + [R.source_line(path, recs)] +
            ["On a GPU each operator is host time (its dispatch and the launches under it) whether the device is busy "
             "or not: the stages one expert at a time (`expert_gemm: loop`) pay it per expert and chunk, the ranges "
             "(`grouped`, the default: core/moe/ranged.h) a few times per chunk.", ""])


def chunk_cost_lines(results_dir):
    def ratios(name):
        path = _path(results_dir, name)
        if not path:
            return None
        recs = [r for r in R.load(path) if r["status"] == "ok"]
        full = R.first(recs, role="baseline")
        if not full:
            return None
        return ", ".join(f"{c}: {R.median_ms(r) / R.median_ms(full):.3f}x" for c, r in fixed_chunks(recs) if c > 1)
    sweep, balanced = ratios("chunk_sweep"), ratios("chunk_balanced")
    if not (sweep or balanced):
        return host_work_lines(results_dir)
    fixed8 = 1 + claims()["tgs_fixed8_vs_full_II"]
    lines = ["## What a chunk costs",
             "Step time of MemFine's chunks against full recomputation, interleaved in one run (the paper's fixed 8 "
             f"chunks: {1 / fixed8:.3f}x, i.e. {100 * (fixed8 - 1):+.2f}% throughput on Model II):",
             f"- `chunk_sweep` (`chunks_step_time.png`): {sweep or '-'};",
             f"- `chunk_balanced` (balanced routing on one rank; `chunks_balanced_step_time.png`): {balanced or '-'}.",
             "Every chunk runs every local expert's six matrix products (forward, the forward again in backward, two for "
             "the input gradient, two for the weights'), each streaming the expert's whole weights however few rows the "
             "chunk gives it."]
    cm_path = os.path.join(results_dir, "cost_model.json")
    if os.path.exists(cm_path):
        with open(cm_path) as f:
            cm = json.load(f)
        fb = dict((int(r), ms) for r, ms in cm["expert_fwd_bwd_ms"])
        small, big = min(fb), 4096 if 4096 in fb else max(fb)
        slow = fb[small] / (fb[big] / big * small)
        lines.append(f"One expert's forward + backward takes {fb[small]:.3f} ms on {small} rows against "
                     f"{fb[big] / big * small:.3f} ms for {small} rows' share of {big} ({slow:.0f}x): "
                     + ("on this machine a small share of an expert's rows runs far below its rate, which is most of what "
                        "a chunk costs." if slow > 2 else "on this machine small shares cost little more per row.") +
                     " The cost model (`scripts/fit-cost-model`, `cost_model_table.md`) prices a chunk as each expert's "
                     f"share of its own rows through that measured curve plus {cm['per_chunk_ms']:.3f} ms of dispatch, "
                     "combine and autograd calls.")
    return lines + [""] + host_work_lines(results_dir)


def budget_lines(results_dir):
    path = _path(results_dir, "budget_sweep")
    if not path:
        return []
    recs = R.load(path)
    fits, tight, eight, mact_fits = [], [], [], []
    for point, rs in sorted(R.by_point(recs).items(), key=lambda kv: budget_mib(kv[1][0])):
        full, p, m = R.first(rs, role="baseline", status="ok"), R.first(rs, status="ok", **R.OBJECTIVE_TIME), \
            R.first(rs, status="ok", **R.MACT)
        e8 = R.first(rs, status="ok", **R.FIXED8)
        b = budget_mib(rs[0])
        if full and e8:
            eight.append(R.median_ms(full) / R.median_ms(e8))
        if full and m:
            mact_fits.append((b, set(_flat(m.get("chunks"))), R.median_ms(full) / R.median_ms(m)))
        if not p:
            continue
        if full:
            fits.append(f"{b:.0f} MiB: {R.median_ms(full) / R.median_ms(p):.3f}x")
        elif m:
            tight.append(f"{b:.0f} MiB: {R.median_ms(m) / R.median_ms(p):.3f}x MACT's")
    one = [x for x in mact_fits if x[1] == {1}]
    c = claims()
    lines = ["## Throughput at every budget: a planner that mixes storing, recomputing and chunking",
             "`memfine` with `chunks: auto, objective: time` plans each step as a knapsack over layers: each layer is "
             "stored whole or recomputed with one of MACT's bins, and the plan of least predicted time (the cost model) "
             "whose predicted peak (the implementation model) fits the budget is taken. `experiments/budget_sweep.yaml`, "
             "every strategy interleaved at each budget (`budget_sweep.png`, `budget_sweep_table.md`):",
             "- against full recomputation where it fits: " + (", ".join(fits) or "-") +
             f" (the paper: MACT {1 + c['tgs_mact_vs_full_II']:.4f}x on Model II);",
             "- where full recomputation runs out of memory, against MACT: " + (", ".join(tight) or "-") + ";"]
    if mact_fits:
        speeds = [s for _, _, s in mact_fits]
        lines.append(f"- MACT itself (Eq. 9: the smallest bin that fits) chose one chunk everywhere at {len(one)} of the "
                     f"{len(mact_fits)} budgets where full recomputation fits, and ran at {min(speeds):.3f}-{max(speeds):.3f}x "
                     "its speed there;")
    if eight:
        lines.append(f"- a fixed 8 chunks ran at {min(eight):.2f}-{max(eight):.2f}x full recomputation's speed (the paper: "
                     f"{1 + c['tgs_fixed8_vs_full_II']:.3f}x).")
    errs = [e for e in map(R.model_error, R.select(recs, status="ok", **R.OBJECTIVE_TIME)) if e is not None]
    if errs:
        lines.append(f"The planner's plans were predicted within {100 * max(map(abs, errs)):.1f}% of the measured peak.")
    return lines + ["One budget's ratio is one run's: step times vary by several percent between runs.", ""]


def field_lines(results_dir):
    """The memory savers of the field (Megatron's moe_act, MoEBlaze-style buffer-free experts)
    against MemFine's chunks and their combinations, from experiments/baselines*.yaml."""
    rows, sources, blaze_speed, composed = [], [], [], []
    for name in ("baselines", "baselines_h2048"):
        path = _path(results_dir, name)
        if not path:
            continue
        recs = R.load(path)
        sources.append(R.source_line(path, recs))
        for point, rs in R.by_point(recs).items():
            ok = [r for r in rs if r["status"] == "ok"]
            ref = R.first(ok, role="reference")
            if not ref:
                continue
            dropless = [r for r in ok if not R.drops(r)]
            lower = lambda r: R.activation(ref) / R.activation(r)
            speed = lambda r: R.median_ms(ref) / R.median_ms(r)
            m = ref["config"]["model"]
            adam = 2 * m["hidden"] * m["ffn_hidden"] * {"float64": 8, "bfloat16": 2}.get(ref["config"].get("dtype"), 4)
            floor = lambda r: " (Adam's step)" if abs(R.activation(r) - adam) <= 0.01 * adam else ""
            cell = lambda r: f"{r['strategy']}: {R.activation(r) / R.MIB:.1f} MiB, {lower(r):.2f}x{floor(r)}, {speed(r):.2f}x" if r else "-"
            cheap = [r for r in dropless if speed(r) >= 0.9]
            least = min(dropless, key=R.activation)
            composed.append(R.matches(least, name="memfine", experts="buffer_free"))
            blaze = R.first(ok, name="moeblaze", keep_act=False)
            if blaze:
                blaze_speed.append(speed(blaze))
            rows.append(f"| {name} | {point} | {R.activation(ref) / R.MIB:.1f} | {cell(least)} | "
                        f"{cell(min(cheap, key=R.activation) if cheap else None)} | {cell(blaze)} | "
                        f"{cell(R.first(ok, name='moe_act_recompute'))} |")
    if not rows:
        return []
    return [
        "## The field's memory savers against MemFine's chunks", "",
        "Peak activation memory and median step time of one MoE layer's training step (forward, backward, optimizer), "
        "every strategy interleaved at each point (`paper_figures/baselines_table.md`, `baselines_h2048_table.md`). "
        "Each cell: activation peak, how many times lower than `no_recompute`'s, and speed against it (its step time / "
        "this one's). `no_recompute` is our closest to a MegaBlocks-like baseline, MoEBlaze's own reference.", "",
        *markdown(["experiment", "point", "no_recompute MiB", "lowest dropless", "lowest dropless at >= 0.9x speed",
                   "moeblaze", "moe_act_recompute"]), *rows, ""] + sources + [
        "",
        "MoEBlaze (arXiv 2601.05296) reports, for one SwiGLU MoE layer on one H100 against MegaBlocks, about 4x lower "
        "activation memory and 2-6.2x speed. Why ours differ:",
        "- Our peak is the whole step's: the layer's RMSNorm, router, residual and the loss stay (every strategy keeps "
        "them), so the ratio on the MoE part alone is larger than the whole step's.",
        "- Our `no_recompute` is not MegaBlocks: it gathers each expert's rows into a buffer and loops over experts "
        "with dense GEMMs (no block-sparse grouped GEMM, no padding to blocks), and keeps what autograd saves.",
        "- Speed: on a CPU the GEMMs dominate and are the same in every strategy; MoEBlaze's speed-up comes from GPU "
        "memory traffic (no permuted copies, fused epilogues). "
        + (f"Here `moeblaze` ran at {min(blaze_speed):.2f}x-{max(blaze_speed):.2f}x no_recompute's speed." if blaze_speed else ""),
        "- \"(Adam's step)\": the step's peak is then the optimizer's temporary for the largest weight (2 h g elements), "
        "not activations: the activation saving is larger than the ratio shows.",
        f"- Composition: at {sum(composed)} of the {len(composed)} points the least memory of all dropless strategies is "
        "MemFine's chunks with buffer-free experts inside them" + (", at chunking's time cost; where no time may be lost, "
                                                                   "the \"0.9x\" column's strategy." if any(composed) else "."),
        "",
    ]


def pytorch_reference_lines(results_dir):
    folder = os.path.join(results_dir, "pytorch_reference")
    files = sorted(glob.glob(os.path.join(folder, "*.json"))) if os.path.isdir(folder) else []
    if not files:
        return []
    lines = ["## Our baselines against PyTorch's checkpoint",
             "The same model in eager PyTorch (`tests/pytorch_reference.py`: a loop over experts with index_select / "
             "index_add_, `torch.utils.checkpoint` per decoder layer, `torch.optim.Adam`), fed our weights, data and "
             "routing (`memfine export`); its peak measured by PyTorch's profiler, ours by our meter. Activation peak "
             "in MiB; `scripts/compare-pytorch experiments/<name>.yaml` prints each (a ctest checks the first two).", "",
             *markdown(["experiment", "no_recompute: ours / PyTorch", "full_recompute / checkpoint", "PyTorch reentrant",
                        "memfine (chunks: peak)", "largest loss difference"])]
    worst_full = 0.0
    for path in files:
        with open(path) as f:
            j = json.load(f)
        rows = {r["strategy"]: r for r in j["rows"]}
        ref = j["pytorch"]
        m = lambda b: f"{b / 2**20:.2f}" if b is not None else "-"
        no, full = rows.get("no_recompute"), rows.get("full_recompute")
        mf = ", ".join(f"{k.split('chunks=')[1].rstrip(')')}: {m(r['ours_peak'])}" for k, r in rows.items()
                       if k.startswith("memfine(chunks="))
        loss = max(abs(r["ours_loss"] - r["pytorch_loss"]) / abs(r["pytorch_loss"]) for r in rows.values()
                   if r["dropless"] and r["ours_loss"] is not None)
        worst_full = max(worst_full, full["ours_peak"] / full["pytorch_peak"])
        lines.append(f"| {j['config']['name']} | {m(no['ours_peak'])} / {m(no['pytorch_peak'])} | "
                     f"{m(full['ours_peak'])} / {m(full['pytorch_peak'])} ({full['ours_peak'] / full['pytorch_peak']:.3f}x) | "
                     f"{m(ref['checkpoint_reentrant']['peak_activation_bytes'])} | {mf} | {loss:.1e} |")
    lines += ["", f"Our full recomputation keeps at most {worst_full:.3f}x what PyTorch's non-reentrant checkpoint keeps "
              "here" + (" (at or below it: every ratio against full recomputation in this report is against a baseline as "
                        "lean as PyTorch's)." if worst_full <= 1.01 else "; ratios against it flatter the other strategies.")
              + " Sources: `" + os.path.relpath(folder) + "/*.json`.", ""]
    return lines


def drift_line(runs, ref, rows):
    dropless = [s for s in runs if not capped(runs, s) and not encoded(runs, s) and s != ref]
    step_gap = max((abs(a["loss"] - b["loss"]) for s in dropless for seed, rs in runs[s].items()
                    for a, b in zip(rs, runs[ref].get(seed, [])) if a["status"] == b["status"] == "ok"), default=0.0)
    end_gap = max((abs(rows[s]["diff"]) for s in dropless if rows.get(s)), default=0.0)
    return (f"- The dropless strategies ({', '.join([ref] + dropless)}) compute the same model but sum in other orders: "
            f"their runs start equal to rounding and drift apart as near-tied routing decisions flip, up to "
            f"{step_gap:.3f} nats on a step's training loss; their final held-out losses differ by at most {end_gap:.4f} "
            "on average over seeds." + lossy_line(runs, rows))


def lossy_line(runs, rows):
    """8-bit storage's cost in quality: its final held-out loss against the reference at the same seed."""
    parts = [f"{s} {rows[s]['diff']:+.4f} (95% interval +-{rows[s]['half']:.4f}: "
             f"{'exceeds' if rows[s]['significant'] else 'within'} the spread over seeds)"
             for s in runs if encoded(runs, s) and rows.get(s)]
    return ("\n- 8-bit activation storage (lossy: its gradients carry the format's rounding), final held-out loss "
            "against the reference at the same seed: " + "; ".join(parts) + ".") if parts else ""


def trace_replay_lines(results_dir):
    path = _path(results_dir, "trace_replay")
    if not path:
        return []
    recs = R.load(path)
    mact = R.first(recs, status="ok", **R.MACT)
    full = R.first(recs, role="baseline")
    if mact is None or not mact.get("tokens_received_per_step"):
        return []
    m = mact["config"]["model"]
    share = m["seq"] * m.get("micro_batch", 1) * m["topk"]
    per_step = mact["tokens_received_per_step"]
    top = max(max(row) for row in per_step)
    counts = _flat(mact["chunks"])
    hot = [i + 1 for i, row in enumerate(mact["chunks"]) if max(row) > min(counts)]
    return [f"- Replayed at {mact['ep']} ranks of {m['seq']} tokens (`experiments/trace_replay.yaml`, the routing's first "
            f"{len(per_step)} steps), the emulated rank receives up to {top / share:.1f}x its balanced share in one layer; "
            f"full recomputation is {full['status'] if full else 'n/a'} under the budget, and MACT chooses "
            f"{min(counts)}-{max(counts)} chunks" + (f", more than {min(counts)} at iterations {hot[0]}-{hot[-1]}" if hot else "")
            + " (`trace_replay_mact_chunks.png`)."]


def quality_lines(results_dir):
    path = _path(results_dir, "quality", "train.jsonl")
    if not path:
        return []
    recs, runs, first, rows, ref = quality_stats(path)
    t = first["config"]["train"]
    over = lambda r: overloads(r, t["stats_ep"])
    worst = max((o, r["step"], r["strategy"]) for r in recs if r["status"] == "ok" for o in over(r))
    early = [max(over(r)) for r in recs if r["strategy"] == ref and r["step"] < 10]
    late = [max(over(r)) for r in recs if r["strategy"] == ref and r["step"] >= t["steps"] - 10]
    caps = [(s, r) for s, r in sorted(rows.items()) if capped(runs, s) and r]
    sig = [s for s, r in caps if r["significant"]]
    lines = ["## Capacity capping's cost in quality, and learned routing's imbalance (real training)", "",
             f"A byte-level MoE language model trained on Debian's fortunes (`experiments/quality.yaml`, {t['steps']} "
             f"steps, {len(runs[ref])} seeds; `quality_table.md`, `quality_eval_loss.png`).", ""]
    for s, r in caps:
        lines.append(f"- {s}: held-out loss {r['mean']:.4f} ({r['diff']:+.4f} against dropless, 95% interval "
                     f"+-{r['half']:.4f}: {'exceeds' if r['significant'] else 'within'} the spread over seeds).")
    lines += ["", ("Capping cost measurable quality at our scale for " + ", ".join(sig) + f" (of {len(caps)} comparisons "
                   f"at 95% each, about {0.05 * len(caps):.1f} would exceed by chance alone: read one as weak evidence)."
                   if sig else
                   "At our scale no capped run's held-out loss differs from dropless beyond the spread over seeds. "
                   "That is the finding, not a proof that capping is free at scale."),
              drift_line(runs, ref, rows), *trace_replay_lines(results_dir),
              f"- Learned routing: the hottest of {t['stats_ep']} ranks gets up to {max(early):.2f}x the mean in the first "
              f"10 steps and {max(late):.2f}x in the last 10 ("
              + ("most imbalanced early" if max(early) > max(late) else "not most imbalanced early") +
              f"); the largest seen is {worst[0]:.2f}x (step {worst[1]}, {worst[2]}; `quality_overload.png`).", ""]
    return lines


def train_ranks_lines(results_dir):
    path = _path(results_dir, "train_ranks", "train.jsonl")
    if not path:
        return []
    recs, by, cfg, ranks, room, mact = train_ranks_stats(path)
    m, t = cfg["model"], cfg["train"]
    lines = ["## Training on real ranks: MACT over learned routing", "",
             f"`experiments/train_ranks.yaml` trains quality.yaml's model on {ranks} real ranks (`memfine launch --nproc "
             f"{ranks}`; each holds {m['experts'] // ranks} experts and routing is learned across them) for {t['steps']} "
             "steps " + (f"under a budget leaving {room / 2**20:.1f} MiB for activations" if room is not None else "without a budget")
             + " (`train_ranks.png`).", ""]
    for s, rs in sorted(by.items()):
        ok = [r for r in rs if r["status"] == "ok"]
        bad = next((r for r in rs if r["status"] != "ok"), None)
        peak = max((r["peak_activation_bytes"] for r in ok), default=0)
        ms = statistics.median([r["step_ms"] for r in ok[1:]]) if ok[1:] else None
        final = next((r.get("eval_loss") for r in reversed(ok) if r.get("eval_loss") is not None), None)
        if bad:
            lines.append(f"- {s}: {bad['status']} at step {bad['step']} (the fullest rank at "
                         f"{bad.get('peak_activation_bytes', 0) / 2**20:.1f} MiB) after {len(ok)} steps.")
        else:
            lines.append(f"- {s}: all {len(ok)} steps, peak {peak / 2**20:.1f} MiB, median step {ms:.0f} ms"
                         + (f", final held-out loss {final:.4f}." if final is not None else "."))
    if mact:
        ok = [r for r in by[mact] if r["status"] == "ok"]
        cells = [c for r in ok for c in r["chunks"]]
        top = max(o for r in ok for o in overloads(r, ranks))
        # Without a budget MACT plans nothing, so its records carry no predicted peaks to compare with.
        ratio = [r["peak_activation_bytes"] / max(r["predicted_layer_peak_bytes"])
                 for r in ok if r.get("predicted_layer_peak_bytes")]
        lines += ["", f"- The hottest rank received up to {top:.1f}x its balanced share. MACT ran "
                      f"{', '.join(f'{c} chunk(s) in {100 * cells.count(c) / len(cells):.0f}%' for c in sorted(set(cells)))} "
                      "of the layer-steps, each planned once that layer's router had run, from every rank's counts."]
        if ratio:
            lines.append(f"- The fullest rank's measured peak is {min(ratio):.2f}-{max(ratio):.2f}x the model's largest "
                         "layer peak for the plan MACT chose, over every step.")
        else:
            lines.append("- MACT had no budget to plan against here, so no predicted peak is compared.")
        lines.append("")
    return lines
