"""How every figure and table looks and is written: one colour and one marker per strategy family in
every figure, captions naming the source, PNG and PDF that re-plot byte for byte, tables as Markdown,
LaTeX and CSV."""
import csv
import hashlib
import os
import re
import textwrap

import matplotlib

matplotlib.use("Agg")
import matplotlib.colors as mcolors  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

from . import records as R  # noqa: E402
from . import tables  # noqa: E402
from .names import strategy as label_words  # noqa: E402,F401  (figures name strategies through style)

# Sizes for a paper: figures 3.5 in (a column) to about 9 in wide, no text below 7 pt at that size.
DPI = 200
plt.rcParams.update({"font.size": 8, "axes.titlesize": 8, "axes.labelsize": 8, "xtick.labelsize": 7,
                     "ytick.labelsize": 7, "legend.fontsize": 7, "legend.title_fontsize": 7, "figure.titlesize": 9,
                     "axes.titlepad": 4, "legend.handlelength": 2.4, "savefig.dpi": DPI})
SMALL = 7  # the smallest text a figure has (points, at its saved size)

# One colour and one marker per family (a strategy's registered name), the same in every figure, as each
# strategy declares them where it is registered (`memfine schema --json`'s looks).
# Nothing else in a figure (reference lines, budgets, layers) takes a family's hue: they are black or grey.
FAMILY = {n: look["colour"] for n, look in R.SCHEMA.get("looks", {}).items() if look.get("colour")}
MARKER = {n: look["marker"] for n, look in R.SCHEMA.get("looks", {}).items() if look.get("marker")}
# A family's variants: its colour lighter (+) or darker (-) by a step of this ladder, and a dash of their own
# where lines are drawn. Step 0 is the family's own label.
LADDER = (0.0, 0.45, -0.3, 0.7, -0.62, 0.22, -0.15, 0.85)
DASHES = ("-", "--", "-.", ":", (0, (6, 1.5)), (0, (3, 1, 1, 1, 1, 1)), (0, (1, 1)), (0, (8, 2, 2, 2)))
# Each variant that the committed experiments run keeps one step in every figure, chosen so that the
# variants that appear together are far apart (MACT the family's own orange: the paper's method).
VARIANT = {"memfine(chunks=auto)": 0, "memfine(chunks=4)": 1, "memfine(chunks=8)": 2, "memfine(chunks=2)": 3,
           "memfine(chunks=auto,store_when_fits=true)": 4, "memfine(chunks=auto,objective=time)": 1,
           "memfine(chunks=4,experts=moe_act)": 3, "memfine(chunks=4,experts=buffer_free)": 2,
           "memfine(chunks=1)": 5, "memfine(chunks=3)": 6, "memfine(chunks=6)": 7, "memfine(chunks=12)": 4,
           "memfine(chunks=16)": 4, "moeblaze(keep_act=true)": 2,
           "full_recompute(skip_dead=true)": 1, "moe_recompute(skip_dead=true)": 1,
           "capacity(capacity_factor=0.5,drop_policy=probs)": 3, "capacity(capacity_factor=0.75,drop_policy=probs)": 5,
           "capacity(capacity_factor=1.0,drop_policy=probs)": 0, "capacity(capacity_factor=1.25,drop_policy=probs)": 1,
           "capacity(capacity_factor=1.5,drop_policy=probs)": 2, "capacity(capacity_factor=2.0,drop_policy=probs)": 4,
           "chunked_ep(chunks=2)": 1, "chunked_ep(chunks=4)": 0, "chunked_ep(chunks=4,recompute=none)": 2,
           "paged_stash(capacity_factor=1.0)": 0, "paged_stash(capacity_factor=1.5)": 3,
           "paged_stash(capacity_factor=4.0,device_factor=4.0)": 1,
           "compress(format=fp8_e5m2)": 2, "compress(format=bf16)": 1, "compress(scale=rows)": 3,
           "compress(chunks=4,modules=[attn_norm,qkv_linear,core_attn,attn_proj,mlp_norm])": 4,
           "offload(modules=[core_attn,expert_fc1])": 0, "offload(experts=moe_act,modules=[core_attn,expert_fc1])": 2,
           "offload(modules=[attn_norm,qkv_linear,core_attn,attn_proj,mlp_norm,expert_fc1,moe_act,expert_fc2])": 4,
           "offload(chunks=4,modules=[attn_norm,qkv_linear,core_attn,attn_proj,mlp_norm])": 1}
# Capacity variants keep their factor's step whatever the drop policy (the policy is a dash of its own).
_OTHER = [c for i, c in enumerate(plt.get_cmap("tab20b").colors) if i % 4 in (1, 2)]  # families not listed above
_taken = {}  # in the figure being drawn: family -> {ladder step: label}


def family(label):
    return label.split("(")[0]


def _canonical(label):
    """A label's key in VARIANT: parameters that only change the bandwidth or the drop policy set aside."""
    name, params = R.parse_label(label)
    keep = {k: v for k, v in params.items() if k not in ("h2d_gbps", "d2h_gbps")}
    if name == "capacity":
        keep["drop_policy"] = "probs"
        keep.pop("pad", None)
    if not keep:
        return name
    text = lambda v: "[" + ",".join(map(str, v)) + "]" if isinstance(v, list) else (
        "true" if v is True else "false" if v is False else str(v))
    return f"{name}(" + ",".join(f"{k}={text(v)}" for k, v in keep.items()) + ")"


def step_of(label):
    """A label's ladder step in the figure being drawn: its own where free, else the next free one (two
    labels of one family never share a colour in one figure)."""
    fam = family(label)
    taken = _taken.setdefault(fam, {})
    for step, who in taken.items():
        if who == _canonical(label):
            return step
    key = _canonical(label)
    want = 0 if key == fam else VARIANT.get(key, 1 + int(hashlib.md5(key.encode()).hexdigest(), 16) % (len(LADDER) - 1))
    step = next(s for s in ([want] + [s for s in range(len(LADDER)) if s != want]) if s not in taken) \
        if len(taken) < len(LADDER) else want
    taken[step] = key
    return step


def _label(r):
    return r["strategy"] if isinstance(r, dict) else r


def shade(hex_colour, t):
    rgb = mcolors.to_rgb(hex_colour)
    return tuple(c + (1 - c) * t if t > 0 else c * (1 + t) for c in rgb)


def color_of(r):
    """A record's (or a label's) colour: its family's, a variant lighter or darker."""
    label = _label(r)
    fam = family(label)
    if fam in FAMILY:
        return shade(FAMILY[fam], LADDER[step_of(label)])
    return _OTHER[int(hashlib.md5(label.encode()).hexdigest(), 16) % len(_OTHER)]


def edge_of(r):
    """The family's own colour: the edge that keeps a pale variant's bar or marker visible and its family's."""
    fam = family(_label(r))
    return FAMILY.get(fam, color_of(r))


def marker_of(r):
    """A record's (or a label's) marker: its family's."""
    return MARKER.get(family(_label(r)), "o")


def dash_of(r):
    """A variant's line style (the family's own label: solid); capacity's drop policy by position: dashed."""
    label = _label(r)
    if family(label) == "capacity":
        return "--" if R.parse_label(label)[1].get("drop_policy") == "position" else "-"
    return DASHES[step_of(label) % len(DASHES)]


def look(r, **kw):
    """Keyword arguments for ax.plot: colour, marker, line style of the strategy."""
    return dict(dict(color=color_of(r), marker=marker_of(r), ls=dash_of(r), mec=edge_of(r), mew=0.6), **kw)


def legend_handle(r, line=True, **kw):
    lk = look(r, **kw)
    if not line:
        lk["ls"] = "none"
    return Line2D([], [], **lk)


# ---- chunk counts: one colour per count in every figure ----

def chunk_colour(n):
    """0 (a layer stored whole) light grey; 1 .. 16 chunks yellow to purple (viridis by log2 of the count)."""
    import math
    if n == 0:
        return "#d0d0d0"
    return plt.get_cmap("viridis")(max(0.0, 1.0 - math.log2(n) / 4.0))


def chunk_scale(values):
    """(cmap, norm, index of each value, the counts on the colour bar): 0, 1, 2, 4, 8 always, others where present."""
    counts = sorted(set(values) | {0, 1, 2, 4, 8})
    cmap = mcolors.ListedColormap([chunk_colour(v) for v in counts])
    norm = mcolors.BoundaryNorm([i - 0.5 for i in range(len(counts) + 1)], cmap.N)
    return cmap, norm, {v: i for i, v in enumerate(counts)}, counts


def chunk_colorbar(fig, im, counts, ax, **kw):
    if isinstance(ax, list) and len(ax) > 1:
        kw.setdefault("shrink", 0.6)
    cb = fig.colorbar(im, ax=ax, ticks=range(len(counts)), **kw)
    cb.ax.set_yticklabels(["0 (stored)" if v == 0 else str(v) for v in counts])
    cb.set_label("chunks per layer and step", fontsize=SMALL + 1)
    return cb


# ---- figures ----

def figure(nrows=1, ncols=1, legend_row=False, **kw):
    """plt.subplots in a layout that keeps titles, legends and colour bars apart; `legend_row`: a row
    above the panels for a legend shared by all of them (returned last: figure, axes, legend axes)."""
    _taken.clear()
    if not legend_row:
        return plt.subplots(nrows, ncols, layout="constrained", **kw)
    figsize = kw.pop("figsize", None)
    fig = plt.figure(figsize=figsize, layout="constrained")
    ratios = kw.pop("gridspec_kw", {}).get("height_ratios") or [1] * nrows
    outer = fig.add_gridspec(2, 1, height_ratios=[0.001, sum(ratios)])
    lax = fig.add_subplot(outer[0])
    lax.axis("off")
    axes = outer[1].subgridspec(nrows, ncols, height_ratios=ratios).subplots(**kw)
    return fig, axes, lax


def legend(lax, handles, labels, ncol=3, **kw):
    """The shared legend, in the row above the panels (never over data): at most `ncol` columns, fewer
    where its longest label would not fit the figure's width."""
    fits = int(lax.figure.get_size_inches()[0] * 72 / (plt.rcParams["legend.fontsize"] * 0.56))
    longest = max([len(t) for t in labels] + [1]) + 7  # the handle and the gap
    lax.legend(handles, labels, loc="center", ncol=max(1, min(ncol, fits // longest)), frameon=False, **kw)


def file_stem(stem):
    """A file name made from data (an experiment's name) that stays inside the output folder: no
    separators, no leading dots."""
    safe = re.sub(r"[^A-Za-z0-9._=+-]", "_", str(stem)).lstrip(".")
    return safe[:200] or "unnamed"


def save(fig, out_dir, stem, caption, tight=True):
    """Writes PNG and PDF with the caption (source and config) along the bottom, wrapped to the width.
    The layout is the figure's own (constrained); `tight` is kept for callers that pass it."""
    stem = file_stem(stem)
    width = fig.get_size_inches()[0]
    per_line = int(width * 72 / (SMALL * 0.58))
    text = "\n".join(textwrap.fill(part, per_line) for part in caption.split("\n"))
    fig.supxlabel(text, x=0.005, ha="left", fontsize=SMALL, color="0.35", linespacing=1.1)
    paths = []
    os.makedirs(out_dir, exist_ok=True)
    for ext in ("png", "pdf"):
        p = os.path.join(out_dir, f"{stem}.{ext}")
        # No creation date in the PDF: re-plotting the same records gives the same files.
        fig.savefig(p, dpi=DPI, metadata={"CreationDate": None} if ext == "pdf" else None)
        paths.append(p)
    plt.close(fig)
    return paths


def write_table(out_dir, stem, title, header, rows, notes, formats=("md", "tex")):
    """The table as Markdown and LaTeX (and CSV when asked), its notes under it."""
    stem = file_stem(stem)
    os.makedirs(out_dir, exist_ok=True)
    paths = []
    if "md" in formats:
        md = [f"# {title}", ""] + tables.markdown(header, rows) + [""] + notes
        paths.append(os.path.join(out_dir, stem + ".md"))
        with open(paths[-1], "w") as f:
            f.write("\n".join(md) + "\n")
    if "tex" in formats:
        esc = lambda s: str(s).replace("%", "\\%").replace("_", "\\_").replace("&", "\\&").replace("#", "\\#")
        tex = ["% " + title, "\\begin{tabular}{" + "l" * len(header) + "}", "\\hline",
               " & ".join(esc(h) for h in header) + " \\\\", "\\hline"]
        tex += [" & ".join(esc(c) for c in row) + " \\\\" for row in rows]
        tex += ["\\hline", "\\end{tabular}"] + ["% " + n for n in notes]
        paths.append(os.path.join(out_dir, stem + ".tex"))
        with open(paths[-1], "w") as f:
            f.write("\n".join(tex) + "\n")
    if "csv" in formats:
        paths.append(os.path.join(out_dir, stem + ".csv"))
        with open(paths[-1], "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(header)
            w.writerows(rows)
    return paths


def mark_oom(ax, x, y, label="OOM", color="black"):
    """An out-of-memory point: a cross and its word, inside the axes."""
    ax.plot([x], [y], marker="x", color=color, ms=7, mew=1.5, ls="none", clip_on=False, zorder=4)
    ax.annotate(label, (x, y), textcoords="offset points", xytext=(4, 3), fontsize=SMALL, color=color)


def dress(ax, xlabel, ylabel, title, legend=True):
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if legend and ax.get_legend_handles_labels()[0]:
        ax.legend()


def bytes_unit(values):
    """(unit, divisor) for a set of byte counts: MiB, or GiB past 2 GiB."""
    top = max([v for v in values if v] or [0])
    return ("GiB", 2.0 ** 30) if top > 2 * 2 ** 30 else ("MiB", R.MIB)


def spread_ms(r):
    """(median, min, max) step time of a record (its median thrice where no spread is recorded)."""
    s = r.get("step_ms")
    if isinstance(s, dict):
        return s["median"], s.get("min", s["median"]), s.get("max", s["median"])
    m = R.median_ms(r)
    return m, m, m


def dodge(k, n, span, width=0.012):
    """The sideways offset of series k of n (a fraction of the x span, all of them within 8% of it):
    points at one x stay visible."""
    return (k - (n - 1) / 2) * min(width, 0.08 / max(1, n - 1)) * span


def layer_look(i, n):
    """A layer's line (not a strategy's): black to light grey, a dash of its own."""
    return dict(color=str(round(0.55 * i / max(1, n - 1), 3)), ls=DASHES[i % len(DASHES)])


def suptitle(fig, text):
    """The figure's title, each line wrapped to the figure's width (nothing cut at its edges)."""
    per_line = int(fig.get_size_inches()[0] * 72 / (plt.rcParams["figure.titlesize"] * 0.56))
    fig.suptitle("\n".join(textwrap.fill(line, per_line) for line in text.split("\n")))
