// A projected step's time in parts: compute (FLOPs over a rate per operation class: dense GEMM,
// grouped expert GEMM as a function of rows per expert, attention; memory-bound kernels at the HBM
// rate), what a strategy's shape recomputes, the chunks' cost, communication exposed where the
// layout cannot hide it (core/project/comm.h), offloading's copy wait and the pipeline bubble
// (core/project/pipeline.h), and the time the GPU waits for the host to launch its kernels.
#pragma once
#include <string>
#include <vector>

#include "core/moe/shape.h"
#include "core/project/comm.h"
#include "core/project/compute.h"
#include "core/project/layout.h"
#include "core/project/rates.h"

namespace memfine {

struct StepParts {
  double compute = 0, chunk_overhead = 0, recompute = 0, comm = 0, all_to_all = 0, offload_wait = 0, bubble = 0;
  double optimizer = 0;  // the optimizer step, once a step after the last micro-batch
  double launch = 0;     // the GPU waiting for the host to launch its kernels (the host is the slower)
  // One MoE layer's forward and its backward of a micro-batch on the hottest rank, alone (nothing of
  // another micro-batch beside it), as a layer-level benchmark times each; not parts of the step.
  double moe_layer_forward = 0, moe_layer_backward = 0;
  // What each part assumes, written where it was priced: the table's notes.
  std::vector<std::string> notes;
  double step() const { return compute + chunk_overhead + recompute + comm + offload_wait + bubble + optimizer + launch; }
};

// What the step time needs of the memory side: the stage's parameters (data-parallel traffic)
// and what offloading moves per micro-batch in flight.
struct StepMemory {
  double stage_params = 0, stage_expert_params = 0, host_bytes = 0, layers_in_flight = 1;
  double encoded_bytes = 0;  // what encoding stores as codes, in their own dtype's bytes
};

// The layers' passes of a micro-batch a step waits for on a pipeline rank, each forward and
// backward: its micro-batches', and the pipeline's fill and drain's ((p-1)/v micro-batches a
// schedule, as pipeline_bubble_time), x the model's layers over the pipeline ranks.
double layer_passes(const ModelConfig& m, const Layout& l);

// The share of the model's host launches, forward and backward, that CUDA graphs do not replay
// (framework.cuda_graphs): 1 eager, 0 graphed whole; 1 where the framework's launches are not counted.
double eager_launch_share(const ModelConfig& m, const Layout& l, const ProjectSetting& set);

// The data-parallel collectives of a step over `dp_link`: the gradients reduce-scattered in fp32 and
// the weights all-gathered in bf16, the experts' over their own data-parallel group; under FSDP the
// experts' weights are not gathered here (rank_time gathers every layer's).
double dp_step_time(const Link& dp_link, const Layout& l, const StepMemory& mem, bool fsdp);

// Seconds per step of `l` with a layer run as `s`; `received`: the hottest rank's rows per micro-batch.
StepParts step_time(const ModelConfig& m, const Hardware& hw, const Layout& l, const StrategyShape& s,
                    const ProjectSetting& set, double received, const StepMemory& mem);

}  // namespace memfine
