#!/usr/bin/env python3
"""Turns memfine results into the paper's tables and figures (paper_figures/).

Every table and figure names the results file it came from and the environment it was measured
in. Run through scripts/python (an interpreter with matplotlib), e.g.

    scripts/python scripts/figures.py --results results/cpu --out paper_figures \
        --predictions results/model/paper_table4.jsonl
"""
import argparse
import hashlib
import csv
import glob
import json
import math
import os
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
PAPER_DATA = os.path.join(HERE, "..", "experiments", "data")
MIB = 2.0 ** 20

# The paper's methods, and how they are named here.
METHOD_NAMES = {
    "full_recompute": "1: full recomputation",
    "memfine(chunks=8)": "2: MemFine, 8 chunks",
    "memfine(bins=[1, 2, 4, 8],chunks=auto)": "3: MemFine + MACT",
    "memfine(chunks=auto,store_when_fits=true)": "MACT + store when it fits (ours)",
}


COLORS = {"full_recompute": "tab:blue", "memfine(chunks=8)": "tab:orange",
          "memfine(bins=[1, 2, 4, 8],chunks=auto)": "tab:green", "memfine(chunks=auto,store_when_fits=true)": "tab:red",
          "memfine(chunks=auto)": "tab:green", "no_recompute": "tab:gray",
          "memfine(chunks=auto,objective=time)": "tab:purple"}


class ResultsError(Exception):
    pass


def load(path, required=("experiment", "point", "strategy", "status")):
    """Reads a results file; a bad line is an error naming file and line."""
    records = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError as e:
                raise ResultsError(f"{path}:{n}: not a JSON record ({e})")
            for key in required:
                if key not in rec:
                    raise ResultsError(f"{path}:{n}: record has no '{key}'")
            records.append(rec)
    if not records:
        raise ResultsError(f"{path}: no records")
    return records


def read_csv(name):
    with open(os.path.join(PAPER_DATA, name)) as f:
        return list(csv.DictReader(f))


def commit_text(commit):
    """'0d58a23' or '0d58a23 + uncommitted changes': a '-dirty' commit says the tree differed."""
    if commit.endswith("-dirty"):
        return f"commit {commit[:-6]} with uncommitted changes"
    return f"commit {commit}"


def source_line(path, records):
    env = next((r.get("env") for r in records if r.get("env")), {}) or {}
    commits = sorted({(r.get("env") or {}).get("git_commit", "?") for r in records})
    commit = commit_text(commits[0]) if len(commits) == 1 else "commits " + ", ".join(commits)
    return (f"Source: {os.path.relpath(path)} ({commit}, LibTorch {env.get('libtorch', '?')}, "
            f"{env.get('device_name', '?')}, {env.get('threads', '?')} threads, {env.get('date', '?')})")


def device_label(records):
    env = next((r.get("env") for r in records if r.get("env")), {}) or {}
    return f"{env.get('device', '?')}: {env.get('device_name', '?')}"


def config_line(rec):
    c = rec.get("config", {})
    m = c.get("model", {})
    w = c.get("workload", {})
    return (f"layers {m.get('layers')}, hidden {m.get('hidden')}, ffn {m.get('ffn_hidden')}, experts {m.get('experts')}, "
            f"top-{m.get('topk')}, seq {m.get('seq')}, ep {c.get('parallel', {}).get('ep')}, "
            f"workload {w.get('kind')}" + (f" ({w.get('schedule')})" if w.get("schedule", "none") != "none" else ""))


def save(fig, out_dir, stem, caption, tight=True):
    """Writes PNG and PDF with the caption (source and config) along the bottom."""
    fig.text(0.01, 0.005, caption, fontsize=6, color="0.35", ha="left", va="bottom", wrap=True)
    if tight:  # figures with a colorbar lay themselves out
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fig.tight_layout(rect=(0, 0.06, 1, 1))
    paths = []
    for ext in ("png", "pdf"):
        p = os.path.join(out_dir, f"{stem}.{ext}")
        # No creation date in the PDF: re-plotting the same results gives the same files.
        fig.savefig(p, dpi=150, metadata={"CreationDate": None} if ext == "pdf" else None)
        paths.append(p)
    plt.close(fig)
    return paths


def write_table(out_dir, stem, title, header, rows, notes):
    md = [f"# {title}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    md += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    md += [""] + notes
    with open(os.path.join(out_dir, stem + ".md"), "w") as f:
        f.write("\n".join(md) + "\n")
    esc = lambda s: str(s).replace("%", "\\%").replace("_", "\\_").replace("&", "\\&").replace("#", "\\#")
    tex = ["% " + title, "\\begin{tabular}{" + "l" * len(header) + "}", "\\hline",
           " & ".join(esc(h) for h in header) + " \\\\", "\\hline"]
    tex += [" & ".join(esc(c) for c in row) + " \\\\" for row in rows]
    tex += ["\\hline", "\\end{tabular}"] + ["% " + n for n in notes]
    with open(os.path.join(out_dir, stem + ".tex"), "w") as f:
        f.write("\n".join(tex) + "\n")
    return [os.path.join(out_dir, stem + ext) for ext in (".md", ".tex")]


def pct(a, b):
    return f"{100.0 * (a - b) / b:+.1f}%"


# ---- Table 4 (a): paper scale, from the paper's equations ----
def table4_modeled(pred_path, out_dir):
    preds = load(pred_path, required=("experiment", "point", "strategy", "static_gb"))
    paper = read_csv("table4_memory_gb.csv")
    method_of = {"full_recompute": "1_full_recompute", "memfine(chunks=8)": "2_fixed_chunks_8",
                 "memfine(bins=[1, 2, 4, 8],chunks=auto)": "3_mact_bins_1_2_4_8"}
    model_of = {"model.layers=16": "I", "model.layers=8": "II"}
    rows = []
    for p in preds:
        if p["strategy"] not in method_of or p["point"] not in model_of:
            continue
        ref = next(r for r in paper if r["model"] == model_of[p["point"]] and r["method"] == method_of[p["strategy"]])
        cells = []
        for ours, theirs in ((p["static_gb"], ref["static_gb"]), (p["activation_gb"], ref["activation_gb"]),
                             (p["total_gb"], ref["total_gb"])):
            cells += [f"{ours:.1f}", theirs, pct(ours, float(theirs))]
        rows.append([f"Model {model_of[p['point']]}", METHOD_NAMES[p["strategy"]], *cells, p["chunks"],
                     "yes" if p["fits"] else "no (OOM)", "no (OOM)" if ref["trains"] == "no_oom" else "yes"])
    header = ["model", "method", "static (ours)", "static (paper)", "err", "activation (ours)", "activation (paper)",
              "err", "total (ours)", "total (paper)", "err", "chunks", "fits (ours)", "trains (paper)"]
    notes = [f"GB per device. Ours: `memfine predict experiments/paper_table4.yaml` ({os.path.relpath(pred_path)}).",
             "Assumptions (printed by predict, none tuned to the paper): " + preds[0].get("assumptions", ""),
             "The paper's Model II static (39.5 GB) cannot come from p = 4 with 8 layers (2 MoE layers per stage, half of "
             "Model I's 4); the paper's parallel sizes (t p d c = 4 on 32 GPUs) do not multiply out either.",
             "The paper reports MACT choosing 2 chunks for Model II although full recomputation fits there (62.4 < 64 GB); "
             "Eq. 9 gives 1 in that case, which is what we print."]
    return write_table(out_dir, "table4_modeled", "Table 4 at paper scale: the paper's memory model beside its numbers",
                       header, rows, notes)


def by_point(records):
    points = {}
    for r in records:
        points.setdefault(r["point"], []).append(r)
    return points


def activation(r):
    return r.get("peak_activation_bytes")


# ---- Table 4 (b): measured at our scale ----
def table4_measured(path, out_dir):
    recs = load(path)
    rows = []
    # The paper's claims beside the rows they compare to: its Model I is where full recomputation
    # runs out of memory (activation claims), its Model II where it fits (the throughput claim).
    claims = {("memfine(chunks=8)", "oom"): "-83.84% act. (Model I)",
              ("memfine(bins=[1, 2, 4, 8],chunks=auto)", "oom"): "-48.03% act. (Model I)",
              ("memfine(bins=[1, 2, 4, 8],chunks=auto)", "ok"): "+4.42% TGS (Model II)"}
    # Full recomputation's need: measured where it fits (a budget only decides whether it fits).
    full_ok = [r for r in of_role(recs, "baseline") if r["status"] == "ok"]
    ref_act = max(activation(r) for r in full_ok) if full_ok else None
    for point, group in sorted(by_point(recs).items()):
        full = next(iter(of_role(group, "baseline")), None)
        ref_ms = full["step_ms"]["median"] if full and full["status"] == "ok" else None
        budget = group[0].get("budget_bytes")
        for r in group:
            act = activation(r)
            static = r.get("static_bytes") or 0
            fits = "yes" if r["status"] == "ok" else ("OOM" if r["status"] == "oom" else "error")
            act_s = f"{act / MIB:.1f}" + (" (before OOM)" if r["status"] == "oom" and act else "") if act else "-"
            red = pct(act, ref_act) if act and ref_act and r["status"] == "ok" else "-"
            ratio = f"{ref_ms / r['step_ms']['median']:.3f}" if ref_ms and r["status"] == "ok" and r.get("step_ms") else "-"
            rows.append([point.replace("memory.budget=", "budget "), METHOD_NAMES.get(r["strategy"], r["strategy"]),
                         f"{static / MIB:.1f}", act_s, f"{(static + (act or 0)) / MIB:.1f}" if act else "-",
                         f"{budget / MIB:.0f}" if budget else "none", fits, red, ratio,
                         claims.get((r["strategy"], full["status"] if full else "oom"), "")])
    header = ["point", "method", "static MiB", "activation MiB", "total MiB", "budget MiB", "fits", "activation vs full",
              "throughput vs full", "paper's claim"]
    notes = ["Measured: activation = step peak - bytes in use at the step's start, max over timed steps; throughput = "
             "median step time of full recomputation / the method's, strategies interleaved in one run.",
             "Activation against full recomputation's need, measured at the budget where it fits (the workload is the same). "
             "Where full recomputation runs out of memory (the paper's Model I) there is no throughput ratio at that budget; "
             "the larger budget (Model II) gives it.",
             source_line(path, recs), "Config: " + config_line(recs[0])]
    return write_table(out_dir, "table4_measured", "Table 4 at our scale, measured", header, rows, notes)


# ---- Figure 2: tokens received per expert ----
def figure2(path, out_dir):
    recs = load(path)
    rec = next(r for r in recs if r.get("expert_tokens"))
    counts = rec["expert_tokens"]
    layers = len(counts)
    cols = 4
    rows_n = math.ceil(layers / cols)
    fig, axes = plt.subplots(rows_n + 1, cols, figsize=(12, 2.2 * (rows_n + 1)), squeeze=False)
    for l, c in enumerate(counts):
        ax = axes[l // cols][l % cols]
        ax.bar(range(len(c)), c, width=1.0, color="tab:blue")
        p99 = sorted(c)[min(len(c) - 1, int(math.ceil(0.99 * len(c))) - 1)]
        ax.axhline(p99, color="tab:red", lw=1, ls="--", label=f"p99 {p99}")
        ax.set_title(f"layer {l}", fontsize=8)
        ax.tick_params(labelsize=6)
        ax.legend(fontsize=6, loc="upper right")
        if l % cols == 0:
            ax.set_ylabel("tokens received", fontsize=7)
        ax.set_xlabel("expert id", fontsize=7)
    for k in range(layers, rows_n * cols):
        axes[k // cols][k % cols].axis("off")
    paper = read_csv("figure2_received_tokens.csv")
    gs = axes[rows_n][0].get_gridspec()
    for ax in axes[rows_n]:
        ax.remove()
    ax = fig.add_subplot(gs[rows_n, :])
    ours_p99 = [sorted(c)[min(len(c) - 1, int(math.ceil(0.99 * len(c))) - 1)] / (sum(c) / len(c)) for c in counts]
    ours_max = [max(c) / (sum(c) / len(c)) for c in counts]
    balanced_paper = 4096.0
    # With 32 experts a layer's p99 is nearly its max: max as large hollow squares underneath,
    # p99 as small filled dots on top, so that neither hides the other.
    ax.plot(range(len(ours_max)), ours_max, "s-", ms=9, mfc="none", lw=3, alpha=0.6, color="tab:orange",
            label="ours: max / mean")
    ax.plot(range(len(ours_p99)), ours_p99, "o-", ms=4, lw=1, color="tab:blue", label="ours: p99 / mean")
    ax.plot(range(len(paper)), [float(r["p99_tokens_per_expert"]) / balanced_paper for r in paper], "o--",
            label="paper (layers 4-15): p99 / balanced")
    ax.plot(range(len(paper)), [float(r["max_tokens_per_expert"]) / balanced_paper for r in paper], "s--",
            label="paper: max / balanced")
    ax.set_xlabel("MoE layer (ours 0.., paper 4..); ours is capped at ep = 8x (an expert gets each token once), the paper's at 32x")
    ax.set_ylabel("x balanced share")
    ax.legend(fontsize=7, ncol=2)
    fig.suptitle(f"Figure 2: tokens received per expert per layer (step {rec.get('expert_tokens_step', 0)}), {device_label(recs)}")
    return save(fig, out_dir, "figure2_received_tokens", source_line(path, recs) + " | " + config_line(rec))


# ---- Figure 4: throughput over steps ----
def figure4(path, out_dir):
    recs = load(path)
    groups = by_point(recs)
    fig, axes = plt.subplots(1, len(groups), figsize=(6 * len(groups), 4.4), squeeze=False, sharey=True)
    paper = read_csv("figure4_tgs.csv")
    tgs = {(r["model"], r["method"][0]): float(r["avg_tokens_per_gpu_per_s"]) for r in paper if r["avg_tokens_per_gpu_per_s"]}
    for ax, (point, group) in zip(axes[0], sorted(groups.items())):
        # The comparison where the eye goes: each method's median against full recomputation (or,
        # where it ran out of memory, against fixed chunks), ours beside the paper's same case.
        full = next(iter(of_role(group, "baseline")), None)
        fits = bool(full) and full["status"] == "ok"
        model = "II" if fits else "I"
        ref_name = "1" if fits else "2"
        ref = full if fits else next((r for r in group if METHOD_NAMES.get(r["strategy"], "").startswith("2:")), None)
        lines = [f"vs method {ref_name}: ours / paper (Model {model})"]
        for r in group:
            name = METHOD_NAMES.get(r["strategy"], "")
            if not name[:1].isdigit() or name[:1] == ref_name or not ref or ref["status"] != "ok" or r["status"] != "ok":
                continue
            ours = ref["step_ms"]["median"] / r["step_ms"]["median"] - 1
            theirs = tgs.get((model, name[0]), 0) / tgs.get((model, ref_name), 1) - 1 if tgs.get((model, ref_name)) else None
            lines.append(f"method {name[0]}: {100 * ours:+.1f}% / " + (f"{100 * theirs:+.2f}%" if theirs is not None else "-"))
        ax.text(0.02, 0.03, "\n".join(lines), transform=ax.transAxes, fontsize=8, va="bottom",
                bbox=dict(boxstyle="round", fc="white", ec="0.6", alpha=0.9))
        ooms = []
        for r in group:
            name = METHOD_NAMES.get(r["strategy"], r["strategy"])
            tokens = r["config"]["model"]["seq"] * r["config"]["model"]["micro_batch"]
            times = r.get("step_ms_all") or []
            warm = r["config"]["warmup"]
            if r["status"] == "ok":
                ax.plot(range(warm, warm + len(times)), [tokens / (t / 1e3) for t in times], "o-", ms=3,
                        color=color_of(r["strategy"]), label=f"{name}: median {tokens / (r['step_ms']['median'] / 1e3):.0f}")
            else:
                ooms.append((warm + len(times), name, color_of(r["strategy"])))
        for step, name, color in ooms:  # out of memory: marked where it happened, not drawn as zero
            ax.axvline(step, color=color, ls=":", lw=1.5, label=f"{name}: out of memory at step {step}")
        ax.set_title(point.replace("memory.budget=", "budget "))
        ax.set_xlabel("step")
        ax.set_ylabel("tokens per device per second")
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.legend(fontsize=7)
    claims = "; ".join(f"Model {r['model']} method {r['method'][0]}: {r['avg_tokens_per_gpu_per_s'] or 'OOM'}" for r in paper)
    fig.suptitle(f"Figure 4: throughput per step, {device_label(recs)}", fontsize=10)
    return save(fig, out_dir, "figure4_throughput", source_line(path, recs) + " | paper (TGS, 32 GPUs): " + claims)


# ---- Figure 5: MACT's chunk choices ----
def figure5(path, out_dir, stem="figure5_mact_chunks", strategy_prefix="memfine(bins", what="ours"):
    """MACT's chunk grid beside the paper's; `strategy_prefix` picks the MACT record (trace_replay:
    the same grid over routing learned in real training)."""
    recs = load(path)
    rec = next((r for r in recs if isinstance(r.get("chunks"), list) and r["strategy"].startswith(strategy_prefix)
                and r["status"] == "ok"), None)
    if rec is None:
        raise ResultsError(f"{path}: no MACT record with per-step chunks")
    grid = list(map(list, zip(*rec["chunks"])))  # [layer][step]
    paper = read_csv("figure5_mact_chunks.csv")
    pgrid = [[int(r[f"it{i}"]) for i in range(1, 21)] for r in paper]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    cmap = plt.get_cmap("viridis", 4)
    for ax, g, title, y0, steps in ((axes[0], grid, f"{what} ({rec['point'].replace('memory.budget=', 'budget ')})", 0,
                                     # iterations counted from 1, as the paper's (records count steps from 0)
                                     [i + 1 for i in rec.get("chunk_steps") or range(len(grid[0]))]),
                                    (axes[1], pgrid, "paper (Model I, layers 4-15)", 4, list(range(1, 21)))):
        im = ax.imshow([[math.log2(max(v, 1)) for v in row] for row in g], aspect="auto", cmap=cmap, vmin=-0.5, vmax=3.5,
                       origin="upper")
        for i, row in enumerate(g):
            for j, v in enumerate(row):
                ax.text(j, i, str(v), ha="center", va="center", fontsize=6, color="white" if v < 4 else "black")
        ax.set_yticks(range(len(g)))
        ax.set_yticklabels([str(y0 + i) for i in range(len(g))], fontsize=7)
        ax.set_xticks(range(len(g[0])))
        ax.set_xticklabels([str(s) for s in (steps or range(len(g[0])))], fontsize=7)
        ax.set_xlabel("iteration (from 1)")
        ax.set_ylabel("layer")
        ax.set_title(title)
    cb = fig.colorbar(im, ax=axes, ticks=[0, 1, 2, 3])
    cb.ax.set_yticklabels(["1", "2", "4", "8"])
    cb.set_label("chunks")
    fig.suptitle(f"Figure 5: chunk count MACT chose per layer and step, {device_label(recs)}", fontsize=10)
    return save(fig, out_dir, stem, source_line(path, recs) + " | " + config_line(rec), tight=False)


def mark_oom(ax, x, y_top, label="OOM"):
    ax.plot([x], [y_top], marker="x", color="tab:red", ms=8, ls="none")
    ax.annotate(label, (x, y_top), textcoords="offset points", xytext=(3, 3), fontsize=7, color="tab:red")


# ---- Memory and time against imbalance ----
def color_of(strategy):
    """A strategy's colour from its label alone: adding another strategy to a figure never
    recolours the ones already there (the paper's methods keep the paper's colours)."""
    if strategy in COLORS:
        return COLORS[strategy]
    palette = plt.get_cmap("tab20").colors
    return palette[int(hashlib.md5(strategy.encode()).hexdigest(), 16) % len(palette)]


def with_drops(recs, strategy):
    """The label, with the dropped share where the strategy drops assignments (capacity): a lower
    memory beside dropless strategies is not the same model."""
    drops = [r.get("dropped_fraction") for r in recs if r["strategy"] == strategy and r.get("dropped_fraction")]
    if not drops:
        return strategy
    return f"{strategy} (drops {100 * min(drops):.0f}-{100 * max(drops):.0f}%)"


def imbalance(path, out_dir):
    recs = load(path)
    strategies = list(dict.fromkeys(r["strategy"] for r in recs))
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4.2))
    top = max((activation(r) or 0) for r in recs) / MIB * 1.1
    for s in strategies:
        pts = sorted((r["overload_factor"], r) for r in recs if r["strategy"] == s)
        xs = [x for x, r in pts if r["status"] == "ok"]
        a1.plot(xs, [activation(r) / MIB for x, r in pts if r["status"] == "ok"], "o-", label=with_drops(recs, s), color=color_of(s))
        a2.plot(xs, [r["step_ms"]["median"] for x, r in pts if r["status"] == "ok"], "o-", label=with_drops(recs, s), color=color_of(s))
        for x, r in pts:
            if r["status"] != "ok":
                mark_oom(a1, x, top)
    a1.set_xlabel("overload factor (s' / balanced share)")
    a1.set_ylabel("activation peak (MiB)")
    a1.set_title("activation memory against imbalance")
    a2.set_xlabel("overload factor (s' / balanced share)")
    a2.set_ylabel("median step time (ms)")
    a2.set_title("step time against imbalance")
    a1.legend(fontsize=7)
    fig.suptitle(f"Memory and time as routing imbalance grows, {device_label(recs)}", fontsize=10)
    return save(fig, out_dir, "imbalance_memory", source_line(path, recs) + " | " + config_line(recs[0]))


def chunks(path, out_dir, stem="chunks_step_time", what="MemFine's chunk count"):
    recs = load(path)
    mem = sorted((r["chunks"], r) for r in recs if r["strategy"].startswith("memfine(chunks=") and r["status"] == "ok")
    refs = {r["strategy"]: r for r in recs if not r["strategy"].startswith("memfine")}
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4.2))
    a1.plot([c for c, _ in mem], [r["step_ms"]["median"] for _, r in mem], "o-", label="memfine")
    a1.fill_between([c for c, _ in mem], [r["step_ms"]["min"] for _, r in mem], [r["step_ms"]["max"] for _, r in mem],
                    alpha=0.2)
    a2.plot([c for c, _ in mem], [activation(r) / MIB for _, r in mem], "o-", label="memfine")
    for name, r in refs.items():
        if r["status"] == "ok":
            a1.axhline(r["step_ms"]["median"], ls="--", lw=1, color=color_of(name), label=name)
            a2.axhline(activation(r) / MIB, ls="--", lw=1, color=color_of(name), label=name)
    for ax, yl, t in ((a1, "median step time (ms), band: min-max", "step time against chunk count"),
                      (a2, "activation peak (MiB)", "activation peak against chunk count")):
        ax.set_xscale("log", base=2)
        ax.set_xticks([c for c, _ in mem])
        ax.set_xticklabels([str(c) for c, _ in mem])
        dress(ax, "chunks", yl, t)
    fig.suptitle(f"{what}, {device_label(recs)}", fontsize=10)
    return save(fig, out_dir, stem, source_line(path, recs) + " | " + config_line(recs[0]))


def dress(ax, xlabel, ylabel, title):
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=7)


def capacity(path, out_dir):
    recs = load(path)
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4.2))
    dropless = next((r for r in of_role(recs, "reference") if r["status"] == "ok"), None)
    for policy in ("probs", "position"):
        pts = []
        for r in recs:
            s = r["strategy"]
            if s.startswith("capacity(") and f"drop_policy={policy}" in s:
                pts.append((r["config"] and float(s.split("capacity_factor=")[1].split(",")[0].rstrip(")")), r))
        pts.sort(key=lambda t: t[0])
        ok = [(f, r) for f, r in pts if r["status"] == "ok"]
        style = {"probs": dict(marker="o", ls="-", ms=8), "position": dict(marker="x", ls="--", ms=8)}[policy]
        a1.plot([f for f, _ in ok], [100 * r["dropped_fraction"] for _, r in ok], label=f"drop policy {policy}", **style)
        a2.plot([f for f, _ in ok], [activation(r) / MIB for _, r in ok], label=f"drop policy {policy}", **style)
    if dropless:
        a2.axhline(activation(dropless) / MIB, ls="--", color="0.4", label=f"dropless ({dropless['strategy']})")
    dress(a1, "capacity factor", "assignments dropped (%)", "dropped share (the policy picks which, not how many)")
    dress(a2, "capacity factor", "activation peak (MiB)", "memory against capacity factor")
    fig.suptitle(f"Capacity capping: what it drops and what it saves, {device_label(recs)}", fontsize=10)
    return save(fig, out_dir, "capacity_dropped", source_line(path, recs) + " | " + config_line(recs[0]))


def budget_of(point):
    """memory.budget=100MiB -> 100.0 (MiB)."""
    text = point.split("memory.budget=")[1].split(",")[0]
    for unit, scale in (("GiB", 1024.0), ("MiB", 1.0), ("KiB", 1 / 1024.0)):
        if text.endswith(unit):
            return float(text[:-len(unit)]) * scale
    return float(text) / MIB


def budget_sweep(path, out_dir):
    """Throughput against the budget, every strategy interleaved at each budget: our ratios to
    full recomputation and to MACT at the same budget, the paper's Figure 4 (Model II) beside them."""
    recs = load(path)
    pts = sorted(by_point(recs).items(), key=lambda kv: budget_of(kv[0]))
    names = list(dict.fromkeys(r["strategy"] for r in recs))
    mact = "memfine(chunks=auto)"
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(13, 4.6))
    rows = []
    for name in names:
        xs, ys, oom = [], [], []
        for point, rs in pts:
            r = next((r for r in rs if r["strategy"] == name), None)
            if r is None:
                continue
            if r["status"] == "ok":
                xs.append(budget_of(point))
                ys.append(r["tokens_per_s"])
            else:
                oom.append(budget_of(point))
        style = dict(marker="o", ls="-", color=color_of(name), label=name)
        a1.plot(xs, ys, **style)
        for x in oom:  # one row of marks per strategy, so they do not hide each other
            a1.plot([x], [-120.0 * (names.index(name) + 1)], marker="x", color=color_of(name), ms=7, ls="none")
    for point, rs in pts:
        full = next((r for r in of_role(rs, "baseline") if r["status"] == "ok"), None)
        m = next((r for r in rs if r["strategy"] == mact and r["status"] == "ok"), None)
        for r in rs:
            ok = r["status"] == "ok"
            rows.append([budget_of(point), r["strategy"], r["status"], chunk_range(r.get("chunks")),
                         f"{activation(r) / MIB:.1f}" if ok else "-",
                         f"{r['step_ms']['median']:.2f}" if ok else "-",
                         f"{full['step_ms']['median'] / r['step_ms']['median']:.3f}x" if ok and full else "-",
                         f"{m['step_ms']['median'] / r['step_ms']['median']:.3f}x" if ok and m else "-"])
    # Right: speed against full recomputation where it fits, and against MACT where it does not.
    for name in names:
        xs, ys = [], []
        for point, rs in pts:
            full = next((r for r in of_role(rs, "baseline") if r["status"] == "ok"), None)
            r = next((r for r in rs if r["strategy"] == name and r["status"] == "ok"), None)
            if full and r:
                xs.append(budget_of(point))
                ys.append(full["step_ms"]["median"] / r["step_ms"]["median"])
        if xs:
            a2.plot(xs, ys, marker="o", color=color_of(name), label=name)
    paper = {r["method"]: r for r in read_csv("figure4_tgs.csv") if r["model"] == "II"}
    base = float(paper["1_full_recompute"]["avg_tokens_per_gpu_per_s"])
    for method, ls in (("3_mact_bins_1_2_4_8", "--"), ("2_fixed_chunks_8", ":")):
        v = float(paper[method]["avg_tokens_per_gpu_per_s"]) / base
        a2.axhline(v, ls=ls, color="0.3", lw=1, label=f"paper, Model II: {method[2:]} {v:.4f}x")
    a2.axhline(1.0, color="0.6", lw=0.8)
    dress(a1, "memory budget (MiB)", "tokens per second (x: out of memory)", "throughput against the budget")
    dress(a2, "memory budget (MiB)", "full recomputation's step time / this one's",
          "speed against full recomputation, where it fits")
    fig.suptitle(f"Every strategy at every budget, {device_label(recs)}", fontsize=10)
    paths = save(fig, out_dir, "budget_sweep", source_line(path, recs) + " | " + config_line(recs[0]))
    notes = ["budget in MiB (static memory included); activation peak in MiB; step = median ms over the timed steps; "
             "vs full, vs MACT = their step time / this one's at the same budget (- where they ran out of memory).",
             "chunks: per layer, min-max over steps and layers; 0 = a layer stored whole (no recomputation).",
             "The paper (Figure 4, Model II): MACT 1.0442x full recomputation, a fixed 8 chunks 0.9460x.",
             source_line(path, recs)]
    return paths + write_table(out_dir, "budget_sweep_table", "Throughput against the memory budget",
                               ["budget MiB", "strategy", "status", "chunks", "act. MiB", "step ms", "vs full", "vs MACT"],
                               rows, notes)


def of_role(records, role):
    """The records of the strategy registered with `role` ("baseline": the paper's, the ratios'
    denominator; "reference": the plain computation), as the records say."""
    return [r for r in records if r.get("role") == role]


def model_error(path, out_dir):
    everything = load(path)
    recs = [r for r in everything if r["status"] == "ok" and r.get("predicted_activation_bytes")]
    # Strategies the model does not cover are listed, not dropped: with the reason the records give.
    unpredicted = {}
    for r in everything:
        if r["status"] == "ok" and not r.get("predicted_activation_bytes") and r["strategy"] not in {x["strategy"] for x in recs}:
            unpredicted.setdefault(r["strategy"], [0, r.get("unpredicted_why") or "no prediction recorded"])[0] += 1
    by_strategy = {}
    for r in recs:
        err = (r["predicted_activation_bytes"] - activation(r)) / activation(r)
        by_strategy.setdefault(r["strategy"], []).append((err, r["point"]))
    rows = []
    for s, errs in by_strategy.items():
        worst = max(errs, key=lambda e: abs(e[0]))
        mean_abs = sum(abs(e) for e, _ in errs) / len(errs)
        rows.append([s, len(errs), f"{100 * mean_abs:.2f}%", f"{100 * min(e for e, _ in errs):+.2f}%",
                     f"{100 * max(e for e, _ in errs):+.2f}%", f"{100 * worst[0]:+.2f}% at {worst[1]}"])
    for s, (n, why) in unpredicted.items():
        rows.append([s, n, "not predicted: " + why, "-", "-", "-"])
    all_errs = [e for errs in by_strategy.values() for e, _ in errs]
    within = sum(abs(e) <= 0.05 for e in all_errs)
    worst = f"{100 * max(all_errs, key=abs):+.2f}%" if all_errs else "-"
    notes = [f"{within} of {len(all_errs)} points within 5%; worst {worst}.",
             "error = (predicted - measured) / measured activation peak; the model is core/predict/memory_model.cpp.",
             source_line(path, recs)]
    return write_table(out_dir, "model_error_table", "Implementation memory model: predicted against measured activation peak",
                       ["strategy", "points", "mean |error|", "min", "max", "worst"], rows, notes)


def kernels(path, out_dir, name="kernels_table", title="Fused dispatch/combine kernels against ATen"):
    """Fused dispatch/combine against ATen's, per point (without the kernels key) and strategy; of
    real ranks (launch), the hottest one (largest activation peak) for each."""
    recs = [r for r in load(path) if r["status"] == "ok"]
    pairs = {}
    for r in recs:
        kern = r["config"]["kernels"]
        rest = ",".join(p for p in r["point"].split(",") if not p.startswith("kernels=")) or "base"
        k = pairs.setdefault((rest, r["strategy"]), {})
        if kern not in k or activation(r) > activation(k[kern]):
            k[kern] = r
    rows, fused_errs = [], []
    for (point, strategy), k in pairs.items():
        a, f = k.get("aten"), k.get("fused")
        if not a or not f:
            continue
        err = lambda r: (r["predicted_activation_bytes"] - activation(r)) / activation(r) if r.get("predicted_activation_bytes") else None
        ef = err(f)
        if ef is not None:
            fused_errs.append(ef)
        rows.append([point, strategy, f"{activation(a) / MIB:.1f}", f"{activation(f) / MIB:.1f}",
                     pct(activation(f), activation(a)), f"{a['step_ms']['median']:.1f}", f"{f['step_ms']['median']:.1f}",
                     f"{a['step_ms']['median'] / f['step_ms']['median']:.2f}x",
                     "-" if ef is None else f"{100 * ef:+.1f}%"])
    notes = ["activation = measured activation peak (MiB); speed-up = ATen's median step time / fused's.",
             "The two kernels are different sweep points, so their step times are not interleaved: read small speed-ups as noise.",
             "model error = (predicted - measured) / measured for the fused run; the implementation model accounts ATen's ops"
             + (f" (fused: {100 * min(fused_errs):+.1f}% .. {100 * max(fused_errs):+.1f}%)." if fused_errs else "."),
             source_line(path, recs)]
    if any(r.get("world_size", 1) > 1 for r in recs):
        notes.insert(0, f"{recs[0]['world_size']} real ranks ({recs[0].get('backend', '?')}): each row is the hottest rank "
                        "(largest activation peak) of that kernel's run.")
    return write_table(out_dir, name, title,
                       ["point", "strategy", "ATen act. MiB", "fused act. MiB", "change", "ATen ms", "fused ms", "speed-up",
                        "model error (fused)"], rows, notes)


def kernel_ops(path, out_dir):
    """dispatch -> combine alone (memfine_bench's BM_DispatchCombine): ATen's ops against the fused
    ones per shape, medians over repetitions."""
    try:
        bench = json.load(open(path))
    except ValueError as e:
        raise ResultsError(f"{path}: not Google Benchmark JSON ({e})")
    runs = {}
    for b in bench.get("benchmarks", []):
        name = b.get("run_name", b.get("name", ""))
        if not name.startswith("BM_DispatchCombine/"):
            continue
        agg = b.get("aggregate_name", "median" if b.get("run_type") != "aggregate" else None)
        if agg not in ("median", "cv"):
            continue
        parts = name.split("/")  # BM_DispatchCombine / point / kernels / manual_time
        unit = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[b.get("time_unit", "ns")]
        entry = runs.setdefault(parts[1], {}).setdefault(parts[2], {"label": b.get("label", ""), "rows": b.get("rows")})
        entry[agg] = b["real_time"] * (unit if agg == "median" else 1.0)
    rows = []
    for point, k in runs.items():
        a, f = k.get("aten"), k.get("fused")
        if not a or not f or "median" not in a or "median" not in f:
            continue
        cv = lambda e: f" (cv {100 * e['cv']:.1f}%)" if "cv" in e else ""
        rows.append([point, f"{a['rows']:.0f}" if a.get("rows") else "-", f"{a['median']:.3f}{cv(a)}",
                     f"{f['median']:.3f}{cv(f)}", f"{a['median'] / f['median']:.2f}x"])
    if not rows:
        raise ResultsError(f"{path}: no BM_DispatchCombine pairs (aten and fused)")
    ctx = bench.get("context", {})
    label = next(iter(next(iter(runs.values())).values()))["label"]
    notes = ["dispatch -> combine, forward and backward, on one layer's routing (the dispatched rows stand in for the "
             "experts' outputs); ms = median over repetitions, the timer waits for the device; speed-up = ATen / fused.",
             f"device, dtype: {label.rsplit(',', 1)[0]}. On a CPU the fused ops are the host reference of the CUDA kernels "
             f"(one thread, rows in order) while ATen uses {ctx.get('libtorch_threads', '?')} threads.",
             f"Source: {os.path.relpath(path)} ({ctx.get('host_name', '?')}, {ctx.get('num_cpus', '?')} CPUs, LibTorch "
             f"{ctx.get('libtorch', '?')}, {ctx.get('date', '?')}): build/memfine_bench --moe_config={ctx.get('moe_config', '?')} "
             "--benchmark_filter=DispatchCombine --benchmark_repetitions=5"]
    return write_table(out_dir, "kernel_ops_table", "dispatch and combine alone: fused kernels against ATen",
                       ["shape", "s'", "ATen ms", "fused ms", "speed-up"], rows, notes)


# Dense bf16 tensor-core peaks (no sparsity) from NVIDIA's datasheets, by device name; the first
# name contained in the device's wins. A reference to compare achieved rates against, not a result.
BF16_PEAK_TFLOPS = [("H100 PCIe", 756.0), ("H100 NVL", 835.0), ("H100", 989.4), ("H200 NVL", 835.0), ("H200", 989.4),
                    ("A100", 312.0)]


def bf16_peak(records):
    name = (next((r.get("env") for r in records if r.get("env")), {}) or {}).get("device_name", "")
    return next(((k, v) for k, v in BF16_PEAK_TFLOPS if k in name), (None, None))


def chunk_range(chunks):
    """A chunk count, or min-max over steps and layers where MACT's grid varies (as the run's table)."""
    if chunks is None:
        return "-"
    flat, todo = [], [chunks]
    while todo:
        c = todo.pop()
        if isinstance(c, list):
            todo.extend(c)
        else:
            flat.append(c)
    if not flat:
        return "-"
    lo, hi = min(flat), max(flat)
    return str(lo) if lo == hi else f"{lo}-{hi}"


def strategies(path, out_dir, stem, title):
    """Every strategy's activation peak, step time and achieved rate, per point, against the
    baseline strategy (full recomputation, as its registration says) at the same point; with a
    bar chart of both."""
    recs = load(path)
    peak_name, peak = bf16_peak(recs)
    unit, div = ("GiB", 2.0 ** 30) if max((activation(r) or 0) for r in recs) > 2 ** 30 else ("MiB", MIB)
    rows = []
    for point, rs in by_point(recs).items():
        full = next((r for r in of_role(rs, "baseline") if r["status"] == "ok"), None)
        for r in rs:
            ok = r["status"] == "ok"
            tf = r.get("tflops") if ok else None
            row = [point, r["strategy"], r["status"], r.get("tokens_received", "-"),
                   chunk_range(r.get("chunks")),
                   f"{100 * r['dropped_fraction']:.1f}%" if r.get("dropped_fraction") is not None else "-",
                   f"{activation(r) / div:.2f}" if ok else "-",
                   f"{r['predicted_activation_bytes'] / div:.2f}" if r.get("predicted_activation_bytes") else "-",
                   f"{r['static_bytes'] / div:.2f}" if r.get("static_bytes") else "-"]
            row.append(f"{r['step_ms']['median']:.1f} ({r['step_ms']['min']:.1f}-{r['step_ms']['max']:.1f})" if ok else "-")
            row.append(pct(activation(r), activation(full)) if ok and full else "-")
            row.append(f"{full['step_ms']['median'] / r['step_ms']['median']:.2f}x" if ok and full else "-")
            row.append(f"{tf:.3g}" if tf else "-")
            row.append(f"{100 * tf / peak:.1f}%" if tf and peak else "-")
            rows.append(row)
    notes = [f"activation, predicted (implementation model) and static in {unit}; step = median (min-max) ms over the timed steps; "
             "vs full = activation change and speed (full recomputation's step time / this one's) at the same point.",
             "s' = rows the hottest rank's experts receive per layer (the paper's s'); out-of-memory points are results (status oom).",
             ("TFLOP/s = the step's model FLOPs (core/meter/flops.cpp, recomputation not counted) / median step time; "
              + (f"% peak against the {peak_name}'s dense bf16 peak of {peak:.0f} TFLOP/s (NVIDIA datasheet)."
                 if peak else "no bf16 peak known for this device.")),
             device_label(recs) + "; " + config_line(recs[0]),
             source_line(path, recs)]
    out = write_table(out_dir, stem + "_table", title,
                      ["point", "strategy", "status", "s'", "chunks", "dropped", f"act. {unit}", f"pred. {unit}", f"static {unit}",
                       "step ms", "act. vs full", "speed vs full", "TFLOP/s", "% bf16 peak"], rows, notes)
    points = list(by_point(recs).items())
    fig, axes = plt.subplots(2, len(points), figsize=(4.5 * len(points) + 1, 6.5), squeeze=False)
    for i, (point, rs) in enumerate(points):
        names = [r["strategy"] for r in rs]
        acts = [activation(r) / div if r["status"] == "ok" else 0 for r in rs]
        steps = [r["step_ms"]["median"] if r["status"] == "ok" else 0 for r in rs]
        for ax, vals, label in ((axes[0][i], acts, f"activation peak ({unit})"), (axes[1][i], steps, "median step (ms)")):
            ax.bar(range(len(rs)), vals, color=["tab:gray" if r["status"] != "ok" else "tab:blue" for r in rs])
            for x, r in enumerate(rs):
                if r["status"] != "ok":
                    mark_oom(ax, x, 0, r["status"].upper())
            ax.set_xticks(range(len(rs)))
            ax.set_xticklabels(names if ax is axes[1][i] else [], rotation=30, ha="right", fontsize=7)
            ax.set_ylabel(label)
        axes[0][i].set_title(point, fontsize=9)
    fig.suptitle(f"{title}, {device_label(recs)}", fontsize=10)
    return out + save(fig, out_dir, stem, source_line(path, recs) + " | " + config_line(recs[0]))


def field_lines(results_dir):
    """REPORT.md's section on the memory savers of the field (Megatron's moe_act, MoEBlaze-style
    buffer-free experts) against MemFine's chunks and their combinations, from experiments/baselines*.yaml."""
    rows, sources, blaze_speed = [], [], []
    for name in ("baselines", "baselines_h2048"):
        path = os.path.join(results_dir, name, "results.jsonl")
        if not os.path.exists(path):
            continue
        recs = load(path)
        sources.append(source_line(path, recs))
        for point, rs in by_point(recs).items():
            ok = [r for r in rs if r["status"] == "ok"]
            ref = next((r for r in ok if r["strategy"] == "no_recompute"), None)
            if not ref:
                continue
            dropless = [r for r in ok if r.get("dropped_fraction") is None]
            ms = lambda r: r["step_ms"]["median"]
            lower = lambda r: activation(ref) / activation(r)
            speed = lambda r: ms(ref) / ms(r)
            m = ref["config"]["model"]
            adam = 2 * m["hidden"] * m["ffn_hidden"] * {"float64": 8, "bfloat16": 2}.get(ref["config"].get("dtype"), 4)
            floor = lambda r: " (Adam's step)" if abs(activation(r) - adam) <= 0.01 * adam else ""
            cell = lambda r: f"{r['strategy']}: {activation(r) / MIB:.1f} MiB, {lower(r):.2f}x{floor(r)}, {speed(r):.2f}x" if r else "-"
            cheap = [r for r in dropless if speed(r) >= 0.9]
            blaze = next((r for r in ok if r["strategy"] == "moeblaze"), None)
            if blaze:
                blaze_speed.append(speed(blaze))
            rows.append(f"| {name} | {point} | {activation(ref) / MIB:.1f} | {cell(min(dropless, key=activation))} | "
                        f"{cell(min(cheap, key=activation) if cheap else None)} | {cell(blaze)} | "
                        f"{cell(next((r for r in ok if r['strategy'] == 'moe_act_recompute'), None))} |")
    if not rows:
        return []
    return [
        "## The field's memory savers against MemFine's chunks", "",
        "Peak activation memory and median step time of one MoE layer's training step (forward, backward, optimizer), "
        "every strategy interleaved at each point (`paper_figures/baselines_table.md`, `baselines_h2048_table.md`). "
        "Each cell: activation peak, how many times lower than `no_recompute`'s, and speed against it (its step time / "
        "this one's). `no_recompute` is our closest to a MegaBlocks-like baseline, MoEBlaze's own reference.", "",
        "| experiment | point | no_recompute MiB | lowest dropless | lowest dropless at >= 0.9x speed | moeblaze | moe_act_recompute |",
        "|---|---|---|---|---|---|---|"] + rows + [""] + sources + [
        "",
        "MoEBlaze (arXiv 2601.05296) reports, for one SwiGLU MoE layer on one H100 against MegaBlocks, about 4x lower "
        "activation memory and 2-6.2x speed. Why ours differ:",
        "- Our peak is the whole step's: the layer's RMSNorm, router, residual and the loss stay (every strategy keeps "
        "them), so the ratio on the MoE part alone is larger than the whole step's.",
        "- Our `no_recompute` is not MegaBlocks: it gathers each expert's rows into a buffer and loops over experts "
        "with dense GEMMs (no block-sparse grouped GEMM, no padding to blocks), and keeps what autograd saves "
        "(input rows, z, SiLU(a), the product, outputs and weighted rows). MegaBlocks keeps similar buffers; it "
        "also pads to blocks, which we do not.",
        "- Speed: on a CPU the GEMMs dominate and are the same in every strategy; MoEBlaze's speed-up comes from GPU "
        "memory traffic (no permuted copies, fused epilogues), which a 2-core CPU barely sees. "
        + (f"Here `moeblaze` ran at {min(blaze_speed):.2f}x-{max(blaze_speed):.2f}x no_recompute's speed." if blaze_speed else ""),
        "- Our `moeblaze` reads rows through their index into a block (256 rows by default) before each GEMM, and "
        "works through an expert's rows block by block in forward and backward, as a fused kernel's tiles do: the only "
        "whole-expert tensor it keeps is z. Its weight gradients go straight into `.grad` (as a fused kernel's "
        "weight-gradient GEMM, Megatron's gradient_accumulation_fusion); the other strategies hold one weight "
        "gradient of up to [h, 2g] at a time before autograd adds it, part of their peak.",
        "- \"(Adam's step)\": the step's peak is then the optimizer's temporary for the largest weight (2 h g elements), "
        "not activations: the activation saving is larger than the ratio shows.",
        "- Which wins where: the two \"lowest\" columns. Chunks and buffer-free experts compose: MemFine's chunks with "
        "buffer-free experts inside them keep the least wherever chunking pays, at chunking's time cost; where no time "
        "may be lost, the strategy in the \"0.9x\" column.",
        "",
    ]


def pytorch_reference_lines(results_dir):
    """REPORT.md's table of our baselines against the same model in eager PyTorch."""
    folder = os.path.join(results_dir, "pytorch_reference")
    files = sorted(glob.glob(os.path.join(folder, "*.json"))) if os.path.isdir(folder) else []
    if not files:
        return []
    lines = ["## Our baselines against PyTorch's checkpoint",
             "The same model in eager PyTorch (`tests/pytorch_reference.py`: a loop over experts with index_select / "
             "index_add_, `torch.utils.checkpoint` per decoder layer, `torch.optim.Adam`), fed our weights, data and "
             "routing (`memfine export`); its peak measured by PyTorch's profiler, ours by our meter. Activation peak "
             "in MiB; `scripts/compare-pytorch experiments/<name>.yaml` prints each (a ctest checks the first two).", "",
             "| experiment | no_recompute: ours / PyTorch | full_recompute / checkpoint | PyTorch reentrant | "
             "memfine (chunks: peak) | largest loss difference |",
             "|---|---|---|---|---|---|"]
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
        lines.append(f"| {j['config']['name']} | {m(no['ours_peak'])} / {m(no['pytorch_peak'])} | "
                     f"{m(full['ours_peak'])} / {m(full['pytorch_peak'])} ({full['ours_peak'] / full['pytorch_peak']:.3f}x) | "
                     f"{m(ref['checkpoint_reentrant']['peak_activation_bytes'])} | {mf} | {loss:.1e} |")
    lines += ["", "Full recomputation here keeps a layer's input and, in its backward, accumulates each weight gradient "
              "into its .grad as it is produced, lets go of the recomputed output and hands the incoming gradient on "
              "as its only owner (`core/strategy/recompute.h`); every ratio against full recomputation in this report is "
              "against that baseline. Sources: `" + os.path.relpath(folder) + "/*.json`.", ""]
    return lines


def chunk_cost_lines(results_dir):
    """REPORT.md's section on what a chunk costs (chunk_sweep, chunk_balanced and the cost model)."""
    def ratios(name):
        path = os.path.join(results_dir, name, "results.jsonl")
        if not os.path.exists(path):
            return None
        recs = [r for r in load(path) if r["status"] == "ok"]
        full = next((r for r in recs if r["strategy"] == "full_recompute"), None)
        if not full:
            return None
        mem = sorted((r["chunks"], r["step_ms"]["median"]) for r in recs if r["strategy"].startswith("memfine(chunks="))
        return ", ".join(f"{c}: {ms / full['step_ms']['median']:.3f}x" for c, ms in mem if c > 1)
    sweep, balanced = ratios("chunk_sweep"), ratios("chunk_balanced")
    cm_path = os.path.join(results_dir, "cost_model.json")
    cm = json.load(open(cm_path)) if os.path.exists(cm_path) else None
    if not (sweep or balanced):
        return []
    lines = [
        "## What a chunk costs",
        "Step time of MemFine's chunks against full recomputation, interleaved in one run "
        "(the paper's fixed 8 chunks: 1.057x, i.e. -5.40% throughput on Model II):",
        f"- `chunk_sweep` (zipf, ep 8, 4 local experts; `chunks_step_time.png`): {sweep or '-'};",
        f"- `chunk_balanced` (balanced routing, ep 1, 8 experts of ~64 rows; `chunks_balanced_step_time.png`): {balanced or '-'}.",
        "Every chunk runs every local expert's six matrix products (forward, the forward again in backward, two for "
        "the input gradient, two for the weights'), each of which streams the expert's whole weights however few rows "
        "the chunk gives it. On this CPU that is a fixed cost per expert and chunk that no bookkeeping removes: ",
    ]
    if cm:
        fb = dict((int(r), ms) for r, ms in cm["expert_fwd_bwd_ms"])
        small, big = min(fb), 4096 if 4096 in fb else max(fb)
        lines[-1] += (f"one expert's forward + backward takes {fb[small]:.3f} ms on {small} rows against "
                      f"{fb[big] / big * small:.3f} ms for {small} rows' share of {big} "
                      f"({fb[small] / (fb[big] / big * small):.0f}x). The cost model (`scripts/fit-cost-model`, "
                      "`cost_model_table.md`) prices a chunk as each expert's share of its own rows through that "
                      f"measured curve plus {cm['per_chunk_ms']:.3f} ms of dispatch, combine and autograd calls.")
    lines += [
        "The cost falls with each expert's share of a chunk and with fewer local experts. A layer's routing indices "
        "are made once for all its chunks and uploaded to the device in one copy (`dispatch_indices`), so on a GPU no "
        "chunk waits for an upload; `gpu_memfine` (`results/h100/`) measures chunks there, and its committed run "
        "predates that change.",
        "",
    ]
    return lines


def budget_lines(results_dir):
    """REPORT.md's section on throughput against the budget (experiments/budget_sweep.yaml)."""
    path = os.path.join(results_dir, "budget_sweep", "results.jsonl")
    if not os.path.exists(path):
        return []
    recs = load(path)
    planner, mact = "memfine(chunks=auto,objective=time)", "memfine(chunks=auto)"
    fits, tight, eight = [], [], []
    for point, rs in sorted(by_point(recs).items(), key=lambda kv: budget_of(kv[0])):
        get = lambda name: next((r for r in rs if r["strategy"] == name and r["status"] == "ok"), None)
        full, p, m = next((r for r in of_role(rs, "baseline") if r["status"] == "ok"), None), get(planner), get(mact)
        if not p:
            continue
        e8 = get("memfine(chunks=8)")
        if full and e8:
            eight.append(full["step_ms"]["median"] / e8["step_ms"]["median"])
        if full:
            fits.append(f"{budget_of(point):.0f} MiB: {full['step_ms']['median'] / p['step_ms']['median']:.3f}x")
        elif m:
            tight.append(f"{budget_of(point):.0f} MiB: {m['step_ms']['median'] / p['step_ms']['median']:.3f}x MACT's")
    return [
        "## Throughput at every budget: a planner that mixes storing, recomputing and chunking",
        "`memfine` with `chunks: auto, objective: time` plans each step as a knapsack over layers: each layer is "
        "stored whole or recomputed with one of MACT's bins, and the plan of least predicted time (the cost model, "
        "`scripts/fit-cost-model`) whose predicted peak (the implementation model, within 5% on mixed plans too) fits "
        "the budget is taken. Stored layers' activations wait for their backward; the last layers' backward comes first, "
        "so storing them costs little room. `experiments/budget_sweep.yaml`, every strategy interleaved at each budget "
        "(`budget_sweep.png`, `budget_sweep_table.md`):",
        "- against full recomputation where it fits: " + (", ".join(fits) or "-") + " (the paper: MACT 1.0442x on Model II);",
        "- where full recomputation runs out of memory, against MACT: " + (", ".join(tight) or "-") + ";",
        "- MACT itself (Eq. 9: the smallest bin that fits) picks one chunk wherever full recomputation fits and runs at "
        "its speed; a fixed 8 chunks runs at " + (f"{min(eight):.2f}-{max(eight):.2f}x" if eight else "-") +
        " of full recomputation (the paper: 0.946x).",
        "The layers are small (hidden 128) for 2 cores, and step times vary by several percent between runs: one "
        "budget's ratio is one run's.",
        "",
    ]


# Switch Transformer's Table 1 (Fedus et al. 2021): negative log perplexity at 100k steps, 128
# experts, by routing and capacity factor.
SWITCH_TABLE1 = {("top-1", 2.0): -1.554, ("top-1", 1.25): -1.553, ("top-1", 1.0): -1.561,
                 ("top-2", 2.0): -1.547, ("top-2", 1.25): -1.559, ("top-2", 1.0): -1.572}
# Two-sided 95% Student t quantiles by degrees of freedom (paired differences over seeds).
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}


def overloads(rec, stats_ep):
    """A training step's overload factor per layer: s' of the hottest of `stats_ep` ranks over the
    mean rank's share of the layer's assignments."""
    return [s * stats_ep / max(1, sum(n)) for s, n in zip(rec["tokens_received_per_layer"], rec["expert_tokens"])]


def train_runs(path):
    """`memfine train` records -> {strategy: {seed: [records by step]}} and the step-0 config."""
    recs = load(path, required=("experiment", "point", "strategy", "status", "step"))
    runs = {}
    for r in recs:
        runs.setdefault(r["strategy"], {}).setdefault(r["seed"], []).append(r)
    for by_seed in runs.values():
        for seed in by_seed:
            by_seed[seed].sort(key=lambda r: r["step"])
    first = next(r for r in recs if "config" in r)
    return recs, runs, first


def quality_stats(path):
    """Per strategy: final evaluation loss per seed, and per-seed differences against the dropless
    reference (the same seed: the same initial weights and data)."""
    recs, runs, first = train_runs(path)
    steps = first["config"]["train"]["steps"]
    final = {s: {seed: rs[-1].get("eval_loss") for seed, rs in by.items()
                 if len(rs) == steps and rs[-1]["status"] == "ok"} for s, by in runs.items()}
    ref = next(r["strategy"] for r in recs if r.get("role") == "reference")  # in each run's first record
    rows = {}
    for s, per_seed in final.items():
        vals = list(per_seed.values())
        if not vals:
            rows[s] = None
            continue
        diffs = [per_seed[k] - final[ref][k] for k in per_seed if k in final[ref]]
        n = len(diffs)
        mean_d = sum(diffs) / n if n else 0.0
        sd_d = (sum((d - mean_d) ** 2 for d in diffs) / (n - 1)) ** 0.5 if n > 1 else 0.0
        half = T975.get(n - 1, 2.0) * sd_d / n ** 0.5 if n > 1 else float("inf")
        mean = sum(vals) / len(vals)
        sd = (sum((v - mean) ** 2 for v in vals) / (len(vals) - 1)) ** 0.5 if len(vals) > 1 else 0.0
        rows[s] = dict(mean=mean, sd=sd, n=len(vals), diff=mean_d, half=half, significant=abs(mean_d) > half and n > 1)
    return recs, runs, first, rows, ref


def capped(runs, strategy):
    """Whether a strategy drops assignments (capacity capping: its records count what it dropped)."""
    return any("dropped_fraction" in r for rs in runs[strategy].values() for r in rs)


def drop_share(rs, at):
    return rs[at].get("dropped_fraction")


def quality(path, out_dir):
    recs, runs, first, rows, ref = quality_stats(path)
    src = source_line(path, [r for r in recs if "env" in r])  # step 0 of each run carries the environment
    cfg = first["config"]
    m, t = cfg["model"], cfg["train"]
    tokens = m["seq"] * m["micro_batch"]
    cap = f"{src}. Model: {m['layers']} layers, hidden {m['hidden']}, {m['experts']} experts top-{m['topk']}, " \
          f"byte vocabulary, {t['steps']} steps x {tokens} tokens, seeds {sorted({r['seed'] for r in recs})}."
    out = []
    # Evaluation loss against tokens seen: mean over seeds, band from the lowest to the highest seed.
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for s, by in sorted(runs.items()):
        curves = [[(r["step"] + 1) * tokens, r["eval_loss"]] for rs in by.values() for r in rs if r.get("eval_loss") is not None]
        xs = sorted({x for x, _ in curves})
        ys = [[y for x2, y in curves if x2 == x] for x in xs]
        mean = [sum(v) / len(v) for v in ys]
        style = "-" if not capped(runs, s) else ("--" if "position" in s else ":")
        ax.plot(xs, mean, style, label=s, lw=1.3)
        ax.fill_between(xs, [min(v) for v in ys], [max(v) for v in ys], alpha=0.12)
    dress(ax, "training tokens", "held-out loss (nats per byte)", "Held-out loss over training (mean; band: seeds' range)")
    ax.legend(fontsize=6)
    out += save(fig, out_dir, "quality_eval_loss", cap)
    # Dropped share per step (capacity capping), mean over seeds.
    fig, ax = plt.subplots(figsize=(7, 4))
    for s, by in sorted(runs.items()):
        if not capped(runs, s):
            continue
        n = min(len(rs) for rs in by.values())
        ys = [sum(drop_share(rs, i) or 0 for rs in by.values()) / len(by) for i in range(n)]
        ax.plot(range(n), [100 * y for y in ys], "--" if "position" in s else "-", label=s, lw=1.2)
    dress(ax, "step", "assignments dropped (%)", "Capacity capping's dropped share over training (mean over seeds)")
    ax.legend(fontsize=6)
    out += save(fig, out_dir, "quality_dropped", cap)
    # Overload factor per layer over training (the dropless run): our measured Figure 2.
    fig, ax = plt.subplots(figsize=(7, 4))
    by = runs[ref]
    n = min(len(rs) for rs in by.values())
    for layer in range(m["layers"]):
        ys = [sum(overloads(rs[i], t["stats_ep"])[layer] for rs in by.values()) / len(by) for i in range(n)]
        ax.plot(range(n), ys, label=f"layer {layer}", lw=1.1)
    ax.axhline(1.0, color="0.6", lw=0.8)
    dress(ax, "step", f"overload factor (hottest of {t['stats_ep']} ranks / mean)",
          f"Learned routing's imbalance over training ({ref}, mean over seeds)")
    ax.legend(fontsize=7)
    out += save(fig, out_dir, "quality_overload", cap)
    # Switch Table 1's convention: negative log perplexity at the last step.
    topk = f"top-{m['topk']}"
    table = []
    for s, r in sorted(rows.items(), key=lambda kv: (capped(runs, kv[0]), kv[0] != ref, kv[0])):
        by = runs[s]
        cf = None
        if capped(runs, s) and "capacity_factor=" in s:
            cf = float(s.split("capacity_factor=")[1].split(",")[0].rstrip(")"))
        drops = [drop_share(rs, 0) for rs in by.values()], [drop_share(rs, -1) for rs in by.values()]
        drop_txt = "-" if drops[0][0] is None else \
            f"{100 * sum(drops[0]) / len(drops[0]):.1f}% -> {100 * sum(drops[1]) / len(drops[1]):.1f}%"
        switch = SWITCH_TABLE1.get((topk, cf)) if cf else None
        if r is None:
            table.append([s, "did not finish", "", "", "", drop_txt, switch if switch is not None else "-"])
            continue
        table.append([s, f"{r['mean']:.4f} +- {r['sd']:.4f}", f"{-r['mean']:.4f}",
                      "-" if s == ref else f"{r['diff']:+.4f} +- {r['half']:.4f}",
                      "-" if s == ref else ("yes" if r["significant"] else "no"), drop_txt,
                      f"{switch:.3f}" if switch is not None else "-"])
    notes = [f"Held-out loss at step {t['steps']} in nats per byte (mean +- standard deviation over {len(runs[ref])} seeds); "
             "negative log perplexity is its negative, Switch Transformer's Table 1 convention (theirs: per token of a "
             f"32k vocabulary, 100k steps, 128 experts, {topk}: not comparable in level, only in the ordering).",
             f"Difference: against {ref} at the same seed (same weights and data), mean +- the 95% interval over seeds "
             "(Student t); 'exceeds' when the interval excludes 0.",
             "Dropped share: capacity capping's assignments dropped at the first and the last step (mean over seeds).",
             f"Regenerate: build/memfine train experiments/quality.yaml, then scripts/python scripts/figures.py. {src}"]
    out += write_table(out_dir, "quality_table", "Capacity capping's cost in model quality (Switch Table 1 convention)",
                       ["strategy", "held-out loss", "neg. log perplexity", "difference vs dropless", "exceeds seed spread",
                        "dropped share (first -> last step)", f"Switch {topk}"], table, notes)
    return out


def drift_line(runs, ref, rows):
    """How far the dropless strategies' runs are apart: rounding at first, then learned routing's
    near-ties flip and the runs become different samples of one training."""
    dropless = [s for s in runs if not capped(runs, s) and s != ref]
    step_gap = max((abs(a["loss"] - b["loss"]) for s in dropless for seed, rs in runs[s].items()
                    for a, b in zip(rs, runs[ref].get(seed, [])) if a["status"] == b["status"] == "ok"), default=0.0)
    end_gap = max((abs(rows[s]["diff"]) for s in dropless if rows.get(s)), default=0.0)
    return (f"- The dropless strategies ({', '.join([ref] + dropless)}) compute the same model but sum in other orders: "
            f"their runs start equal to rounding, then near-tied routing decisions flip and they drift apart, up to "
            f"{step_gap:.3f} nats on a step's training loss; their final held-out losses differ by at most {end_gap:.4f} "
            "on average over seeds. (tests/test_train.cpp holds a 40-step run to 1e-3 nats per step.)")


def trace_replay_lines(results_dir):
    """The recorded routing replayed at another size (experiments/trace_replay.yaml)."""
    path = os.path.join(results_dir, "trace_replay", "results.jsonl")
    if not os.path.exists(path):
        return []
    recs = load(path)
    mact = next((r for r in recs if r["strategy"] == "memfine(chunks=auto)" and r["status"] == "ok"), None)
    full = next((r for r in recs if r["strategy"] == "full_recompute"), None)
    if mact is None or not mact.get("tokens_received_per_step"):
        return []
    m = mact["config"]["model"]
    share = m["seq"] * m.get("micro_batch", 1) * m["topk"]
    per_step = mact["tokens_received_per_step"]
    top = max(max(row) for row in per_step)
    hot = [i + 1 for i, row in enumerate(mact["chunks"]) if max(row) > 1]
    return [f"- Replayed at {mact['ep']} ranks of {m['seq']} tokens (`experiments/trace_replay.yaml`, the routing's first "
            f"{len(per_step)} steps), the emulated rank receives up to {top / share:.1f}x its balanced share in one layer; "
            f"full recomputation is {full['status'] if full else 'n/a'} under the budget, and MACT chooses "
            f"{max(max(r) for r in mact['chunks'])} chunks where the routing is hot"
            + (f" (iterations {hot[0]}-{hot[-1]})" if hot else "") + ", 1 elsewhere (`trace_replay_mact_chunks.png`)."]


def quality_lines(results_dir):
    """REPORT.md: what capping cost, and how imbalanced learned routing was."""
    path = os.path.join(results_dir, "quality", "train.jsonl")
    if not os.path.exists(path):
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
                   "At our scale capping costs nothing we can measure: no difference exceeds the spread over seeds. "
                   "That is the finding, not a proof that capping is free at scale (Switch's own differences are in "
                   "the third decimal)."),
              drift_line(runs, ref, rows),
              *trace_replay_lines(results_dir),
              f"- Learned routing is most imbalanced early: the hottest of {t['stats_ep']} ranks gets up to "
              f"{max(early):.2f}x the mean in the first 10 steps, {max(late):.2f}x in the last 10; the largest seen is "
              f"{worst[0]:.2f}x (step {worst[1]}, {worst[2]}; `quality_overload.png`).", ""]
    return lines


def train_ranks_stats(path):
    """experiments/train_ranks.yaml: real ranks' training under a budget, one run per strategy."""
    recs, runs, first = train_runs(path)
    cfg = first["config"]
    ranks = first.get("ranks") or cfg["parallel"]["ep"]
    budget = cfg["memory"]["budget"]
    room = budget - first["static_bytes"] if budget is not None else None
    by = {s: next(iter(rs.values())) for s, rs in runs.items()}  # one seed
    mact = next((s for s, rs in by.items() if any("predicted_layer_peak_bytes" in r for r in rs)), None)
    return recs, by, cfg, ranks, room, mact


def train_ranks(path, out_dir):
    recs, by, cfg, ranks, room, mact = train_ranks_stats(path)
    m = cfg["model"]
    src = source_line(path, [r for r in recs if "env" in r])
    cap = f"{src}. {ranks} real ranks (Gloo), {m['experts']} experts top-{m['topk']}, hidden {m['hidden']}, " \
          f"{m['micro_batch']} x {m['seq']} tokens per rank and step."
    fig, axes = plt.subplots(3, 1, figsize=(7.5, 8), sharex=True)
    ref = by.get(mact) or next(iter(by.values()))
    ok = [r for r in ref if r["status"] == "ok"]
    share = m["micro_batch"] * m["seq"] * m["topk"]  # a rank's rows under balanced routing
    for layer in range(m["layers"]):
        axes[0].plot([r["step"] for r in ok], [r["tokens_received_per_layer"][layer] / share for r in ok],
                     label=f"layer {layer}", lw=1.0)
    axes[0].axhline(1.0, color="0.6", lw=0.8)
    dress(axes[0], "", "s' / balanced share", f"Rows the hottest of {ranks} real ranks receives (learned routing)")
    axes[0].legend(fontsize=7)
    if mact:
        for layer in range(m["layers"]):
            axes[1].step([r["step"] for r in ok], [r["chunks"][layer] + 0.04 * layer for r in ok], where="mid",
                         label=f"layer {layer}", lw=1.0)
        dress(axes[1], "", "chunks (layer 1 drawn +0.04)", f"MACT's choice per layer and step ({mact})")
        axes[1].set_yticks(sorted({c for r in ok for c in r["chunks"]}))
        axes[1].legend(fontsize=7)
    for s, rs in sorted(by.items()):
        xs = [r["step"] for r in rs if "peak_activation_bytes" in r]
        ys = [r["peak_activation_bytes"] / 2**20 for r in rs if "peak_activation_bytes" in r]
        line, = axes[2].plot(xs, ys, label=s, lw=1.0)
        bad = [r for r in rs if r["status"] == "oom"]
        if bad:
            axes[2].plot([bad[0]["step"]], [bad[0]["peak_activation_bytes"] / 2**20], "x", color=line.get_color(), ms=8)
    if room is not None:
        axes[2].axhline(room / 2**20, color="red", lw=0.9, ls="--", label="budget's room for activations")
    dress(axes[2], "step", "activation peak, fullest rank (MiB)", "Peak per step (x: over the budget, the run ends oom)")
    axes[2].legend(fontsize=6)
    return save(fig, out_dir, "train_ranks", cap)


def train_ranks_lines(results_dir):
    """REPORT.md: training on real ranks, and MACT planning learned routing inside it."""
    path = os.path.join(results_dir, "train_ranks", "train.jsonl")
    if not os.path.exists(path):
        return []
    recs, by, cfg, ranks, room, mact = train_ranks_stats(path)
    m, t = cfg["model"], cfg["train"]
    share = m["micro_batch"] * m["seq"] * m["topk"]
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
            lines.append(f"- {s}: all {len(ok)} steps, peak {peak / 2**20:.1f} MiB, median step {ms:.0f} ms, "
                         f"final held-out loss {final:.4f}." if final is not None else f"- {s}: all {len(ok)} steps.")
    if mact:
        ok = [r for r in by[mact] if r["status"] == "ok"]
        cells = [c for r in ok for c in r["chunks"]]
        top = max(r["tokens_received_per_layer"][l] for r in ok for l in range(m["layers"])) / share
        ratio = [r["peak_activation_bytes"] / max(r["predicted_layer_peak_bytes"]) for r in ok]
        lines += ["", f"- The hottest rank received up to {top:.1f}x its balanced share. MACT ran "
                      f"{', '.join(f'{c} chunk(s) in {100 * cells.count(c) / len(cells):.0f}%' for c in sorted(set(cells)))} "
                      "of the layer-steps, each planned once that layer's router had run, from every rank's counts.",
                  f"- MACT plans with the implementation model of the real-rank path (the all-to-all's buffers included): "
                  f"the fullest rank's measured peak is {min(ratio):.2f}-{max(ratio):.2f}x the model's largest layer peak "
                  "for the plan it chose, over every step.", ""]
    return lines


def report(results_dir, predictions, out_dir):
    """paper_figures/REPORT.md: the paper's claims and ours, side by side."""
    f5 = os.path.join(results_dir, "paper_figure5", "results.jsonl")
    recs = load(f5)
    preds = load(predictions, required=("experiment", "point", "strategy", "static_gb"))
    mact, fixed8, full = "memfine(bins=[1, 2, 4, 8],chunks=auto)", "memfine(chunks=8)", "full_recompute"
    points = by_point(recs)
    tight = min(points, key=lambda p: points[p][0].get("budget_bytes") or 1e30)
    loose = max(points, key=lambda p: points[p][0].get("budget_bytes") or 1e30)
    get = lambda point, s: next((r for r in points[point] if r["strategy"] == s), None)
    full_need = max(activation(r) for r in recs if r["strategy"] == full and r["status"] == "ok")
    red = lambda r: f"{100 * (activation(r) - full_need) / full_need:+.1f}%" if r and r["status"] == "ok" else "n/a"
    ms = lambda r: r["step_ms"]["median"] if r and r["status"] == "ok" else None
    def gain(ref, r):  # throughput of r against ref
        return ms(ref) / ms(r) - 1 if ms(ref) and ms(r) else None

    def paired(ref, r):
        """The same comparison step by step (interleaved steps share their routing): the median and
        interquartile range of the per-step throughput ratios, so run-to-run drift reads as such."""
        if not (ms(ref) and ms(r)) or len(ref.get("step_ms_all", [])) != len(r.get("step_ms_all", [])):
            return "per-step ratios not available"
        q = sorted(a / b - 1 for a, b in zip(ref["step_ms_all"], r["step_ms_all"]))
        at = lambda f: q[min(len(q) - 1, int(f * len(q)))]
        return (f"step by step the median is {100 * at(0.5):+.1f}%, the middle half of the {len(q)} steps "
                f"{100 * at(0.25):+.1f}% to {100 * at(0.75):+.1f}%")

    def speed(ref, r):
        g = gain(ref, r)
        return f"{100 * g:+.1f}%" if g is not None else "n/a"
    mact_vs_8 = gain(get(tight, fixed8), get(tight, mact))
    mact_vs_full = gain(get(loose, full), get(loose, mact))
    p_model = {p["strategy"]: p for p in preds if p["point"] == "model.layers=16"}
    full_tight = get(tight, full)
    lines = [
        "# MemFine: the paper's claims and ours", "",
        "Generated by `scripts/figures.py` from the results named under each table; regenerate with `scripts/reproduce`.",
        f"Ours: {device_label(recs)}, {recs[0]['env'].get('threads')} threads, LibTorch {recs[0]['env'].get('libtorch')}; "
        "the paper: 32 GPUs with 64 GB, Megatron-LM, DeepSeek-V3-shaped layers.", "",
        "| claim | paper | ours (measured, this machine) | ours (paper's equations at paper scale) |",
        "|---|---|---|---|",
        f"| full recomputation runs out of memory (Model I) | yes, 65.9 GB > 64 GB | "
        f"{'yes' if full_tight and full_tight['status'] == 'oom' else 'no'} at {tight.replace('memory.budget=', 'budget ')} | "
        f"{'yes' if not p_model[full]['fits'] else 'no'}, {p_model[full]['total_gb']:.1f} GB |",
        f"| activation memory, fixed 8 chunks vs full recomputation | -83.84% | {red(get(tight, fixed8))} | "
        f"{100 * (p_model[fixed8]['activation_gb'] / p_model[full]['activation_gb'] - 1):+.1f}% |",
        f"| activation memory, MACT vs full recomputation | -48.03% (2 chunks) | {red(get(tight, mact))} | "
        f"{100 * (p_model[mact]['activation_gb'] / p_model[full]['activation_gb'] - 1):+.1f}% ({p_model[mact]['chunks']} chunks) |",
        f"| throughput, MACT vs fixed 8 chunks (Model I) | +18.26% | {speed(get(tight, fixed8), get(tight, mact))} | - |",
        f"| throughput, MACT vs full recomputation (Model II) | +4.42% | {speed(get(loose, full), get(loose, mact))} | - |",
        f"| throughput, fixed 8 chunks vs full recomputation (Model II) | -5.40% | {speed(get(loose, full), get(loose, fixed8))} | - |",
        f"| throughput, MACT + store when it fits vs full recomputation (ours) | - | "
        f"{speed(get(loose, full), get(loose, 'memfine(chunks=auto,store_when_fits=true)'))} | - |",
        "",
        "Activation reductions are against full recomputation's need on the same workload (measured where it fits); "
        "throughput is tokens per second from median step times of strategies interleaved in one run.",
        "",
        "## Where we agree",
        "- Chunking the MoE's dispatch -> experts -> combine and recomputing chunk by chunk removes the s'-proportional "
        "part of the activation peak: the peak falls with the chunk count until the rest of the layer (attention, "
        "router, the loss) dominates (`chunks_step_time.png`), and MemFine with MACT trains where full recomputation "
        "runs out of memory (`table4_measured.md`, `figure4_throughput.png`).",
        "- MACT's choices follow the imbalance: one chunk in calm steps and shallow layers, more in the hot middle "
        "steps and deeper layers (`figure5_mact_chunks.png`, the paper's grid beside ours).",
        ("- MACT is faster than a fixed 8 chunks at the same budget, because it chunks only where memory requires "
         f"({100 * mact_vs_8:+.1f}% here, +18.26% in the paper)." if mact_vs_8 is not None and mact_vs_8 > 0 else
         "- (not reproduced here: MACT was not faster than a fixed 8 chunks at the tight budget.)"),
        "- At paper scale the paper's own equations reproduce Model I's static memory within a few percent, predict "
        "that full recomputation does not fit and that MACT needs 2 chunks (`table4_modeled.md`).",
        "",
        "## Where we do not, and why",
        f"- Throughput against full recomputation (+4.42% in the paper, {speed(get(loose, full), get(loose, mact))} here "
        f"from median step times; {paired(get(loose, full), get(loose, mact))}): chunking adds work (every chunk "
        "recomputes its dispatch, and smaller matrix products run slower), and with a budget where full "
        "recomputation fits, MACT by Eq. 9 picks 1 chunk, i.e. full recomputation plus bookkeeping. The paper does not "
        "say where its gain comes from; it reports MACT using 2 chunks on Model II although full recomputation fits "
        "there, which Eq. 9 does not give. Storing when the model says it fits (ours) is how a tuner can beat full "
        "recomputation; how much depends on the budget.",
        "- The size of the reductions depends on how large the s' part is against the rest of the layer: the paper's "
        "DeepSeek-V3 layers receive ~20x the balanced share on the hot device, our CPU-sized layers (ep 8) at most 8x.",
        "- The paper's Table 4 is not self-consistent: Model II (8 layers) has 39.5 GB of static memory with p = 4, "
        "which 2 MoE layers per stage cannot give (we get 21.1 GB); its parallel sizes do not multiply to 32 GPUs.",
        "- The paper's activation numbers are ~10% below Eq. 2 with s' from its own Figure 2 (8 local experts at the "
        "largest p99); the exact s' behind Table 4 is not given.",
        "",
    ] + chunk_cost_lines(results_dir) + budget_lines(results_dir) + field_lines(results_dir) + pytorch_reference_lines(results_dir) + quality_lines(results_dir) + train_ranks_lines(results_dir) + [
        "## Sources",
        f"- measured: `{os.path.relpath(f5)}` (experiments/paper_figure5.yaml)",
        f"- paper scale: `{os.path.relpath(predictions)}` (`memfine predict experiments/paper_table4.yaml`)",
        "- the paper's numbers: `experiments/data/*.csv` (read off its tables and figures)",
    ]
    path = os.path.join(out_dir, "REPORT.md")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return [path]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", default="results/cpu", help="folder with <experiment>/results.jsonl (default results/cpu)")
    ap.add_argument("--out", default="paper_figures", help="output folder (default paper_figures)")
    ap.add_argument("--predictions", default="results/model/paper_table4.jsonl",
                    help="`memfine predict experiments/paper_table4.yaml` output")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    jobs = [
        ("table4_modeled", table4_modeled, args.predictions),
        ("table4_measured", table4_measured, os.path.join(args.results, "paper_figure5", "results.jsonl")),
        ("figure2", figure2, os.path.join(args.results, "paper_figure5", "results.jsonl")),
        ("figure4", figure4, os.path.join(args.results, "paper_figure5", "results.jsonl")),
        ("figure5", figure5, os.path.join(args.results, "paper_figure5", "results.jsonl")),
        ("trace_replay", lambda src, out: figure5(src, out, "trace_replay_mact_chunks", "memfine(chunks=auto)",
                                                  "ours: routing learned in quality.yaml, replayed"),
         os.path.join(args.results, "trace_replay", "results.jsonl")),
        ("imbalance", imbalance, os.path.join(args.results, "imbalance_sweep", "results.jsonl")),
        ("chunks", chunks, os.path.join(args.results, "chunk_sweep", "results.jsonl")),
        ("chunk_balanced", lambda src, out: chunks(src, out, "chunks_balanced_step_time",
                                                   "Chunks under balanced routing (ep 1, 8 experts)"),
         os.path.join(args.results, "chunk_balanced", "results.jsonl")),
        ("capacity", capacity, os.path.join(args.results, "capacity_sweep", "results.jsonl")),
        ("budget_sweep", budget_sweep, os.path.join(args.results, "budget_sweep", "results.jsonl")),
        ("model_error", model_error, os.path.join(args.results, "model_accuracy", "results.jsonl")),
        ("kernels", kernels, os.path.join(args.results, "kernels", "results.jsonl")),
        ("baselines", lambda src, out: strategies(src, out, "baselines",
                                                  "Every baseline on one MoE layer at MoEBlaze-like shapes (hidden 1024, ffn 4096, top-2)"),
         os.path.join(args.results, "baselines", "results.jsonl")),
        ("baselines_h2048", lambda src, out: strategies(src, out, "baselines_h2048",
                                                        "Every baseline at MoEBlaze's larger shape (hidden 2048, ffn 8192, top-2)"),
         os.path.join(args.results, "baselines_h2048", "results.jsonl")),
        ("gpu_memfine", lambda src, out: strategies(src, out, "gpu_memfine", "Every strategy at GPU scale (bf16)"),
         os.path.join(args.results, "gpu_memfine", "results.jsonl")),
        ("gpu_baselines", lambda src, out: strategies(src, out, "gpu_baselines",
                                                      "Every baseline at MoEBlaze's benchmark scale (bf16; hidden 2048, ffn 8192, top-2, 16k tokens)"),
         os.path.join(args.results, "gpu_baselines", "results.jsonl")),
        ("gpu_budget", lambda src, out: strategies(src, out, "gpu_budget", "Under a 10 GiB budget (bf16)"),
         os.path.join(args.results, "gpu_budget", "results.jsonl")),
        ("gpu_deepseek", lambda src, out: strategies(src, out, "gpu_deepseek", "DeepSeek-V3's MoE shape (bf16)"),
         os.path.join(args.results, "gpu_deepseek", "results.jsonl")),
        ("gpu_model_accuracy", model_error, os.path.join(args.results, "gpu_model_accuracy", "results.jsonl")),
        ("kernel_ops", kernel_ops, os.path.join(args.results, "bench", "dispatch_combine.json")),
        ("kernels_ranks", lambda src, out: kernels(src, out, "kernels_ranks_table",
                                                   "Fused dispatch/combine against ATen on real expert-parallel ranks"),
         os.path.join(args.results, "ep_pair_kernels", "results.jsonl")),
    ]
    jobs.append(("quality", quality, os.path.join(args.results, "quality", "train.jsonl")))
    jobs.append(("train_ranks", train_ranks, os.path.join(args.results, "train_ranks", "train.jsonl")))
    jobs.append(("report", lambda src, out: report(args.results, args.predictions, out),
                 os.path.join(args.results, "paper_figure5", "results.jsonl")))
    failed = 0
    for name, fn, src in jobs:
        if not os.path.exists(src):
            if not name.startswith("gpu_"):  # GPU experiments exist only in a GPU's results folder
                print(f"figures: skip {name}: {src} does not exist", file=sys.stderr)
            continue
        try:
            for p in fn(src, args.out):
                print(f"figures: wrote {p}")
        except (ResultsError, KeyError, ValueError, StopIteration, OSError) as e:
            print(f"figures: {name}: {e}", file=sys.stderr)
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
