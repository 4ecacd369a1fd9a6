"""What the GPU probe and summary scripts share: the command line of scripts/trace_summary.py and
scripts/memory_history.py (files in, one summary each, a table for people on stdout and --json
FILE for programs), the commit the probes' JSON names, and how a probe gives its JSON."""
import argparse
import json
import os
import sys


def main(argv, doc, what, top, summarize, show):
    """Summarizes each file named in `argv` with summarize(path, top) and prints them with
    show(rows); a file it cannot read (OSError, ValueError) is said on stderr, exit status 1."""
    prog = os.path.splitext(os.path.basename(sys.argv[0]))[0]
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("files", nargs="+", metavar=what)
    ap.add_argument("--top", type=int, default=top)
    ap.add_argument("--json", help="also write the summaries here")
    a = ap.parse_args(argv)
    rows = []
    for p in a.files:
        try:
            rows.append(summarize(p, a.top))
        except (OSError, ValueError) as e:
            print(f"{prog}: {e}", file=sys.stderr)
            return 1
    show(rows)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


def source_commit():
    """The commit this checkout's files are: $MEMFINE_SOURCE_COMMIT, else .deps/source's (written by
    scripts/gpu-deps, which the GPU machine receives with the files), else git's; None if unknown."""
    if os.environ.get("MEMFINE_SOURCE_COMMIT"):
        return os.environ["MEMFINE_SOURCE_COMMIT"]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        with open(os.path.join(root, ".deps", "source")) as f:
            return f.read().split()[0]
    except (OSError, IndexError):
        pass
    import subprocess
    try:
        return subprocess.run(["git", "-C", root, "rev-parse", "--short=12", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip() or None
    except (OSError, subprocess.CalledProcessError):
        return None


def emit(doc, path=None):
    """A probe's result: indented JSON on stdout, and in `path` too where one is given."""
    text = json.dumps(doc, indent=1)
    print(text)
    if path:
        with open(path, "w") as f:
            f.write(text + "\n")
