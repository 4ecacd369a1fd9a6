"""Projects the validation cases and the cluster-size sweep with `memfine project` and `memfine
checkpoint`, into results/model/ (JSON lines that name the commit and date they were made at):
  project_validation.jsonl  every case of experiments/project/validation/*.yaml (published figures
                            carried beside the projection)
  project_checkpoint.jsonl  the checkpoint cases of experiments/project/validation/checkpoint.csv
  project_layers.jsonl      every layer-level case of experiments/project/layers/*.yaml (one MoE
                            layer's published forward and backward beside the projection's)
  project_scaling.jsonl     experiments/project_deepseek_v3.yaml at each cluster size (global batch
                            scaled with it): the best layout of each strategy, and what was rejected
  project_paper_chunks.jsonl  experiments/project_paper_chunks.yaml: full recomputation and 8 chunks
                            at the paper's shapes and imbalance on H100, every layout (fitting or not)
scripts/plots/project.py turns them into the validation table and the goodput figure."""
import argparse
import csv
import glob
import json
import os
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

SIZES = (128, 256, 512, 1024, 2048, 4096, 8192, 16384)


def run(memfine, args, file_key=None, who="project_cases"):
    """memfine's JSON lines; the file a line projects (`memfine project` names it) kept as `file_key`,
    else dropped. A failure ends the script `who`, with memfine's own words."""
    p = subprocess.run([memfine] + args, capture_output=True, text=True)
    if p.returncode != 0:  # memfine's status kept: 2 for a file with problems
        print(f"{who}: memfine {' '.join(args)} failed ({p.returncode}): {p.stderr.strip()}", file=sys.stderr)
        sys.exit(p.returncode if p.returncode > 0 else 1)
    rows = [json.loads(line) for line in p.stdout.splitlines() if line.strip()]
    for r in rows:
        f = r.pop("file", None)
        if file_key and f is not None:
            r[file_key] = f
    return rows


def project_files(memfine, files, jobs, extra=(), who="project_cases"):
    """`memfine project --json`'s lines for the files, each naming its `case_file`, in the files'
    order: a process starts in about a second (LibTorch's registrations) and projects a case in much
    less, so each core's process projects its share of the files in one start."""
    cores = os.cpu_count() or 1
    share = -(-len(files) // cores) or 1
    shares = [files[i:i + share] for i in range(0, len(files), share)]
    rows = []
    for got in jobs.map(lambda fs: run(memfine, ["project", *fs, "--json", *extra], "case_file", who), shares):
        rows += got
    return rows


def write(path, rows):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        for r in rows:
            f.write(json.dumps(r, sort_keys=True) + "\n")
    os.replace(tmp, path)  # nothing half-written is left where a reader looks
    print(f"project_cases: wrote {path} ({len(rows)} lines)")


def main(argv=None):
    ap = argparse.ArgumentParser(prog="project_cases.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--memfine", default="build/memfine", help="the binary (default build/memfine)")
    ap.add_argument("--cases", default="experiments/project/validation", help="the validation cases' folder")
    ap.add_argument("--layers", default="experiments/project/layers", help="the layer-level cases' folder")
    ap.add_argument("--sweep", default="experiments/project_deepseek_v3.yaml", help="the project file swept over sizes")
    ap.add_argument("--chunks", default="experiments/project_paper_chunks.yaml",
                    help="the project file of what a chunk costs at the paper's shapes")
    ap.add_argument("--out", default="results/model", help="output folder (default results/model)")
    a = ap.parse_args(argv)
    os.makedirs(a.out, exist_ok=True)
    # The cases a share a core (project_files); the sizes, each a wide search, one process each.
    jobs = ThreadPoolExecutor(max_workers=os.cpu_count() or 1)
    for folder, name in ((a.cases, "project_validation.jsonl"), (a.layers, "project_layers.jsonl")):
        cases = sorted(glob.glob(os.path.join(folder, "*.yaml")))
        write(os.path.join(a.out, name), project_files(a.memfine, cases, jobs))
    rows = []
    with open(os.path.join(a.cases, "checkpoint.csv"), newline="") as f:
        for c in csv.DictReader(f):
            (r,) = run(a.memfine, ["checkpoint", "--json"] + shlex.split(c["args"]))
            rows.append(dict(r, case=c["case"], args=c["args"], quantity=c["quantity"], published=c["published"],
                             source=c["source"]))
    write(os.path.join(a.out, "project_checkpoint.jsonl"), rows)
    base = next(r for r in run(a.memfine, ["project", a.sweep, "--json"]))
    per_gpu = base["layout"]["global_batch"] / base["gpus"]
    rows = []
    sized = jobs.map(lambda n: run(a.memfine, ["project", a.sweep, "--json", "--gpus", str(n), "--global-batch",
                                             str(max(1, round(per_gpu * n)))]), SIZES)
    for n, got in zip(SIZES, sized):
        best = {}
        for r in got:
            if r["fits"] and r["strategy"] not in best:
                best[r["strategy"]] = r  # ranked: the first of a strategy is its best
        rejected = {}
        for r in got:
            if not r["fits"]:
                why = r["why"].split(":")[0]
                rejected[why] = rejected.get(why, 0) + 1
        strategies = sorted({(r["strategy"], r.get("name", r["strategy"])) for r in got if r["strategy"]})
        for s, name in strategies:
            row = best.get(s) or {"project": base["project"], "gpus": n, "strategy": s, "name": name, "fits": False,
                                  "git_commit": base["git_commit"], "date": base["date"]}
            rows.append(dict(row, rejected=rejected, layouts=len(got)))
    write(os.path.join(a.out, "project_scaling.jsonl"), rows)
    write(os.path.join(a.out, "project_paper_chunks.jsonl"), run(a.memfine, ["project", a.chunks, "--json"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
