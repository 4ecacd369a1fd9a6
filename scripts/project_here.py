"""memfine project checked on a run we own: measures experiments/project_here.yaml with `memfine
run` (one rank, and the hottest of 8 emulated ranks) and, in the same run on the same machine, the
kernel rates `memfine project` divides by (memfine_bench at the experiment's shapes: a dense
matmul, an expert's two GEMMs forward and backward against rows per expert, a memory copy); writes them
as a hardware preset, projects each measured point with it and keeps everything in
results/cpu/project_here/ (scripts/plots/project.py sets projected beside measured). No rate is
taken from the step times it is checked against."""
import argparse
import json
import os
import subprocess
import sys

import yaml

EXPERIMENT = "experiments/project_here.yaml"


def sh(args, **kw):
    print("project_here: " + " ".join(args), file=sys.stderr)
    p = subprocess.run(args, capture_output=True, text=True, **kw)
    if p.returncode not in (0, 1):  # memfine run exits 1 when a point failed: its records say so
        sys.exit(f"project_here: {' '.join(args)} failed ({p.returncode}): {p.stderr.strip()[-2000:]}")
    return p.stdout


def medians(bench):
    """{benchmark run name: its median aggregate}."""
    return {b["run_name"]: b for b in bench["benchmarks"] if b.get("aggregate_name") == "median"}


def hardware(bench, memory_gb):
    """This machine as memfine project reads a hardware preset, every rate from the benchmark."""
    med = medians(bench)
    gemm = next(b for n, b in med.items() if n.startswith("BM_Matmul/512"))["FLOPS"] / 1e12
    curve = sorted((b["rows"], b["FLOPS"] / 1e12) for n, b in med.items() if n.startswith("BM_ExpertGemm/"))
    copy = next(b for n, b in med.items() if n.startswith("BM_Copy"))["bytes_per_second"] / 1e9
    return {
        "memory_gb": memory_gb,
        "gpus_per_node": 1024,  # emulated ranks: nothing crosses a link
        "gemm_tflops": gemm,
        # The suite's attention multiplies the whole square and masks half: the causal FLOPs run at
        # half the matmul rate.
        "attention_tflops": gemm / 2,
        "grouped_gemm_curve": [[float(rows), r] for rows, r in curve],
        "hbm_gb_s": copy,
        "nvlink_gb_s": 1e6, "network_gb_s": 1e6, "nvlink_latency_us": 0, "network_latency_us": 0,
    }


def mean_and_worst(rs):
    """The hottest rank's overload in its worst layer and over its layers on average, as the records
    measured them (tokens_received is the worst layer's, overload_factor its s' over the balanced share)."""
    r = max(rs, key=lambda r: r["overload_factor"])
    worst = max(1.0, r["overload_factor"])
    layers, share = r["tokens_received_per_layer"], r["tokens_received"] / r["overload_factor"]
    return {"overload": worst, "mean": max(1.0, min(worst, sum(layers) / len(layers) / share))}


def measured_memory_gb(bench, previous_hardware):
    """The memory of the machine that measured: the benchmark's context names it; records measured
    before it did have it only in the hardware preset written beside them then."""
    if "memory_gb" in bench.get("context", {}):
        return float(bench["context"]["memory_gb"])
    with open(previous_hardware) as f:
        return float(yaml.safe_load(f)["this_machine"]["memory_gb"])


def main(argv=None):
    ap = argparse.ArgumentParser(prog="project_here.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build", help="the build folder (default build)")
    ap.add_argument("--out", default="results/cpu/project_here", help="output folder")
    ap.add_argument("--remeasure", action="store_true", help="measure again although records exist")
    ap.add_argument("--experiment", default=EXPERIMENT,
                    help=f"the experiment to measure and project (default {EXPERIMENT}; CI's quick run passes a "
                         "smaller copy, scripts/experiment_variant.py)")
    a = ap.parse_args(argv)
    os.makedirs(a.out, exist_ok=True)
    records = os.path.join(a.out, "results.jsonl")
    bench_path = os.path.join(a.out, "bench.json")
    if a.remeasure or not os.path.exists(records) or not os.path.exists(bench_path):
        for p in (records, bench_path):
            if os.path.exists(p):
                os.replace(p, p + ".old")  # kept beside, never lost
        sh([f"{a.build}/memfine", "run", a.experiment, "--out", a.out, "--no-progress"])
        meminfo = open("/proc/meminfo").read().split()
        memory_gb = float(meminfo[meminfo.index("MemTotal:") + 1]) * 1024 / 1e9
        sh([f"{a.build}/memfine_bench", f"--moe_config={a.experiment}", f"--benchmark_context=memory_gb={memory_gb}",
            "--benchmark_filter=BM_Matmul/512|BM_ExpertGemm|BM_Copy", "--benchmark_repetitions=3",
            "--benchmark_report_aggregates_only=true", f"--benchmark_out={bench_path}", "--benchmark_out_format=json"])
    with open(bench_path) as f:
        bench = json.load(f)
    recs = [json.loads(l) for l in open(records) if l.strip()]
    hw = hardware(bench, measured_memory_gb(bench, os.path.join(a.out, "hardware.yaml")))
    with open(os.path.join(a.out, "hardware.yaml"), "w") as f:
        f.write("# This machine's rates, from bench.json (memfine_bench at experiments/project_here.yaml's shapes)\n")
        yaml.safe_dump({"this_machine": hw}, f, sort_keys=False)
    rows = []
    for point in sorted({r["point"] for r in recs}):
        rs = [r for r in recs if r["point"] == point and r.get("status") == "ok"]
        if not rs:
            continue
        c = rs[0]["config"]
        m, ep = c["model"], c["parallel"]["ep"]
        project = {
            "name": f"project_here {point}",
            "model": {k: m[k] for k in ("layers", "hidden", "heads", "kv_heads", "head_dim", "ffn_hidden", "experts",
                                        "topk", "seq", "attention")} | {"vocab": 0, "shared_experts": m.get("shared_experts", 0)},
            "hardware": hw,
            "gpus": ep,
            "global_batch": ep * m.get("micro_batch", 1),
            # The worst layer's overload (memory) and the layers' mean (what a step waits for), as measured.
            "imbalance": mean_and_worst(rs),
            # This suite's own layer, on a CPU: no CUDA context, NCCL or caching allocator beside it.
            "framework": {"name": "memfine_layer", "workspace_gb": 0, "fragmentation": 0},
            "dtype": c.get("dtype", "float32"),
            "usable_memory": 1.0,
            "search": {"tp": [1], "pp": [1], "ep": [ep], "cp": [1], "micro_batch": [m.get("micro_batch", 1)], "vpp": [1]},
            "strategies": sorted({r["strategy"] for r in rs}),
        }
        path = os.path.join(a.out, f"project_{point.replace('=', '').replace('.', '_')}.yaml")
        with open(path, "w") as f:
            yaml.safe_dump(project, f, sort_keys=False)
        for j in map(json.loads, sh([f"{a.build}/memfine", "project", path, "--json"]).splitlines()):
            measured = next(r for r in rs if r["strategy"] == j["strategy"])
            j.pop("file", None)  # the file is project_file
            rows.append(dict(j, point=point, measured_step_ms=measured["step_ms"]["median"],
                             measured_env=measured["env"], project_file=path))
    with open(os.path.join(a.out, "projection.jsonl"), "w") as f:
        for r in rows:
            f.write(json.dumps(r, sort_keys=True) + "\n")
    print(f"project_here: {len(rows)} projections beside their measurements in {a.out}/projection.jsonl")
    return 0


if __name__ == "__main__":
    sys.exit(main())
