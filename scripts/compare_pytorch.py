"""Our baselines against eager PyTorch on one experiment point (scripts/compare-pytorch).

Runs `memfine export` (weights, data, routing), `memfine run` (every strategy of the file) and
tests/pytorch_reference.py (the same model in eager PyTorch: no recomputation, and
torch.utils.checkpoint per layer, non-reentrant and reentrant), then prints per strategy our
activation peak, loss and median step time beside PyTorch's. Our no_recompute is set against
PyTorch without checkpointing; every recomputing strategy of ours against the non-reentrant
checkpoint. With --check it exits 1 unless: every dropless strategy's loss equals PyTorch's
(1e-5 relative), no_recompute's peak is PyTorch's (1%), full_recompute's is at or below the
checkpoint's (1%), and every memfine strategy's is at or below our full_recompute's (1%).
The two step times come from two processes (ours interleaves its strategies in one).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOSS_RTOL, PEAK_TOL = 1e-5, 0.01


def mib(b):
    return "-" if b is None else f"{b / 2**20:.2f}"


def sh(cmd, **kw):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
    if r.returncode != 0:
        sys.stderr.write(r.stdout + r.stderr)
        raise SystemExit(f"compare-pytorch: `{' '.join(cmd)}` failed (exit {r.returncode})")
    return r.stdout


def compare(yaml_path, point, memfine, work, threads):
    exp = os.path.join(work, "export")
    ours_dir = os.path.join(work, "ours")
    sh([memfine, "export", yaml_path, "--out", exp, "--point", str(point)])
    meta = json.load(open(os.path.join(exp, "state.json")))
    env = dict(os.environ, OMP_WAIT_POLICY=os.environ.get("OMP_WAIT_POLICY", "PASSIVE"))
    run = [memfine, "run", yaml_path, "--out", ours_dir, "--no-progress"]
    if threads is not None:
        run += ["--threads", str(threads)]
    sh(run, env=env)
    ours = [json.loads(l) for l in open(os.path.join(ours_dir, "results.jsonl")) if l.strip()]
    ours = [r for r in ours if r["point"] == meta["point"]]
    ref_cmd = [sys.executable, os.path.join(ROOT, "tests", "pytorch_reference.py"), exp]
    if threads is not None:
        ref_cmd += ["--threads", str(threads)]
    ref = {r["variant"]: r for r in map(json.loads, sh(ref_cmd, env=env).splitlines())}
    rows = []
    for r in ours:
        label = r["strategy"]
        name = label.split("(")[0]
        # PyTorch's counterparts: no checkpoint for no_recompute, the per-layer checkpoint for the
        # rest (the same model, for strategies that have no PyTorch counterpart of their own).
        variant = "no_recompute" if name == "no_recompute" else "checkpoint"
        p = ref[variant]
        dropless = r.get("dropped_fraction", 0) == 0
        rows.append({
            "strategy": label, "status": r["status"], "pytorch": variant,
            "ours_peak": r["peak_activation_bytes"], "pytorch_peak": p["peak_activation_bytes"],
            "ours_loss": r["loss"], "pytorch_loss": ref["no_recompute"]["loss"], "dropless": dropless,
            "ours_ms": (r.get("step_ms") or {}).get("median"), "pytorch_ms": p["step_ms"]["median"],
        })
    meta["env"] = ours[0]["env"] if ours else None  # machine, commit, threads, BLAS, date
    return meta, ref, rows


def check(rows):
    problems = []
    full = next((r for r in rows if r["strategy"] == "full_recompute"), None)
    for r in rows:
        s = r["strategy"]
        if r["status"] != "ok":
            problems.append(f"{s}: status {r['status']}")
            continue
        if r["dropless"]:
            rel = abs(r["ours_loss"] - r["pytorch_loss"]) / abs(r["pytorch_loss"])
            if rel > LOSS_RTOL:
                problems.append(f"{s}: loss {r['ours_loss']!r} vs PyTorch {r['pytorch_loss']!r} ({rel:.2e} relative)")
        ratio = r["ours_peak"] / r["pytorch_peak"]
        if s == "no_recompute" and abs(ratio - 1) > PEAK_TOL:
            problems.append(f"{s}: peak {ratio:.4f}x PyTorch's (must be equal within 1%)")
        if s == "full_recompute" and ratio > 1 + PEAK_TOL:
            problems.append(f"{s}: peak {ratio:.4f}x PyTorch's checkpoint (must be at most 1.01x)")
        if s.startswith("memfine") and full and full["status"] == "ok" and r["ours_peak"] > full["ours_peak"] * (1 + PEAK_TOL):
            problems.append(f"{s}: peak {r['ours_peak'] / full['ours_peak']:.4f}x our full_recompute (must be at most 1.01x)")
    return problems


def table(meta, ref, rows):
    out = [f"{meta['config']['name']}, point {meta['point']}: ours against eager PyTorch {ref['no_recompute']['torch']} "
           f"({ref['no_recompute']['threads']} threads); activation peak in MiB",
           f"{'strategy':<26} {'PyTorch as':<14} {'ours':>8} {'PyTorch':>8} {'ratio':>7} {'loss rel diff':>13} {'ours ms':>8} {'PyTorch ms':>10}"]
    for r in rows:
        ratio = "-" if not r["ours_peak"] else f"{r['ours_peak'] / r['pytorch_peak']:.3f}"
        rel = "-" if r["ours_loss"] is None else f"{abs(r['ours_loss'] - r['pytorch_loss']) / abs(r['pytorch_loss']):.1e}"
        if not r["dropless"]:
            rel += " (drops)"
        ms = "-" if r["ours_ms"] is None else f"{r['ours_ms']:.1f}"
        out.append(f"{r['strategy']:<26} {r['pytorch']:<14} {mib(r['ours_peak']):>8} {mib(r['pytorch_peak']):>8} {ratio:>7} "
                   f"{rel:>13} {ms:>8} {r['pytorch_ms']:>10.1f}")
    re = ref["checkpoint_reentrant"]
    out.append(f"{'(PyTorch reentrant checkpoint)':<41} {'':>8} {mib(re['peak_activation_bytes']):>8} {'':>7} {'':>13} {'':>8} "
               f"{re['step_ms']['median']:>10.1f}")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(prog="scripts/compare-pytorch", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("yaml", help="an experiment file (parallel.ep 1, device cpu)")
    ap.add_argument("--point", type=int, default=0, help="sweep point, 0-based (default 0)")
    ap.add_argument("--memfine", default=os.environ.get("MEMFINE_BIN", os.path.join(ROOT, "build", "memfine")))
    ap.add_argument("--threads", type=int, default=None, help="threads for both (default: the experiment's)")
    ap.add_argument("--json", help="also write the rows, PyTorch's variants and the configuration here")
    ap.add_argument("--check", action="store_true", help="exit 1 unless the targets above hold")
    a = ap.parse_args()
    if not os.access(a.memfine, os.X_OK):
        raise SystemExit(f"compare-pytorch: no memfine binary at {a.memfine} (build with scripts/build, or --memfine)")
    with tempfile.TemporaryDirectory(prefix="memfine-compare-") as work:
        meta, ref, rows = compare(a.yaml, a.point, a.memfine, work, a.threads)
    print(table(meta, ref, rows))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"config": meta["config"], "point": meta["point"], "env": meta["env"], "pytorch": ref, "rows": rows}, f,
                      indent=1)
    if a.check:
        problems = check(rows)
        for p in problems:
            print(f"compare-pytorch: FAIL: {p}", file=sys.stderr)
        if problems:
            sys.exit(1)
        print(f"compare-pytorch: {len(rows)} passed, 0 failed")


if __name__ == "__main__":
    main()
