"""Real training (memfine train): capacity capping's cost in quality against dropless strategies,
learned routing's imbalance, and training on real ranks under a budget with MACT."""
import statistics

from . import records as R
from . import style as S
from .generic import chunk_grid

# Two-sided 95% Student t quantiles by degrees of freedom (paired differences over seeds).
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}


def overloads(rec, stats_ep):
    """A training step's overload factor per layer: s' of the hottest of `stats_ep` ranks over the
    mean rank's share of the layer's assignments."""
    return [s * stats_ep / max(1, sum(n)) for s, n in zip(rec["tokens_received_per_layer"], rec["expert_tokens"])]


def train_runs(path):
    """`memfine train` records -> {strategy: {seed: [records by step]}} and the first run's head."""
    recs = R.load(path, required=("experiment", "point", "strategy", "status", "step"))
    runs = {}
    for r in recs:
        runs.setdefault(r["strategy"], {}).setdefault(r["seed"], []).append(r)
    for by_seed in runs.values():
        for seed in by_seed:
            by_seed[seed].sort(key=lambda r: r["step"])
    first = next(r for r in recs if "config" in r)
    return recs, runs, first


def paired(values, ref):
    """Mean, and 95% half-width over seeds, of the differences values[seed] - ref[seed]."""
    diffs = [values[k] - ref[k] for k in values if k in ref]
    n = len(diffs)
    mean = sum(diffs) / n if n else 0.0
    sd = (sum((d - mean) ** 2 for d in diffs) / (n - 1)) ** 0.5 if n > 1 else 0.0
    half = T975.get(n - 1, 2.0) * sd / n ** 0.5 if n > 1 else float("inf")
    return mean, half, n


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
        diff, half, n = paired(per_seed, final[ref])
        mean = sum(vals) / len(vals)
        sd = (sum((v - mean) ** 2 for v in vals) / (len(vals) - 1)) ** 0.5 if len(vals) > 1 else 0.0
        rows[s] = dict(mean=mean, sd=sd, n=len(vals), diff=diff, half=half, significant=abs(diff) > half and n > 1)
    return recs, runs, first, rows, ref


def capped(runs, strategy):
    """Whether a strategy drops assignments (capacity capping: its records count what it dropped)."""
    return any(R.drops(r) for rs in runs[strategy].values() for r in rs)


def encoded(runs, strategy):
    """Whether a strategy stores activations encoded (8-bit storage: its records count what it encoded):
    lossy, another gradient by design."""
    return any("encoded_bytes" in r for rs in runs[strategy].values() for r in rs)


def drop_share(rs, at):
    return rs[at].get("dropped_fraction")


def switch_table1():
    return {(r["routing"], float(r["capacity_factor"])): float(r["neg_log_perplexity"]) for r in R.read_csv("switch_table1.csv")}


def quality(path, out_dir):
    recs, runs, first, rows, ref = quality_stats(path)
    src = R.source_line(path, [r for r in recs if "env" in r])  # step 0 of each run carries the environment
    cfg = first["config"]
    m, t = cfg["model"], cfg["train"]
    tokens = m["seq"] * m["micro_batch"]
    cap = f"{src}. Model: {m['layers']} layers, hidden {m['hidden']}, {m['experts']} experts top-{m['topk']}, " \
          f"byte vocabulary, {t['steps']} steps x {tokens} tokens, seeds {sorted({r['seed'] for r in recs})}."
    out = []
    style_of = lambda s: "-" if not capped(runs, s) else ("--" if R.params_of(runs[s][next(iter(runs[s]))][0]).get(
        "drop_policy") == "position" else ":")
    # Held-out loss against tokens (mean over seeds; band: the seeds' range), and below it each
    # strategy's difference from dropless at the same seed with its 95% interval over seeds: the
    # effect the table reports, which the curves' overlap hides.
    fig, (ax, ad) = S.figure(2, 1, figsize=(7.5, 7), sharex=True)
    ref_at = {}
    for rs in runs[ref].values():
        for r in rs:
            if r.get("eval_loss") is not None:
                ref_at[(r["seed"], r["step"])] = r["eval_loss"]
    for s, by in sorted(runs.items()):
        curves = [((r["step"] + 1) * tokens, r["eval_loss"]) for rs in by.values() for r in rs if r.get("eval_loss") is not None]
        xs = sorted({x for x, _ in curves})
        ys = [[y for x2, y in curves if x2 == x] for x in xs]
        line, = ax.plot(xs, [sum(v) / len(v) for v in ys], style_of(s), label=s, lw=1.3)
        ax.fill_between(xs, [min(v) for v in ys], [max(v) for v in ys], alpha=0.12, color=line.get_color())
        if s == ref:
            continue
        steps = sorted({r["step"] for rs in by.values() for r in rs if r.get("eval_loss") is not None})
        dx, dm, dlo, dhi = [], [], [], []
        for step in steps:
            mine = {seed: r["eval_loss"] for seed, rs in by.items() for r in rs if r["step"] == step and r.get("eval_loss") is not None}
            theirs = {seed: ref_at[(seed, step)] for seed in mine if (seed, step) in ref_at}
            mean, half, n = paired(mine, theirs)
            if n:
                dx.append((step + 1) * tokens), dm.append(mean)
                dlo.append(mean - (half if half != float("inf") else 0)), dhi.append(mean + (half if half != float("inf") else 0))
        ad.plot(dx, dm, style_of(s), color=line.get_color(), lw=1.2, label=s)
        ad.fill_between(dx, dlo, dhi, alpha=0.12, color=line.get_color())
    ad.axhline(0, color="0.4", lw=0.8)
    S.dress(ax, "", "held-out loss (nats per byte)", "Held-out loss over training (mean; band: the seeds' range)")
    ax.legend(fontsize=6)
    S.dress(ad, "training tokens", f"difference from {ref} (nats)",
            "Each strategy minus dropless at the same seed (mean; band: 95% interval over seeds)", legend=False)
    out += S.save(fig, out_dir, "quality_eval_loss", cap)
    # Dropped share per step (capacity capping), mean over seeds.
    fig, ax = S.figure(figsize=(7, 4))
    for s, by in sorted(runs.items()):
        if not capped(runs, s):
            continue
        n = min(len(rs) for rs in by.values())
        ys = [sum(drop_share(rs, i) or 0 for rs in by.values()) / len(by) for i in range(n)]
        ax.plot(range(n), [100 * y for y in ys], style_of(s), label=s, lw=1.2)
    S.dress(ax, "step", "assignments dropped (%)", "Capacity capping's dropped share over training (mean over seeds)")
    out += S.save(fig, out_dir, "quality_dropped", cap)
    # Overload factor per layer over training (the dropless run): our measured Figure 2.
    fig, ax = S.figure(figsize=(7, 4))
    by = runs[ref]
    n = min(len(rs) for rs in by.values())
    for layer in range(m["layers"]):
        ys = [sum(overloads(rs[i], t["stats_ep"])[layer] for rs in by.values()) / len(by) for i in range(n)]
        ax.plot(range(n), ys, label=f"layer {layer}", lw=1.1)
    ax.axhline(1.0, color="0.6", lw=0.8)
    S.dress(ax, "step", f"overload factor (hottest of {t['stats_ep']} ranks / mean)",
            f"Learned routing's imbalance over training ({ref}, mean over seeds)")
    out += S.save(fig, out_dir, "quality_overload", cap)
    # Switch Table 1's convention: negative log perplexity at the last step.
    topk = f"top-{m['topk']}"
    switch = switch_table1()
    table = []
    for s, r in sorted(rows.items(), key=lambda kv: (capped(runs, kv[0]), kv[0] != ref, kv[0])):
        by = runs[s]
        head = by[next(iter(by))][0]
        cf = R.params_of(head).get("capacity_factor") if capped(runs, s) else None
        drops = [drop_share(rs, 0) for rs in by.values()], [drop_share(rs, -1) for rs in by.values()]
        drop_txt = "-" if drops[0][0] is None else \
            f"{100 * sum(drops[0]) / len(drops[0]):.1f}% -> {100 * sum(drops[1]) / len(drops[1]):.1f}%"
        theirs = switch.get((topk, float(cf))) if cf is not None else None
        if r is None:
            table.append([s, "did not finish", "", "", "", drop_txt, theirs if theirs is not None else "-"])
            continue
        table.append([s, f"{r['mean']:.4f} +- {r['sd']:.4f}", f"{-r['mean']:.4f}",
                      "-" if s == ref else f"{r['diff']:+.4f} +- {r['half']:.4f}",
                      "-" if s == ref else ("yes" if r["significant"] else "no"), drop_txt,
                      f"{theirs:.3f}" if theirs is not None else "-"])
    notes = [f"Held-out loss at step {t['steps']} in nats per byte (mean +- standard deviation over {len(runs[ref])} seeds); "
             "negative log perplexity is its negative, Switch Transformer's Table 1 convention (theirs: per token of a "
             f"32k vocabulary, 100k steps, 128 experts, {topk}: not comparable in level, only in the ordering).",
             f"Difference: against {ref} at the same seed (same weights and data), mean +- the 95% interval over seeds "
             "(Student t); 'exceeds' when the interval excludes 0.",
             "Dropped share: capacity capping's assignments dropped at the first and the last step (mean over seeds).",
             f"Regenerate: build/memfine train experiments/quality.yaml --out DIR, then memfine plot DIR. {src}"]
    out += S.write_table(out_dir, "quality_table", "Capacity capping's cost in model quality (Switch Table 1 convention)",
                         ["strategy", "held-out loss", "neg. log perplexity", "difference vs dropless", "exceeds seed spread",
                          "dropped share (first -> last step)", f"Switch {topk}"], table, notes)
    return out


def train_ranks_stats(path):
    """experiments/train_ranks.yaml: real ranks' training under a budget, one run per strategy."""
    recs, runs, first = train_runs(path)
    cfg = first["config"]
    ranks = first.get("ranks") or cfg["parallel"]["ep"]
    budget = cfg["memory"]["budget"]
    room = budget - first["static_bytes"] if budget is not None else None
    by = {s: next(iter(rs.values())) for s, rs in runs.items()}  # one seed
    mact = next((s for s, rs in by.items() if R.matches(rs[0], **R.MACT)), None)
    return recs, by, cfg, ranks, room, mact


def train_ranks(path, out_dir):
    recs, by, cfg, ranks, room, mact = train_ranks_stats(path)
    m = cfg["model"]
    cap = f"{R.source_line(path, [r for r in recs if 'env' in r])}. {ranks} real ranks (Gloo), {m['experts']} experts " \
          f"top-{m['topk']}, hidden {m['hidden']}, {m['micro_batch']} x {m['seq']} tokens per rank and step."
    fig, axes = S.figure(4, 1, figsize=(7.5, 10.5), sharex=True)
    ref = by.get(mact) or next(iter(by.values()))
    ok = [r for r in ref if r["status"] == "ok"]
    for layer in range(m["layers"]):
        axes[0].plot([r["step"] for r in ok], [overloads(r, ranks)[layer] for r in ok], label=f"layer {layer}", lw=1.0)
    axes[0].axhline(1.0, color="0.6", lw=0.8)
    S.dress(axes[0], "", "s' / balanced share", f"Rows the hottest of {ranks} real ranks receives (learned routing)")
    if mact:
        grid = [[r["chunks"][l] for r in ok] for l in range(m["layers"])]
        im, values = chunk_grid(axes[1], grid, [r["step"] for r in ok], f"MACT's chunks per layer and step ({mact})")
        axes[1].set_ylabel("layer")
        cb = fig.colorbar(im, ax=axes[1], ticks=range(len(values)), pad=0.01)
        cb.ax.set_yticklabels([str(v) for v in values])
    for s, rs in sorted(by.items()):
        c = S.color_of(rs[0])
        with_peak = [r for r in rs if "peak_activation_bytes" in r]
        axes[2].plot([r["step"] for r in with_peak], [r["peak_activation_bytes"] / R.MIB for r in with_peak], label=s,
                     lw=1.0, color=c)
        bad = [r for r in rs if r["status"] == "oom"]
        if bad:
            axes[2].plot([bad[0]["step"]], [bad[0]["peak_activation_bytes"] / R.MIB], "x", color=c, ms=8)
        fine = [r for r in rs if r["status"] == "ok" and r["step"] > 0]  # step 0 warms the allocator
        if fine:
            axes[3].plot([r["step"] for r in fine], [r["step_ms"] for r in fine], lw=0.8, color=c,
                         label=f"{s}: median {statistics.median(r['step_ms'] for r in fine):.0f} ms")
    if room is not None:
        axes[2].axhline(room / R.MIB, color="red", lw=0.9, ls="--", label="budget's room for activations")
    S.dress(axes[2], "", "activation peak, fullest rank (MiB)", "Peak per step (x: over the budget, the run ends oom)")
    S.dress(axes[3], "step", "step time, slowest rank (ms)", "Step time (what MACT's choices cost)")
    return S.save(fig, out_dir, "train_ranks", cap)
