// One layout x memory strategy of a whole model on a cluster, projected (`memfine project`): the
// hottest GPU's memory (core/project/memory.h), the step time in parts (core/project/step_time.h),
// throughput and goodput (ETTR at the optimal checkpoint interval, core/project/goodput.h). The
// strategy is a registered one, projected from its shape; one that chooses among shapes (MACT)
// chooses by what fits the GPU (Strategy::choose_shape). Each part prints its assumptions.
#pragma once
#include <string>
#include <vector>

#include "core/project/goodput.h"
#include "core/project/layout.h"
#include "core/strategy/strategy.h"

namespace memfine {

struct Estimate {
  Layout layout;
  std::string strategy, name;  // its label and registered name ("" for a layout rejected before any)
  bool drops = false;          // it drops assignments (capacity capping): another model, ranked apart
  bool lossy = false;          // it stores activations in narrower codes: its gradients differ, ranked apart
  double held_overload = 1;  // the rows kept, over the balanced share (core/project/project.h Overload::held)
  StrategyShape shape;         // the shape it runs a layer with here
  bool fits = false;          // what it needs (reserved, and the process's own) is within the usable memory
  // "yes", "no", or "borderline": within the framework's margin of the limit, or its range across it
  std::string fit;
  std::string why;            // why it does not fit (or "")
  std::string hottest_stage;  // "first", "last" or "only": the pipeline rank whose memory is given
  double static_gb = 0, activation_gb = 0, peak_gb = 0, host_gb = 0;  // the hottest GPU, allocated
  double reserved_gb = 0, need_gb = 0;  // the allocator's reserve; with what the process holds beside
  double usable_gb = 0;                  // the limit the need is judged against (usable_memory x the GPU's)
  // The first step's need (before its optimizer step creates Adam's moments) and those moments: the
  // steps after it need need_gb, which fit is judged on.
  double first_step_need_gb = 0, lazy_gb = 0;
  // The range the validation's errors give (core/project/config.h ProjectionErrors); empty without.
  std::vector<double> need_gb_range, tokens_per_s_gpu_range;
  int64_t chunks = 0;  // the MoE's chunk count where it runs in chunks (MACT: its choice); 0: not chunked
  // Seconds per step, by part.
  double compute = 0, recompute = 0, comm = 0, bubble = 0, offload_wait = 0, optimizer = 0, step = 0;
  double launch = 0;          // the GPU waiting for the host's kernel launches
  // One MoE layer's forward and backward of a micro-batch on the hottest rank, each alone (StepParts).
  double moe_layer_forward = 0, moe_layer_backward = 0;
  // What the validation says the parts leave out: the calibrated constant a layer's pass of a
  // micro-batch, times the rank's passes (ProjectionErrors::layer_pass_s) less CUDA graphs' share:
  // calibration_passes.
  double calibration = 0, calibration_passes = 0;
  double chunk_overhead = 0;  // MemFine's chunks: their expert GEMMs at fewer rows per expert
  double all_to_all = 0;      // of comm: the expert-parallel dispatch and combine
  // The step time's grouped expert GEMMs: the rows a local expert's GEMMs run at and their rate there
  // (the grouped GEMM curve's least sure part is its few-row end).
  double expert_rows = 0, expert_tflops = 0;
  // The same GEMMs' rate on the dense GEMM table at one expert's shape, and with the weight
  // gradients' accumulation (where the framework fuses it) at the HBM rate added to them (rates.h
  // expert_kernels): a check on the curve, not priced (the step prices the accumulation where it
  // outlasts the product, compute.cpp); 0 where the preset has no table.
  double expert_table_tflops = 0, expert_accumulated_tflops = 0;
  double tokens_per_s_gpu = 0, model_tflops_gpu = 0;
  double balanced_tokens_per_s_gpu = 0;  // the same with balanced routing
  Goodput goodput;
  std::vector<std::string> assumptions;
};

Estimate estimate(const ModelConfig& m, const Hardware& hw, const Layout& l, const Strategy& s,
                  const ProjectSetting& set);

}  // namespace memfine
