"""The paper's figures and tables, and REPORT.md, from a results folder (what `scripts/reproduce`
regenerates): each recipe names the records it reads; a missing one is skipped, said so."""
import argparse
import os
import sys

from . import records as R
from .grouped_probe import grouped_probe
from .offload import offload
from .project import here as project_here, layers as project_layers, scaling as project_scaling, \
    validation as project_validation
from .paper import figure2, figure4, figure5, table4_measured, table4_modeled
from .quality import quality, train_ranks
from .report import report
from .savers import savers
from .sweeps import budget_sweep, capacity, chunks, imbalance, kernel_ops, kernels, model_error, strategies


def jobs(results, predictions):
    """The recipes for `results`; with `predictions` None, none of the projection's (results/model's)."""
    at = lambda name, file="results.jsonl": os.path.join(results, name, file)
    model = lambda name: os.path.join(os.path.dirname(predictions or ""), name)
    return [job for job in [
        ("table4_modeled", table4_modeled, predictions),
        ("table4_measured", table4_measured, at("paper_figure5")),
        ("figure2", figure2, at("paper_figure5")),
        ("figure4", figure4, at("paper_figure5")),
        ("figure5", figure5, at("paper_figure5")),
        # The same at the paper's imbalance (the hottest rank up to 20x its share; #47).
        ("table4_paper_imbalance", lambda src, out: table4_measured(
            src, out, "table4_paper_imbalance", "Table 4 at our scale and the paper's imbalance, measured"),
         at("paper_imbalance")),
        ("figure2_paper_imbalance", lambda src, out: figure2(src, out, "figure2_paper_imbalance", " at the paper's imbalance"), at("paper_imbalance")),
        ("figure4_paper_imbalance", lambda src, out: figure4(src, out, "figure4_paper_imbalance", " at the paper's imbalance"),
         at("paper_imbalance")),
        ("figure5_paper_imbalance", lambda src, out: figure5(
            src, out, "figure5_paper_imbalance", "ours at the paper's imbalance",
            title="Figure 5 at the paper's imbalance: chunk count MACT chose per layer and iteration"), at("paper_imbalance")),
        ("trace_replay", lambda src, out: figure5(
            src, out, "trace_replay_mact_chunks", "ours, learned routing replayed",
            title="Trace replay: chunk count MACT chose over learned routing"), at("trace_replay")),
        ("imbalance", imbalance, at("imbalance_sweep")),
        ("chunks", chunks, at("chunk_sweep")),
        ("chunk_balanced", lambda src, out: chunks(src, out, "chunks_balanced_step_time",
                                                   "Chunks under balanced routing on one rank"), at("chunk_balanced")),
        ("capacity", capacity, at("capacity_sweep")),
        ("budget_sweep", budget_sweep, at("budget_sweep")),
        ("model_error", model_error, at("model_accuracy")),
        ("kernels", kernels, at("kernels")),
        ("baselines", lambda src, out: strategies(src, out, "baselines",
                                                  "Every baseline on one MoE layer at MoEBlaze-like shapes"), at("baselines")),
        ("baselines_h2048", lambda src, out: strategies(src, out, "baselines_h2048", "Every baseline at MoEBlaze's larger shape"),
         at("baselines_h2048")),
        ("offload", offload, at("offload")),
        ("savers_2026", savers, at("savers_2026")),
        ("skip_dead", lambda src, out: strategies(src, out, "skip_dead", "Full and MoE-block recomputation, their replay's "
                                                  "dead fc2 and combine skipped or not",
                                                  "Recomputation with and without skipping the replay's unused fc2 and "
                                                  "combine"), at("skip_dead")),
        ("gpu_offload", offload, at("gpu_offload")),
        ("gpu_savers", lambda src, out: strategies(src, out, "gpu_savers", "The newest savers at DeepSeek-V3's expert "
                                                   "shapes (bf16)"), at("gpu_savers")),
        ("gpu_memfine", lambda src, out: strategies(src, out, "gpu_memfine", "Every strategy at GPU scale (bf16)"),
         at("gpu_memfine")),
        ("gpu_baselines", lambda src, out: strategies(src, out, "gpu_baselines", "Every baseline at MoEBlaze's benchmark scale"),
         at("gpu_baselines")),
        ("gpu_budget", lambda src, out: strategies(src, out, "gpu_budget", "Under a budget (bf16)"), at("gpu_budget")),
        ("gpu_budget_cap", lambda src, out: strategies(src, out, "gpu_budget_cap", "MACT as the budget rises (bf16)"),
         at("gpu_budget_cap")),
        ("gpu_deepseek", lambda src, out: strategies(src, out, "gpu_deepseek", "DeepSeek-V3's MoE shape (bf16)"),
         at("gpu_deepseek")),
        ("grouped_memory", lambda src, out: strategies(src, out, "grouped_memory",
                                                       "Grouped expert GEMMs against one per expert: memory"),
         at("grouped_memory")),
        ("gpu_grouped", lambda src, out: strategies(src, out, "gpu_grouped", "Grouped expert GEMMs against one per expert (bf16)"),
         at("gpu_grouped")),
        ("gpu_peak", lambda src, out: strategies(src, out, "gpu_peak", "With and without attention: what sets the GPU's peak"),
         at("gpu_peak")),
        ("gpu_model_accuracy", model_error, at("gpu_model_accuracy")),
        ("gpu_grouped_probe", grouped_probe, at("probes", "grouped.json")),
        ("kernel_ops", kernel_ops, os.path.join(results, "bench", "dispatch_combine.json")),
        ("kernels_ranks", lambda src, out: kernels(src, out, "kernels_ranks_table",
                                                   "Fused dispatch/combine against ATen on real expert-parallel ranks"),
         at("ep_pair_kernels")),
        ("quality", quality, at("quality", "train.jsonl")),
        ("train_ranks", train_ranks, at("train_ranks", "train.jsonl")),
        ("project_validation", project_validation, model("project_validation.jsonl")),
        ("project_goodput", project_scaling, model("project_scaling.jsonl")),
        ("project_layers", project_layers, model("project_layers.jsonl")),
        ("project_here", project_here, at("project_here", "projection.jsonl")),
        ("report", lambda src, out: report(results, predictions, out), at("paper_figure5")),
    ] if predictions or job[0] not in MODEL_JOBS]


# Drawn from results/model (the projection and the paper-scale prediction), not from a results
# folder: once, with the CPU's figures in paper_figures/, not again beside each GPU's.
MODEL_JOBS = ("table4_modeled", "project_validation", "project_goodput", "project_layers", "report")
DEFAULT_RESULTS, DEFAULT_PREDICTIONS = "results/cpu", "results/model/paper_table4.jsonl"


def main(argv=None):
    ap = argparse.ArgumentParser(prog="figures.py", description=__doc__)
    ap.add_argument("--results", default=DEFAULT_RESULTS,
                    help=f"folder with <experiment>/results.jsonl (default {DEFAULT_RESULTS})")
    ap.add_argument("--out", default="paper_figures", help="output folder (default paper_figures)")
    ap.add_argument("--predictions",
                    help="`memfine predict --json experiments/paper_table4.yaml` output, beside the projection's "
                         f"records (default {DEFAULT_PREDICTIONS} with the default --results; with another, such as "
                         "a GPU's, none: the projection's tables and REPORT are drawn once, from the CPU's)")
    args = ap.parse_args(argv)
    predictions = args.predictions or (DEFAULT_PREDICTIONS if os.path.normpath(args.results) == DEFAULT_RESULTS
                                       else None)
    os.makedirs(args.out, exist_ok=True)
    failed = 0
    for name, fn, src in jobs(args.results, predictions):
        if not os.path.exists(src):
            if not name.startswith("gpu_"):  # GPU experiments exist only in a GPU's results folder
                print(f"figures: skip {name}: {src} does not exist", file=sys.stderr)
            continue
        try:
            for p in fn(src, args.out):
                print(f"figures: wrote {p}")
        except (R.ResultsError, KeyError, ValueError, StopIteration, OSError) as e:
            print(f"figures: {name}: {type(e).__name__}: {e}", file=sys.stderr)
            failed += 1
    return 1 if failed else 0
