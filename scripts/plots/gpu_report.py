"""REPORT.md's GPU section: what the GPU folders (results/<gpu>/, beside the CPU results) measured,
each sentence decided by the records it cites."""
import glob
import json
import os
import statistics

from . import records as R
from . import tables
from .grouped_probe import curve, rows_of
from .paper import claims
from .sweeps import bf16_peak


def _recs(gpu_dir, name):
    path = os.path.join(gpu_dir, name, "results.jsonl")
    return (R.load(path), path) if os.path.exists(path) else ([], path)


def _ok(rs, strategy):
    return next((r for r in rs if r["strategy"] == strategy and r["status"] == "ok"), None)


def _over(slow, fast):
    """How many times faster `fast` ran than `slow` (two records; None where either is missing)."""
    return R.median_ms(slow) / R.median_ms(fast) if slow and fast else None


def _speed(rs, strategy, base="full_recompute"):
    return _over(_ok(rs, base), _ok(rs, strategy))


def _source(recs, path):
    env = R.env_of(recs)
    return (f"`{os.path.relpath(path)}`: {env.get('device_name', '?')}, LibTorch {env.get('libtorch', '?')}, "
            f"{R.commit_text(env.get('git_commit', '?'))}")


def grouped_lines(gpu_dir):
    recs, path = _recs(gpu_dir, "gpu_grouped")
    if not recs:
        return []
    by = {}
    for r in recs:
        by.setdefault((r["config"].get("expert_gemm"), r["ep"]), []).append(r)
    eps = sorted({ep for _, ep in by})
    paper = 1 + claims()["tgs_fixed8_vs_full_II"]  # the paper's fixed 8 chunks against full recomputation
    out = [f"Grouped expert GEMMs against one per expert ({_source(recs, path)}; speed = full recomputation's step "
           "time / the strategy's, at the same point):", ""]
    for ep in eps:
        loop, grouped = by.get(("loop", ep), []), by.get(("grouped", ep), [])
        parts = []
        for s in ("memfine(chunks=2)", "memfine(chunks=4)", "memfine(chunks=8)"):
            a, b = _speed(loop, s), _speed(grouped, s)
            if a and b:
                parts.append(f"{s.split('=')[1].rstrip(')')} chunks {a:.2f}x -> {b:.2f}x")
        ratios = {s: _over(_ok(loop, s), _ok(grouped, s)) for s in sorted({r["strategy"] for r in loop})}
        ratios = {s: x for s, x in ratios.items() if x is not None}
        faster = [s for s, x in ratios.items() if x > 1]
        out.append(f"- EP {ep}, loop -> grouped: {'; '.join(parts)} (the paper's 8 chunks: {paper:.3f}x). The grouped "
                   f"GEMM's speed-up per strategy: " + ", ".join(f"{s} {x:.2f}x" for s, x in ratios.items())
                   + f"; faster for {len(faster)} of {len(ratios)}.")
        eight = _speed(grouped, "memfine(chunks=8)")
        if eight is not None:
            verdict = "reaches" if eight >= paper - 0.02 else "does not reach"
            out.append(f"  8 chunks with grouped GEMMs {verdict} the paper's cost ({eight:.2f}x against {paper:.3f}x).")
    return out + [""]


def peak_lines(gpu_dir):
    recs, path = _recs(gpu_dir, "gpu_peak")
    if not recs:
        return []
    out = [f"What sets the activation peak on the GPU ({_source(recs, path)}):", ""]
    for point, rs in R.by_point(recs).items():
        peaks = [f"{r['strategy']} {R.activation(r) / 2**30:.2f} GiB (model {r['predicted_activation_bytes'] / 2**30:.2f})"
                 for r in rs if r["status"] == "ok" and r.get("predicted_activation_bytes")]
        out.append(f"- {point}: " + ", ".join(peaks) + ".")
    return out + [""]


def budget_lines(gpu_dir):
    recs, path = _recs(gpu_dir, "gpu_budget")
    if not recs:
        return []
    budget = next((r["budget_bytes"] for r in recs if r.get("budget_bytes")), None)
    gemm = R.config_of(recs).get("expert_gemm", "loop")
    cells = []
    for r in recs:
        if r["status"] == "ok":
            cells.append(f"{r['strategy']} fits ({R.activation(r) / 2**30:.2f} GiB of activations, the model said "
                         f"{r['predicted_activation_bytes'] / 2**30:.2f})")
        else:
            cells.append(f"{r['strategy']} {r['status']} ({r.get('error') or '-'})")
    return [f"Under a budget of {budget / 2**30:.1f} GiB ({_source(recs, path)}, expert GEMMs {gemm}): "
            + "; ".join(cells) + ".", ""]


def _json(gpu_dir, *parts):
    path = os.path.join(gpu_dir, *parts)
    if not os.path.exists(path):
        return None, path
    with open(path) as f:
        return json.load(f), path


def probe_lines(gpu_dir):
    """scripts/gpu_peak_probe.py's and scripts/gpu_copy_probe.py's JSON (results/<gpu>/probes/)."""
    out = []
    peak, path = _json(gpu_dir, "probes", "peak.json")
    if peak:
        sst = peak["heads_seq_seq_bytes"]
        big = sum(1 for b in peak["live_at_peak"] if b["bytes"] == sst)
        sh = peak["shape"]
        out += [f"Attention alone at seq {sh['seq']}, {sh['heads']} heads, {sh['dtype']} (eager PyTorch {peak['torch']} on "
                f"the {peak['device']}, `{os.path.relpath(path)}`): its forward and backward peak "
                f"{peak['peak_in_heads_seq_seq']:.2f} [heads, seq, seq] tensors above the start, {big} such tensors alive "
                "at the peak. The memory model prices one more there on a GPU than on a CPU: "
                "ATen's CUDA softmax backward forms grad * output in a tensor of its own.", ""]
    copy, path = _json(gpu_dir, "probes", "copy.json")
    if copy:
        big = [r for r in copy["bandwidth"] if r["mib"] == max(x["mib"] for x in copy["bandwidth"])]
        pinned = next(r for r in big if r["pinned"])
        paged = next(r for r in big if not r["pinned"])
        ov = copy["overlap"]
        be = max(copy["break_even"], key=lambda r: r["rows"])
        fastest = min(pinned["d2h_gb_s"], pinned["h2d_gb_s"])
        verdict = ("below" if fastest < be["break_even_gb_s"] else "above")
        out += [f"Host copies (`{os.path.relpath(path)}`, {copy['device']}): {pinned['mib']} MiB from pinned memory at "
                f"{pinned['d2h_gb_s']:.1f} GB/s out and {pinned['h2d_gb_s']:.1f} GB/s back (pageable: "
                f"{paged['d2h_gb_s']:.1f} and {paged['h2d_gb_s']:.1f}); on a stream of their own beside bf16 products "
                f"they ran at {ov['d2h']['with_matmul_gb_s']:.1f} and {ov['h2d']['with_matmul_gb_s']:.1f} GB/s while the "
                f"products took {ov['d2h']['matmul_slowdown']:.2f}x and {ov['h2d']['matmul_slowdown']:.2f}x their time "
                f"alone. Recomputing DeepSeek-V3's first expert GEMM ({be['rows']} rows) took {be['fc1_ms']:.2f} ms "
                f"({be['fc1_tflops']:.0f} TFLOP/s): copying its output one way is as fast only at "
                f"{be['break_even_gb_s']:.0f} GB/s, and the measured {fastest:.1f} GB/s is {verdict} it, so offloading "
                "that output costs less than recomputing it only where its copies hide behind other work.", ""]
    grouped, path = _json(gpu_dir, "probes", "grouped.json")
    if grouped:
        out += _grouped_probe_lines(grouped, path)
    attention, path = _json(gpu_dir, "probes", "attention.json")
    if attention:
        out += attention_probe_lines(attention, path)
    return out


def attention_probe_lines(doc, path):
    """scripts/gpu_attention_probe.py: forward and backward TFLOP/s by kernel at the models' heads, and
    what GPT-OSS's window and sinks cost under FlexAttention against its full causal layer."""
    ok = [r for r in doc["rows"] if "error" not in r]
    if not ok:
        return []

    def rate(backend, head_dim=None, model=None, sinks=False):
        v = [r["fwd_bwd_tflops"] for r in ok if r["backend"] == backend and r["sinks"] == sinks
             and (head_dim is None or r["head_dim"] == head_dim) and (model is None or r["model"] == model)
             and (model is not None or not r["window"])]
        return (min(v), max(v)) if v else None

    def text(v):
        return "-" if v is None else f"{v[0]:.0f}" if round(v[0]) == round(v[1]) else f"{v[0]:.0f}-{v[1]:.0f}"
    dims = sorted({r["head_dim"] for r in ok if not r["window"] and r["backend"] in ("flash", "cudnn")}, reverse=True)
    parts = [f"head dim {d}: FlashAttention {text(rate('flash', d))}, cuDNN {text(rate('cudnn', d))}" for d in dims]
    out = (f"Attention (`{os.path.relpath(path)}`, {doc['device']}, PyTorch {doc['torch']}, "
           f"{R.commit_text(doc.get('git_commit', '?'))}; forward and backward at seq "
           f"{ok[0]['seq']}, causal, TFLOP/s as the projection counts them): " + "; ".join(parts) + ".")
    full, windowed = rate("flex", model="gpt_oss full"), rate("flex", model="gpt_oss windowed")
    if full and windowed:
        sunk = rate("flex", model="gpt_oss full", sinks=True), rate("flex", model="gpt_oss windowed", sinks=True)
        out += (f" FlexAttention at GPT-OSS's heads, as NeMo AutoModel runs it: the full causal layer "
                f"{text(full)} ({text(sunk[0])} with its sinks), the 128-token windowed layer {text(windowed)} "
                f"({text(sunk[1])}), {windowed[0] / full[0]:.2f} of the full layer's rate, at which the projection "
                "prices a windowed layer's FLOPs.")
    mla = rate("flex", model="deepseek_v3 mla")
    if mla:
        out += (f" FlexAttention at DeepSeek-V3's MLA heads (queries and keys 192 wide, values 128), as torchtitan "
                f"runs it: {text(mla)} (the preset's flex_attention_head_dim_curve at 192).")
    return [out, ""]


def _grouped_probe_lines(doc, path):
    """The grouped GEMM probe: its rates by rows per expert across shapes, and the weight gradient
    added into an fp32 buffer (Megatron's gradient accumulation fusion's work)."""
    grouped, loop = rows_of(doc, "grouped"), rows_of(doc, "loop")
    if not grouped:
        return []
    rows = sorted({r["rows_per_expert"] for r in grouped})

    def span(rs, n, key="tflops"):
        v = [r[key] for r in rs if r["rows_per_expert"] == n and r.get(key)]
        return f"{min(v):.0f}-{max(v):.0f}" if v else "-"

    lo, hi = rows[0], rows[-1]
    return [f"The grouped expert GEMM (`{os.path.relpath(path)}`, {doc['device']}, PyTorch {doc['torch']}, "
            f"{R.commit_text(doc.get('git_commit', '?'))}; forward and both gradients, rows split evenly, "
            f"{len({r['model'] for r in grouped})} validation models' expert shapes): at {lo} rows per expert "
            f"{span(grouped, lo)} TFLOP/s grouped against {span(loop, lo)} with a GEMM per expert, at {hi} rows "
            f"{span(grouped, hi)} against {span(loop, hi)}. Its median over shapes ("
            + ", ".join(f"{v:.0f} at {n}" for n, v in curve(doc))
            + ") is the H200 preset's grouped GEMM curve. The weight gradient added into an fp32 buffer, as "
            f"Megatron's gradient accumulation fusion keeps it, ran at {span(grouped, lo, 'wgrad_acc_tflops')} "
            f"TFLOP/s at {lo} rows against {span(grouped, lo, 'wgrad_tflops')} for the product alone, and "
            f"{span(grouped, hi, 'wgrad_acc_tflops')} against {span(grouped, hi, 'wgrad_tflops')} at {hi}: "
            "an upper bound of the fused kernel's, whose least (the longer of the product and the buffer's read "
            "and write at the HBM rate) the projection prices under Megatron's profile."
            + (f" The fused kernel itself (each expert's GEMM writing into the buffer, as Transformer Engine runs "
               f"it): {span(loop, lo, 'wgrad_fused_tflops')} TFLOP/s at {lo} rows, "
               f"{span(loop, hi, 'wgrad_fused_tflops')} at {hi}."
               if any(r.get("wgrad_fused_tflops") for r in loop) else ""), ""]


def _file_label(label):
    """A strategy's label as `memfine run --profile` names its trace (core/run/measure.cpp)."""
    return "".join(c if c.isalnum() or c in "-_.=" else "_" for c in label)


def chunk_cost_lines(gpu_dir):
    out = []
    for before in sorted(glob.glob(os.path.join(gpu_dir, "gpu_chunk_cost.before-*"))):
        out += _chunk_cost_lines(gpu_dir, os.path.basename(before))
    return _chunk_cost_lines(gpu_dir, "gpu_chunk_cost") + out + _chunk_cost_lines(gpu_dir, "gpu_wgrad")


TITLES = {"gpu_chunk_cost": "Where a chunk's time goes",
          "gpu_wgrad": "Where a chunk's weight gradients go: the grouped GEMM's buffer then an add "
                       "(`expert_wgrad: grouped`), or a GEMM per expert adding in place (`per_expert`)"}


def _chunk_cost_lines(gpu_dir, folder):
    recs, path = _recs(gpu_dir, folder)
    summary, spath = _json(gpu_dir, folder, "trace_summary.json")
    if not recs:
        return []
    title = TITLES.get(folder, f"The same, measured earlier and kept as `{folder}`")
    out = [f"{title} ({_source(recs, path)}; speed against full recomputation"
           + (f"; one more step of each under LibTorch's profiler, `{os.path.relpath(spath)}`" if summary else "")
           + "):", ""]
    traces = {}
    for t in summary or []:
        traces[t["trace"]] = t
    for r in recs:
        if r["status"] != "ok":
            continue
        same = [x for x in recs if x["point"] == r["point"]]  # a sweep's point: ratios within it
        speed = _speed(same, r["strategy"])
        at = f" at {r['point']}" if r["point"] != "base" else ""
        cell = f"- {r['strategy']}{at}: {R.median_ms(r):.1f} ms a step" + (f", {speed:.2f}x" if speed else "")
        if folder == "gpu_wgrad" and R.activation(r) is not None:  # the buffer is held in backward
            cell += (f", {R.activation(r) / 2**30:.2f} GiB of activations (the model said "
                     f"{r.get('predicted_activation_bytes', 0) / 2**30:.2f})")
        if "ops_per_step" in r:
            syncs = r["host_syncs_per_step"]
            cell += f", {r['ops_per_step']} operators and {syncs} read{'' if syncs == 1 else 's'} of the device a step"
        if r.get("graphs") == "step":
            cell += f", replayed as a CUDA graph (its error against the eager step {r.get('graph_err', 0):.1e})"
        elif r.get("graphs_why"):
            cell += f", eager: {r['graphs_why']}"
        t = next((t for n, t in traces.items()
                  if n.endswith("." + _file_label(r["point"]) + "." + _file_label(r["strategy"]) + ".json")), None)
        if t:
            cell += (f"; traced, {t['kernels']} kernels (mean {t['mean_kernel_us']:.1f} us), the GPU busy "
                     f"{t['gpu_busy_ms']:.1f} of {t['span_ms']:.1f} ms ({100 * t['gpu_busy_ms'] / t['span_ms']:.0f}%), "
                     f"{t['host_waits']} host wait{'' if t['host_waits'] == 1 else 's'} for the device "
                     f"({t['host_wait_ms']:.1f} ms)")
        out.append(cell + ".")
    return out + [""]


def offload_lines(gpu_dir):
    recs, path = _recs(gpu_dir, "gpu_offload")
    if not recs:
        return []
    out = [f"Offloading with its copies on their own streams ({_source(recs, path)}; speed against full "
           "recomputation; the copies' times measured by events on their streams):", ""]
    for r in recs:
        if r["status"] != "ok":
            out.append(f"- {r['strategy']}: {r['status']} ({r.get('error') or '-'})")
            continue
        speed = _speed(recs, r["strategy"])
        cell = (f"- {r['strategy']}: {R.activation(r) / 2**30:.2f} GiB of activations, {R.median_ms(r):.1f} ms a step"
                + (f" ({speed:.2f}x)" if speed else ""))
        if r.get("offload_d2h_ms") is not None:
            moved = r.get("offload_to_host_bytes", 0) / 2**30
            cell += (f"; {moved:.2f} GiB out in {r['offload_d2h_ms']:.1f} ms and back in {r['offload_h2d_ms']:.1f} ms "
                     f"of copy time")
        out.append(cell + ".")
    return out + [""]


def fused_model_lines(gpu_dir):
    """The memory model against the CUDA meter where attention ran fused (`attention_kernel: sdpa`), whose
    backward rule no other record checks: each strategy's error, from gpu_sdpa's and gpu_wgrad's records."""
    out = []
    for experiment in ("gpu_sdpa", "gpu_wgrad"):
        recs, path = _recs(gpu_dir, experiment)
        cells = [f"{r['strategy']}" + (f" at {r['point']}" if r["point"] != "base" else "")
                 + f" {100 * R.model_error(r):+.1f}%" for r in recs
                 if r["status"] == "ok" and r.get("config", {}).get("attention_kernel") == "sdpa"
                 and R.activation(r) and r.get("predicted_activation_bytes")]
        if cells:
            out += [f"The memory model against the CUDA meter with attention fused (`{experiment}`, "
                    f"{_source(recs, path)}): " + ", ".join(cells) + ".", ""]
    return out


def _model_errors(gpu_dir):
    """gpu_model_accuracy's records and the model's error in % at each point both measured and predicted."""
    recs, path = _recs(gpu_dir, "gpu_model_accuracy")
    ok = [r for r in recs if r["status"] == "ok" and R.activation(r) and r.get("predicted_activation_bytes")]
    return recs, path, [100 * R.model_error(r) for r in ok]


def model_lines(gpu_dir):
    recs, path, err = _model_errors(gpu_dir)
    if not err:
        return []
    lows = sum(e < -5 for e in err)
    gemm = R.config_of(recs).get("expert_gemm", "loop")
    return [f"The implementation memory model against the CUDA meter ({_source(recs, path)}, expert GEMMs {gemm}): "
            f"{len(err)} points, median |error| {statistics.median(abs(e) for e in err):.2f}%, "
            f"{sum(abs(e) <= 5 for e in err)} within 5%, {lows} more than 5% low (lowest {min(err):+.1f}%), highest "
            f"{max(err):+.2f}%" + (" (never above the meter)" if max(err) <= 0 else "")
            + (": MACT's 5% headroom does not cover it where the model reads low." if lows else
               ": nowhere low by more than MACT's 5% headroom."), ""]


def rate_lines(gpu_dir):
    """Model TFLOP/s per strategy: at MoEBlaze's benchmark scale and at DeepSeek-V3's MoE shape (its
    attention eager, and fused: gpu_sdpa)."""
    out = []
    for experiment in ("gpu_baselines", "gpu_deepseek", "gpu_sdpa"):
        recs, path = _recs(gpu_dir, experiment)
        name, peak = bf16_peak(recs) if recs else (None, None)
        if not peak:
            continue
        out += [f"Model TFLOP/s and share of the {name}'s {peak:g} TFLOP/s bf16 peak, `{experiment}` "
                f"({_source(recs, path)}):", ""]
        for point, rs in R.by_point(recs).items():
            cells = [f"{r['strategy']} {r['tflops']:.0f} ({100 * r['tflops'] / peak:.0f}%)" for r in rs
                     if r["status"] == "ok" and r.get("tflops")]
            out.append(f"- {point}: " + ", ".join(cells) + ".")
        out.append("")
    return out


# The side-by-side table's rows for gpu_chunk_cost and gpu_wgrad, kept together at its top.
CHUNK_ROWS = ("8 chunks / full recomputation, `gpu_chunk_cost`", "8 chunks / full recomputation, `gpu_wgrad`")


def _chunk_cells(gpu_dir):
    """{row label: cell} of 8 chunks against full recomputation per experts' path and graphs, with
    the traced step's GPU busy share where traced."""
    cells = {}
    for folder in ("gpu_chunk_cost", "gpu_wgrad"):
        recs, _ = _recs(gpu_dir, folder)
        summary, _ = _json(gpu_dir, folder, "trace_summary.json")
        for point, rs in R.by_point(recs).items():
            speed = _speed(rs, "memfine(chunks=8)")
            if speed is None:
                continue
            config = R.config_of([_ok(rs, "memfine(chunks=8)")])  # older records name no graphs: none
            gemm, graphs = config.get("expert_gemm", "loop"), config.get("graphs") or "none"
            wgrad = config.get("expert_wgrad", "grouped")
            cell = f"{speed:.2f}x"
            label = _file_label(point) + "." + _file_label("memfine(chunks=8)") + ".json"
            t = next((t for t in summary or [] if t["trace"].endswith(label)), None)
            if t:
                cell += f" ({100 * t['gpu_busy_ms'] / t['span_ms']:.0f}% busy)"
            row = f"8 chunks / full recomputation, `{folder}`, experts {gemm}"
            cells[row + (f", weight gradients {wgrad}" if folder == "gpu_wgrad" else "") + f", graphs {graphs}"] = cell
    return cells


def _gpu_cells(gpu_dir):
    """{row label: cell} of one GPU folder's headline measures, each from its records."""
    cells = _chunk_cells(gpu_dir)
    for experiment, shape in (("gpu_deepseek", "DeepSeek-V3's MoE shape"),
                              ("gpu_sdpa", "the same, attention fused")):
        ds, _ = _recs(gpu_dir, experiment)
        for s, what in (("memfine(chunks=8)", "8 chunks"), ("memfine(chunks=auto)", "MACT")):
            x = _speed(ds, s)
            if x is not None:
                cells[f"{what} / full recomputation, `{experiment}` ({shape})"] = f"{x:.2f}x"
        name, peak = bf16_peak(ds) if ds else (None, None)
        nr = _ok(ds, "no_recompute")
        if peak and nr and nr.get("tflops"):
            cells[f"no_recompute's share of the bf16 peak, `{experiment}`"] = f"{100 * nr['tflops'] / peak:.0f}%"
    budget, _ = _recs(gpu_dir, "gpu_budget")
    mact = next((r for r in budget if r["strategy"] == "memfine(chunks=auto)"), None)
    if mact:
        cells["MACT under `gpu_budget`'s budget"] = ("fits" if mact["status"] == "ok" else mact["status"])
    _, _, err = _model_errors(gpu_dir)
    if err:
        cells["memory model within 5% of the CUDA meter, `gpu_model_accuracy`"] = (
            f"{sum(abs(e) <= 5 for e in err)} of {len(err)} (lowest {min(err):+.1f}%)")
    off, _ = _recs(gpu_dir, "gpu_offload")
    rates = [r["offload_to_host_bytes"] / r["offload_d2h_ms"] / 1e6 for r in off
             if r["status"] == "ok" and r.get("offload_d2h_ms")]
    if rates:
        cells["offloading's copies out, `gpu_offload`"] = f"{statistics.median(rates):.1f} GB/s"
    elif off and all(r["status"] != "ok" for r in off):
        cells["offloading's copies out, `gpu_offload`"] = f"no record ok ({len(off)} errors)"
    return cells


def side_by_side(gpu_dirs):
    """One table of what two or more GPU folders both measured: a column each, "-" where one has not."""
    cols = [(d, _gpu_cells(d)) for d in gpu_dirs]
    cols = [(d, c) for d, c in cols if c]
    if len(cols) < 2:
        return []
    rows = []
    for _, c in cols:
        rows += [k for k in c if k not in rows]
    first = {k: i for i, k in enumerate(rows)}  # the chunk-cost rows together, then as they came
    rows.sort(key=lambda k: (next((i for i, p in enumerate(CHUNK_ROWS) if k.startswith(p)), len(CHUNK_ROWS)), first[k]))
    head = ["measure"]
    for d, _ in cols:
        for name in ("gpu_chunk_cost", "gpu_deepseek", "gpu_model_accuracy", "gpu_budget"):
            recs, _ = _recs(d, name)
            if recs:
                head.append(f"{R.env_of(recs).get('device_name', '?')} (`{os.path.relpath(d)}`)")
                break
    return (["## The GPUs side by side", "",
             "Each cell from that GPU's records (its section below names the commit); speeds are full "
             "recomputation's step time over the strategy's at the same point, the same way run. "
             + attention_note([d for d, _ in cols]), ""]
            + tables.markdown(head, [[k] + [c.get(k, "-") for _, c in cols] for k in rows]) + [""])


def attention_note(gpu_dirs):
    """How the records' attention ran: eagerly, its [heads, seq, seq] tensors in every strategy's step
    and peak, or through the fused kernel (`attention_kernel: sdpa`)."""
    eager = fused = 0
    for d in gpu_dirs:
        for path in glob.glob(os.path.join(d, "*", "results.jsonl")):
            for r in R.load(path):
                if r.get("config", {}).get("model", {}).get("attention", "gqa") != "gqa":
                    continue
                fused += r.get("config", {}).get("attention_kernel") == "sdpa"
                eager += r.get("config", {}).get("attention_kernel", "eager") == "eager"
    if not eager:
        return ""
    return (f"Attention ran eagerly in {eager} of the {eager + fused} records with attention: its scores, mask and "
            "softmax as [heads, seq, seq] tensors add time to every strategy's step (twice where attention is "
            "recomputed) and, at long sequences, set the peaks, which training frameworks' fused kernels do not"
            + (" (`gpu_sdpa` runs it fused)." if not fused else "."))


def lines(cpu_results):
    """One section per GPU folder beside `cpu_results` (results/h100, results/h200, ...), after a
    table of them side by side."""
    gpu_dirs = sorted(glob.glob(os.path.join(os.path.dirname(os.path.abspath(cpu_results)), "[a-z]*[0-9]*")))
    out = side_by_side(gpu_dirs)
    for gpu_dir in gpu_dirs:
        body = (grouped_lines(gpu_dir) + chunk_cost_lines(gpu_dir) + probe_lines(gpu_dir) + peak_lines(gpu_dir)
                + budget_lines(gpu_dir) + model_lines(gpu_dir) + fused_model_lines(gpu_dir) + offload_lines(gpu_dir)
                + rate_lines(gpu_dir))
        if body:
            out += [f"## On a GPU: `{os.path.relpath(gpu_dir)}`", "", *body]
    return out
