"""experiments/project/errors.yaml's figures, as scripts/projection_errors.py writes them: how the range
`memfine project` gives was judged, and the need's ranges by framework profile."""
import os
import re

ERRORS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                      "experiments", "project", "errors.yaml")


def _errors_text(path):
    """errors.yaml's text, or None without the file."""
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return f.read()


def _speed_figures(path, keys):
    """errors.yaml's speed section's figures by key, or None without the file or one of them."""
    text = _errors_text(path)
    if text is None:
        return None
    speed = text[text.index("speed:"):text.index("memory:")]
    got = {k: re.search(rf"^  {k}: ([0-9.]+)$", speed, re.M) for k in keys}
    return None if None in got.values() else {k: float(m.group(1)) for k, m in got.items()}


def held_out(path=ERRORS):
    """errors.yaml's leave-one-out figures of the range on the first projections: (coverage, half-width,
    runs, level), or None without the file."""
    got = _speed_figures(path, ("held_out_coverage", "held_out_half_width", "runs", "level"))
    return got and (got["held_out_coverage"], got["held_out_half_width"], int(got["runs"]), got["level"])


def judged(prefix, count, path=ERRORS):
    """errors.yaml's figures of the range judged one way (`held_out_by_family`: each source family left
    out; `in_order`: each run by the runs before it): (coverage, half-width, how many), or None."""
    got = _speed_figures(path, (f"{prefix}_coverage", f"{prefix}_half_width", count))
    return got and (got[f"{prefix}_coverage"], got[f"{prefix}_half_width"], int(got[count]))


def need_ranges(path=ERRORS):
    """errors.yaml's need ranges by framework profile, [(profile, runs, low, high)], and their
    leave-one-out coverage (a share, or None); None without the file."""
    text = _errors_text(path)
    if text is None:
        return None
    memory = text.split("\nmemory:", 1)[-1]
    ranges = [(m[1], int(m[2]), float(m[3]), float(m[4])) for m in
              re.finditer(r"^  (\w+): \{runs: (\d+), low: ([0-9.]+), high: ([0-9.]+)\}", memory, re.M)]
    held = re.search(r"held (\d+)%", memory)
    return ranges, (int(held[1]) / 100 if held else None)
