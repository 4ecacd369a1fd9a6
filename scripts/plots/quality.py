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


def _curve(by, key, tokens):
    """[(training tokens, [value per seed])] of a strategy's runs, at the steps that record `key`."""
    at = {}
    for rs in by.values():
        for r in rs:
            if r.get(key) is not None:
                at.setdefault((r["step"] + 1) * tokens, []).append(r[key])
    return sorted(at.items())


def _every(n):
    return max(1, n // 8)


def _eval_figure(runs, rows, ref, tokens):
    """Held-out loss against tokens (mean over seeds; band: the reference's range over seeds), and below
    it each strategy's paired difference from the reference, its 95% interval at the last step."""
    fig = S.plt.figure(figsize=(7.5, 7.4), layout="constrained")
    S._taken.clear()
    gs = fig.add_gridspec(3, 2, height_ratios=[0.001, 1, 1], width_ratios=[5, 1.2])
    lax, ax, ad = fig.add_subplot(gs[0, :]), fig.add_subplot(gs[1, :]), fig.add_subplot(gs[2, 0])
    af = fig.add_subplot(gs[2, 1], sharey=ad)
    lax.axis("off")
    ref_at = {(r["seed"], r["step"]): r["eval_loss"] for rs in runs[ref].values() for r in rs if r.get("eval_loss") is not None}
    order = sorted(runs, key=lambda s: (s != ref, capped(runs, s), s))
    handles, n_seeds = [], len(runs[ref])
    for k, s in enumerate(order):
        by = runs[s]
        curve = _curve(by, "eval_loss", tokens)
        lk = S.look(s, ms=3.5, lw=1.2, markevery=_every(len(curve)))
        diffs = []
        for step in sorted({r["step"] for rs in by.values() for r in rs if r.get("eval_loss") is not None}):
            mine = {seed: r["eval_loss"] for seed, rs in by.items() for r in rs if r["step"] == step and r.get("eval_loss") is not None}
            mean, half, n = paired(mine, {seed: ref_at[(seed, step)] for seed in mine if (seed, step) in ref_at})
            if n:
                diffs.append(((step + 1) * tokens, mean, half))
        same = s != ref and diffs and all(d == 0 for _, d, _ in diffs)
        label = S.label_words(s) + (f" (identical to {S.label_words(ref)}: the lines coincide)" if same else "")
        ax.plot([x for x, _ in curve], [sum(v) / len(v) for _, v in curve], **lk)
        if s == ref:
            ax.fill_between([x for x, _ in curve], [min(v) for _, v in curve], [max(v) for _, v in curve], color=lk["color"],
                            alpha=0.2, lw=0)
        handles.append((S.legend_handle(s, ms=3.5), label))
        if s == ref or not diffs:
            continue
        ad.plot([x for x, _, _ in diffs], [d for _, d, _ in diffs], **lk)
        x, d, half = diffs[-1]
        if half != float("inf"):
            af.errorbar([k], [d], yerr=[half], fmt=lk["marker"], color=lk["color"], mec=lk["mec"], ms=4, capsize=2,
                        elinewidth=1.0)
    for a in (ad, af):
        a.axhline(0, color="0.3", lw=0.8, zorder=0)
    af.set_xticks([])
    af.set_xlim(0, len(order))
    af.tick_params(labelleft=False)
    af.set_title(f"last step: 95% interval\n(Student t, {n_seeds - 1} d.o.f.)")
    S.dress(ax, "", "held-out loss (nats per byte)",
            f"Held-out loss over training (mean over {n_seeds} seeds; band: {S.label_words(ref)}'s range over them)",
            legend=False)
    S.dress(ad, "training tokens", f"difference from {S.label_words(ref)}\n(nats per byte)",
            f"Each strategy minus {S.label_words(ref)} at the same seed (mean over seeds)", legend=False)
    ax.set_xlim(ad.get_xlim())
    S.legend(lax, [h for h, _ in handles], [t for _, t in handles], ncol=2)
    S.suptitle(fig, "Capacity capping's cost in model quality against dropless strategies")
    return fig


def _dropped_figure(runs, tokens):
    """Capacity capping's dropped share over training: mean over seeds, band: their range; colour by
    capacity factor, dashed: drops by position."""
    fig, ax, lax = S.figure(1, 1, legend_row=True, figsize=(7, 4))
    handles = []
    for s, by in sorted(runs.items()):
        if not capped(runs, s):
            continue
        curve = _curve(by, "dropped_fraction", tokens)
        lk = S.look(s, ms=3.5, lw=1.2, markevery=_every(len(curve)))
        ax.plot([x for x, _ in curve], [100 * sum(v) / len(v) for _, v in curve], **lk)
        ax.fill_between([x for x, _ in curve], [100 * min(v) for _, v in curve], [100 * max(v) for _, v in curve],
                        color=lk["color"], alpha=0.12, lw=0)
        handles.append((S.legend_handle(s, ms=3.5), S.label_words(s)))
    ax.set_ylim(bottom=0)
    S.dress(ax, "training tokens", "assignments dropped (%)",
            f"Capacity capping's dropped share over training (mean over {len(next(iter(runs.values())))} seeds; "
            "band: their range)", legend=False)
    S.legend(lax, [h for h, _ in handles], [t for _, t in handles], ncol=2)
    return fig


def _overload_figure(runs, ref, m, t, tokens):
    """The overload factor per layer over training (the reference run): our measured Figure 2."""
    fig, ax = S.figure(figsize=(7, 4))
    by = runs[ref]
    n = min(len(rs) for rs in by.values())
    for layer in range(m["layers"]):
        per = [[overloads(rs[i], t["stats_ep"])[layer] for rs in by.values()] for i in range(n)]
        xs = [(i + 1) * tokens for i in range(n)]
        lk = S.layer_look(layer, m["layers"])
        ax.plot(xs, [sum(v) / len(v) for v in per], label=f"layer {layer}", lw=1.1, **lk)
        ax.fill_between(xs, [min(v) for v in per], [max(v) for v in per], color=lk["color"], alpha=0.12, lw=0)
    ax.axhline(1.0, color="0.6", lw=0.8)
    ax.set_ylim(bottom=0)
    S.dress(ax, "training tokens", f"overload factor (hottest of {t['stats_ep']} ranks / mean)",
            f"Learned routing's imbalance over training ({S.label_words(ref)}, mean over {len(by)} seeds; band: their range)",
            legend=False)
    ax.legend(loc="lower right", frameon=False)
    return fig


def quality(path, out_dir):
    recs, runs, first, rows, ref = quality_stats(path)
    src = R.source_line(path, [r for r in recs if "env" in r])  # step 0 of each run carries the environment
    cfg = first["config"]
    m, t = cfg["model"], cfg["train"]
    tokens = m["seq"] * m["micro_batch"]
    cap = f"{src}. Model: {m['layers']} layers, hidden {m['hidden']}, {m['experts']} experts top-{m['topk']}, " \
          f"byte vocabulary, {t['steps']} steps x {tokens} tokens, seeds {sorted({r['seed'] for r in recs})}."
    out = S.save(_eval_figure(runs, rows, ref, tokens), out_dir, "quality_eval_loss", cap)
    out += S.save(_dropped_figure(runs, tokens), out_dir, "quality_dropped", cap)
    out += S.save(_overload_figure(runs, ref, m, t, tokens), out_dir, "quality_overload", cap)
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
    fig, axes, lax = S.figure(2, 2, legend_row=True, figsize=(9, 6.2))
    (a_recv, a_grid), (a_peak, a_time) = axes
    ref = by.get(mact) or next(iter(by.values()))
    ok = [r for r in ref if r["status"] == "ok"]
    for layer in range(m["layers"]):
        a_recv.plot([r["step"] for r in ok], [overloads(r, ranks)[layer] for r in ok], label=f"layer {layer}", lw=1.0,
                    **S.layer_look(layer, m["layers"]))
    a_recv.axhline(1.0, color="0.6", lw=0.8)
    a_recv.set_ylim(bottom=0)
    S.dress(a_recv, "step", "overload (hottest rank's rows\n/ balanced share)",
            f"Rows the hottest of {ranks} real ranks receives\n(learned routing, {S.label_words(ref[0]['strategy'])})",
            legend=False)
    a_recv.legend(loc="lower right", frameon=False)
    if mact:
        grid = [[r["chunks"][l] for r in ok] for l in range(m["layers"])]
        im, counts = chunk_grid(a_grid, grid, [r["step"] for r in ok], f"Chunks per layer and step ({S.label_words(mact)})")
        a_grid.set_ylabel("layer")
        a_grid.set_xlabel("step")
        S.chunk_colorbar(fig, im, counts, a_grid, pad=0.01)
    else:
        a_grid.axis("off")
    handles = []
    for s, rs in sorted(by.items()):
        with_peak = [r for r in rs if "peak_activation_bytes" in r]
        lk = S.look(s, ms=3, lw=1.0, markevery=max(1, len(with_peak) // 10))
        a_peak.plot([r["step"] for r in with_peak], [r["peak_activation_bytes"] / R.MIB for r in with_peak], **lk)
        bad = [r for r in rs if r["status"] == "oom"]
        if bad:
            a_peak.plot([bad[0]["step"]], [bad[0]["peak_activation_bytes"] / R.MIB], "x", color=lk["color"], ms=8, mew=1.8,
                        clip_on=False, zorder=4)
        fine = [r for r in rs if r["status"] == "ok" and r["step"] > 0]  # step 0 warms the allocator
        text = S.label_words(s)
        if fine:
            a_time.plot([r["step"] for r in fine], [r["step_ms"] for r in fine], **dict(lk, lw=0.8))
            text += (f": median {statistics.median(r['step_ms'] for r in fine):.0f} ms over steps {fine[0]['step']}-"
                     f"{fine[-1]['step']}" + (" (then out of memory)" if bad else ""))
        elif bad:
            text += f": out of memory at step {bad[0]['step']}"
        handles.append((S.legend_handle(s, line=len(with_peak) > 1, ms=4), text))
    if room is not None:
        a_peak.axhline(room / R.MIB, color="black", lw=0.9, ls="--")
        a_peak.annotate("budget's room for activations", (1.0, room / R.MIB), xycoords=("axes fraction", "data"),
                        xytext=(-2, 3), textcoords="offset points", ha="right", fontsize=S.SMALL)
    last = max(r["step"] for rs in by.values() for r in rs)
    for ax in (a_recv, a_peak, a_time):
        ax.set_xlim(-0.03 * last, 1.03 * last)
    a_peak.set_ylim(bottom=0)
    a_time.set_ylim(bottom=0)
    S.dress(a_peak, "step", "activation peak, fullest rank (MiB)", "Peak per step (x: over the budget, the run ends)",
            legend=False)
    S.dress(a_time, "step", "step time, slowest rank (ms)", "Step time (what MACT's choices cost)", legend=False)
    S.legend(lax, [h for h, _ in handles], [t for _, t in handles], ncol=2)
    S.suptitle(fig, f"Training on {ranks} real ranks under a budget, {R.device_label(recs)}")
    return S.save(fig, out_dir, "train_ranks", cap)
