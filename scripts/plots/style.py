"""How every figure and table looks and is written: one colour per strategy, captions naming the
source, PNG and PDF that re-plot byte for byte, tables as Markdown, LaTeX and CSV."""
import csv
import hashlib
import os
import warnings

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from . import records as R  # noqa: E402

# The paper's methods keep the paper's colours; every other strategy takes its family's colour (its
# registered name's), variants of one family lighter or darker by their label, so a family looks the
# same in every figure and adding a strategy never recolours the ones already there.
_FIXED = [(R.BASELINE, "tab:blue"), (R.FIXED8, "tab:orange"), (R.MACT, "tab:green"), (R.STORE_WHEN_FITS, "tab:red"),
          (R.OBJECTIVE_TIME, "tab:purple"), (R.REFERENCE, "tab:gray")]
_FAMILY = {"no_recompute": "#7f7f7f", "full_recompute": "#1f77b4", "moe_recompute": "#8c564b",
           "moe_act_recompute": "#17becf", "memfine": "#ff7f0e", "moeblaze": "#bcbd22", "capacity": "#e377c2",
           "offload": "#2ca02c", "compress": "#9467bd", "chunked_ep": "#d62728", "paged_stash": "#393b79"}
_MARKER = {"no_recompute": "o", "full_recompute": "s", "moe_recompute": "^", "moe_act_recompute": "v",
           "memfine": "D", "moeblaze": "P", "capacity": "X", "offload": "*", "compress": "h", "chunked_ep": "<",
           "paged_stash": ">"}


def _shade(hex_colour, label):
    """The family's colour, lighter or darker by the label (the family's own label keeps it)."""
    import matplotlib.colors as mc
    rgb = mc.to_rgb(hex_colour)
    k = int(hashlib.md5(label.encode()).hexdigest(), 16) % 5
    t = (0.0, 0.3, -0.3, 0.5, -0.45)[k] if "(" in label else 0.0
    return tuple(c + (1 - c) * t if t > 0 else c * (1 + t) for c in rgb)


def color_of(r):
    """A record's (or a label's) colour."""
    if isinstance(r, dict):
        fixed = next((c for how, c in _FIXED if R.matches(r, **how)), None)
        if fixed:
            return fixed
        label = r["strategy"]
    else:
        label = r
    family = label.split("(")[0]
    if family in _FAMILY:
        return _shade(_FAMILY[family], label)
    # tab20 without the fixed strategies' colours (blue, orange, green, red, purple, grey).
    palette = [c for i, c in enumerate(plt.get_cmap("tab20").colors) if i not in (0, 2, 4, 6, 8, 14)]
    return palette[int(hashlib.md5(label.encode()).hexdigest(), 16) % len(palette)]


def marker_of(r):
    """A record's (or a label's) marker: its family's."""
    label = r["strategy"] if isinstance(r, dict) else r
    return _MARKER.get(label.split("(")[0], "o")


def figure(*args, **kw):
    return plt.subplots(*args, **kw)


def save(fig, out_dir, stem, caption, tight=True):
    """Writes PNG and PDF with the caption (source and config) along the bottom, wrapped so that
    none of it is cut off."""
    width = fig.get_size_inches()[0]
    fig.text(0.01, 0.005, caption, fontsize=6, color="0.35", ha="left", va="bottom", wrap=True)
    lines = max(1, int(len(caption) * 6 * 0.55 / 72 / (width * 0.98)) + 1 + caption.count("\n"))
    bottom = min(0.3, 0.02 + lines * 0.012 * 8 / fig.get_size_inches()[1])
    if tight:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fig.tight_layout(rect=(0, bottom, 1, 1))
    else:
        fig.subplots_adjust(bottom=max(fig.subplotpars.bottom, bottom + 0.08))
    paths = []
    os.makedirs(out_dir, exist_ok=True)
    for ext in ("png", "pdf"):
        p = os.path.join(out_dir, f"{stem}.{ext}")
        # No creation date in the PDF: re-plotting the same records gives the same files.
        fig.savefig(p, dpi=150, metadata={"CreationDate": None} if ext == "pdf" else None)
        paths.append(p)
    plt.close(fig)
    return paths


def write_table(out_dir, stem, title, header, rows, notes, formats=("md", "tex")):
    """The table as Markdown and LaTeX (and CSV when asked), its notes under it."""
    os.makedirs(out_dir, exist_ok=True)
    paths = []
    if "md" in formats:
        md = [f"# {title}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        md += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
        md += [""] + notes
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


def mark_oom(ax, x, y_top, label="OOM", color="tab:red"):
    ax.plot([x], [y_top], marker="x", color=color, ms=8, ls="none")
    ax.annotate(label, (x, y_top), textcoords="offset points", xytext=(3, 3), fontsize=7, color=color)


def dress(ax, xlabel, ylabel, title, legend=True):
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    if legend and ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)


def bytes_unit(values):
    """(unit, divisor) for a set of byte counts: MiB, or GiB past 2 GiB."""
    top = max([v for v in values if v] or [0])
    return ("GiB", 2.0 ** 30) if top > 2 * 2 ** 30 else ("MiB", R.MIB)
