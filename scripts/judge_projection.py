"""Judges `memfine project` on published runs, yours or any it never saw: case files as
experiments/project/validation/ holds them (one layout per strategy, `published:` with what the run
measured, `out_of_memory: true` for one that did not fit). Each file is projected now, with the range
and the calibration of the presets' errors.yaml, and set beside its published figures by the checks
REPORT.md applies to the validation set: the throughput error (tokens/s a GPU, else the step time,
else model TFLOP/s), whether the range holds the published figure, fit against what the source saw,
and a published peak. Then the verdict against the goals for runs held out from the projection:
median absolute throughput error at most 15% and none over 35%, the range holding at least 80% of
them with a median half-width of at most 20%, every layout that ran projected to fit or borderline,
peaks within 10%.

A run the repository's validation already holds (the same model, GPUs, layout, strategy and
published figures in results/model/project_validation.jsonl) is not held out: the projection may
have been shaped by it. It is listed, marked `seen`, and left out of the verdict; where every run
given is one, the verdict is over them all and says so. A run whose file names a `known_issue` or a
`calibration` is listed and not counted, as in REPORT.md.

exit status: 0 (whatever the verdict), 2 for a path or file with problems (nothing is judged)."""
import argparse
import glob
import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from plots import held_out as H  # noqa: E402
from plots import tables as T  # noqa: E402
from plots import validation as V  # noqa: E402
from project_cases import project_files  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEEN = os.path.join(ROOT, "results", "model", "project_validation.jsonl")


def fail(*problems):
    """Ends with exit 2, a line a problem."""
    for p in problems:
        print(f"judge_projection: {p}", file=sys.stderr)
    sys.exit(2)


def case_files(paths):
    """The case files the paths name: a file itself, a folder's *.yaml; a path that is neither is an error."""
    files = []
    for p in paths:
        if os.path.isdir(p):
            found = sorted(glob.glob(os.path.join(p, "*.yaml")))
            if not found:
                fail(f"{p}: no .yaml case files in this folder")
            files += found
        elif os.path.isfile(p):
            files.append(p)
        else:
            fail(f"{p}: no such file or folder")
    return files


def identity(r):
    """What makes a published run the same run: model, GPUs, hardware, layout, strategy, its figures."""
    return json.dumps([r.get("model"), r.get("hardware"), r.get("gpus"), r.get("layout"), r.get("strategy"),
                       (r.get("published") or {}).get("values")], sort_keys=True)


def seen_runs(path=SEEN):
    """The identities of the runs the repository's validation holds; empty without its results."""
    if not os.path.exists(path):
        return set()
    with open(path) as f:
        return {identity(json.loads(line)) for line in f if line.strip()}


def project(memfine, files, presets):
    """`memfine project --json`'s lines for the files, each naming its case file."""
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as jobs:
        return project_files(memfine, files, jobs, ("--presets", presets), "judge_projection")


def published_lines(lines, files):
    """The lines with published figures; a file with none, or with several layouts of one strategy
    (a published run is one layout), is an error."""
    out, per = [], {}
    for r in lines:
        if r.get("published") and r.get("strategy"):
            out.append(r)
            per.setdefault((r["case_file"], r["strategy"]), []).append(r)
    problems = [f"{f}: published: none (a run's measured figures are what it is judged against)"
                for f in files if not any(k[0] == f for k in per)]
    problems += [f"{f}: search: {len(rs)} layouts for {s}; a published run is one layout (one value for each "
                 "search key)" for (f, s), rs in per.items() if len(rs) > 1]
    if problems:
        fail(*problems)
    return out


def verdict(rows):
    """The held-out goals: each figure, its goal and whether it is met. As REPORT.md counts them: the
    throughput and its range over the runs neither calibration nor known issue, peaks and fit over all."""
    counted = [r for r in rows if not r["calibration"] and not r["known_issue"]]
    matrix = V.fit_counts(rows, "fit")
    goals = H.goals([r["throughput"][3] for r in counted if "throughput" in r],
                    [r["range"] for r in counted if "range" in r], [r["peak"][3] for r in rows if "peak" in r],
                    matrix[("ran", "no")], sum(r["ran"] for r in rows))
    return {"runs": len(counted), "goals": goals, "matrix": matrix}


def report(rows, judged, note):
    """The people's text: a row a run, then the verdict's table and the fit matrix."""
    table = []
    for r in rows:
        flags = [f for f, on in (("seen", r["seen"]), ("known issue", r["known_issue"]),
                                 ("calibration", r["calibration"])) if on]
        rng = "-" if "range" not in r else ("holds" if r["range"][0] else "misses") + f" (±{100 * r['range'][1]:.0f}%)"
        saw = "ran" if r["ran"] else "out of memory"
        table.append([r["case"] + (f" ({', '.join(flags)})" if flags else ""), f"{r['layout']}, {r['strategy']}",
                      f"{saw}; projected {r['fit']} ({r['need_gb']:.1f} GB)", V.throughput_cell(r), rng, V.peak_cell(r)])
    out = T.markdown(["run", "layout, strategy", "fit", "throughput: projected vs published", "range", "peak GB"],
                     table)
    out += ["", f"Verdict over {judged['runs']} runs{note}:", ""]
    out += H.table([("value", judged["goals"])])
    out += ["", "Fit: what the source saw against what the projection said:", ""] + V.fit_matrix(judged)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(prog="judge_projection.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("paths", nargs="+", metavar="PATH", help="case files, or folders of them (*.yaml)")
    ap.add_argument("--memfine", default=os.path.join(ROOT, "build", "memfine"),
                    help="the binary (default build/memfine)")
    ap.add_argument("--presets", default=os.path.join(ROOT, "experiments", "project"),
                    help="the model and hardware presets and errors.yaml (default experiments/project)")
    ap.add_argument("--json", action="store_true", help="one JSON object (each run, the verdict) instead of tables")
    a = ap.parse_args(argv)
    files = case_files(a.paths)
    if not os.access(a.memfine, os.X_OK):
        fail(f"{a.memfine}: not an executable memfine (scripts/build makes it)")
    rows = V.published_runs(published_lines(project(a.memfine, files, a.presets), files))
    known = seen_runs()
    for r in rows:
        r["seen"] = identity(r["record"]) in known
    held = [r for r in rows if not r["seen"]]
    left = len(rows) - len(held)
    note = ((" held out from the validation" + (f" ({left} it holds left out)" if left else "")) if held else
            ", all of them in the repository's validation (in sample: the projection may have been shaped by them)")
    judged = verdict(held or rows)
    if a.json:
        keep = ("case", "layout", "strategy", "seen", "ran", "fit", "need_gb", "throughput", "range", "peak",
                "known_issue", "calibration")
        goals = [dict(zip(("what", "value", "goal", "met"), g)) for g in judged["goals"]]
        fit = {f"{saw} / {said}": n for (saw, said), n in judged["matrix"].items()}
        print(json.dumps({"runs": [{k: r[k] for k in keep if k in r} for r in rows],
                          "verdict": {"over": "held out" if held else "in sample", "runs": judged["runs"],
                                      "goals": goals, "fit": fit}}, indent=1))
    else:
        print("\n".join(report(rows, judged, note)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
