"""The one Markdown table writer: a header and rows of cells as the lines of a table."""


def markdown(header, rows=()):
    """A Markdown table's lines: the header, its separator, a line per row (cells as str())."""
    line = lambda cells: "| " + " | ".join(str(c) for c in cells) + " |"
    return [line(header), "|" + "---|" * len(header)] + [line(r) for r in rows]
