"""Every strategy at a few points, as horizontal bars: a column per point, activation peak above and
step time below, the strategies named once on the left in words, each point's bars on the same scale
as the others', the ratio to the baseline beside each bar (`memfine plot`, the baselines, the savers,
skip_dead and the GPU runs)."""
import math
import textwrap

from . import names as N
from . import records as R
from . import style as S

PER_ROW = 4  # points side by side; more wrap onto another pair of rows


def _ratio(a, b):
    return f"{a / b:.2f}x" if a and b else ""


def timed_steps(records):
    """'2 timed steps' or '2-5 timed steps': how many steps each whisker spans."""
    n = sorted({len(r.get("step_ms_all") or []) for r in records if r["status"] == "ok"} - {0})
    if not n:
        return "the timed steps"
    return f"{n[0]} timed step{'s' if n[0] != 1 else ''}" if len(n) == 1 else f"{n[0]}-{n[-1]} timed steps"


def _panel(ax_mem, ax_time, group, order, div, room=None):
    """One point's bars; returns the largest memory and time values drawn (for the common scales)."""
    base = R.first(group, role="baseline", status="ok")
    top_mem = top_ms = 0.0
    for r in group:
        y = order.index(r["strategy"])
        c, edge, hatch = S.color_of(r), S.edge_of(r), "////" if R.drops(r) else None
        if hatch:  # the hatch takes the edge's colour: a darker one, so that it shows on the family's own
            edge = S.shade(edge, -0.45)
        if r["status"] != "ok":
            for ax in (ax_mem, ax_time):
                ax.plot([0], [y], marker="x", color="black", ms=5, ls="none", clip_on=False)
                ax.text(0, y, f"  {r['status'].upper()}", va="center", ha="left", fontsize=S.SMALL)
            continue
        a = R.activation(r) / div
        ms, lo, hi = S.spread_ms(r)
        ax_mem.barh(y, a, color=c, edgecolor=edge, lw=0.6, hatch=hatch, height=0.75)
        ax_time.barh(y, ms, color=c, edgecolor=edge, lw=0.6, hatch=hatch, height=0.75,
                     xerr=[[ms - lo], [hi - ms]], error_kw=dict(ecolor="0.15", lw=0.8, capsize=1.5))
        note = _ratio(R.activation(r), base and R.activation(base))
        if R.drops(r):
            note += f", drops {100 * r['dropped_fraction']:.0f}%"
        ax_mem.text(a, y, " " + note, va="center", ha="left", fontsize=S.SMALL)
        ax_time.text(hi, y, " " + _ratio(ms, base and R.median_ms(base)), va="center", ha="left", fontsize=S.SMALL)
        top_mem, top_ms = max(top_mem, a), max(top_ms, hi)
    if room is not None:
        ax_mem.axvline(room, color="black", ls="--", lw=0.9)
        top_mem = max(top_mem, room)
    return top_mem, top_ms


def draw(groups, titles, rooms=None):
    """groups: each point's records; titles: each point's title. Returns the figure."""
    order = list(dict.fromkeys(r["strategy"] for g in groups for r in g))
    unit, div = S.bytes_unit([R.activation(r) for g in groups for r in g])
    cols = min(len(groups), PER_ROW)
    blocks = math.ceil(len(groups) / cols)
    panel = 0.16 * len(order) + 0.45
    fig, axes = S.figure(2 * blocks, cols, figsize=(max(5.5, 2.0 + 1.85 * cols), blocks * 2 * panel + 1.0), sharey=True,
                         squeeze=False)
    tops = []
    for i, g in enumerate(groups):
        a_mem, a_time = axes[2 * (i // cols)][i % cols], axes[2 * (i // cols) + 1][i % cols]
        tops.append(_panel(a_mem, a_time, g, order, div, (rooms or {}).get(i)))
        a_mem.set_title(textwrap.fill(titles[i], int((fig.get_size_inches()[0] - 2.0) / cols * 72 / 4.4)))
        a_mem.set_xlabel(f"activation peak ({unit})" + ("\ndashed: the budget less static memory" if rooms else ""))
        a_time.set_xlabel("median step time (ms)")
    for k in range(len(groups), blocks * cols):
        axes[2 * (k // cols)][k % cols].axis("off")
        axes[2 * (k // cols) + 1][k % cols].axis("off")
    # One scale per quantity in every column, room on the right for the ratios.
    mem_top, ms_top = max(t[0] for t in tops) or 1.0, max(t[1] for t in tops) or 1.0
    for i in range(len(groups)):
        axes[2 * (i // cols)][i % cols].set_xlim(0, mem_top * 1.42)
        axes[2 * (i // cols) + 1][i % cols].set_xlim(0, ms_top * 1.38)
    ax0 = axes[0][0]
    ax0.set_yticks(range(len(order)))
    ax0.set_yticklabels([S.label_words(s) for s in order])
    ax0.set_ylim(len(order) - 0.4, -0.6)
    for row in axes:
        for ax in row:
            ax.tick_params(axis="y", length=0)
            ax.grid(axis="x", color="0.9", lw=0.5)
            ax.set_axisbelow(True)
    return fig


def point_title(point, rs):
    """A point in words; the one point of an experiment without a sweep: its workload and budget."""
    if point != "base":
        return R.point_title(point)
    cfg = next((r["config"] for r in rs if r.get("config")), {})
    budget = (cfg.get("memory") or {}).get("budget")
    unit, div = S.bytes_unit([budget or 0])
    return N.workload(cfg) + (f", budget {budget / div:.3g} {unit}" if budget else "")


def subtitle(records, base_name="full recomputation"):
    """What the bars show, in the suptitle's second line: whiskers, ratios, hatching only where drawn."""
    text = f"whiskers: min-max over {timed_steps(records)}"
    if any(r.get("role") == "baseline" and r["status"] == "ok" for r in records):
        text += (f"; beside each bar: ratio to {base_name} at that point (where the whiskers overlap, within this "
                 "machine's noise)")
    if any(R.drops(r) for r in records if r["status"] == "ok"):
        text += "; hatched: drops assignments (another model)"
    return text
