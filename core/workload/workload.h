// Routing workloads (kind "router" lets the router's own top-k decide, single rank only): how imbalanced the
// token-to-expert assignment is. The router still runs and gets gradients; the workload only decides which experts each
// token goes to (as Megatron-Core's benchmark routing overrides do), so imbalance is a controlled input, not a training
// accident.
#pragma once
#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/config/config.h"
#include "core/util/hash.h"

namespace memfine {

std::vector<std::string> workload_kinds();

// Throws std::invalid_argument with a readable message (bad trace file, impossible counts...).
// `training`: real ranks learn their routing together (memfine launch), so 'router' may span ranks.
void validate_workload(const WorkloadConfig& w, const ModelConfig& m, int64_t ep, bool training = false);

// Assignments each expert receives in one layer, summed over all `ep` ranks' tokens; the counts
// add up to ep * tokens * topk and none exceeds ep * tokens (a token picks an expert once).
// With a schedule, `step` selects the step's routing and its imbalance strength.
std::vector<int64_t> expert_counts(const WorkloadConfig& w, const ModelConfig& m, int64_t ep, int64_t layer,
                                   uint64_t seed, int64_t step = 0);

// Expert ids [ep * tokens, topk] (int64) realising `counts` exactly, distinct within each row, with
// tokens shuffled under `seed` so the hot assignments are spread over positions and ranks.
at::Tensor assign_experts(const std::vector<int64_t>& counts, int64_t total_tokens, int64_t topk, uint64_t seed);

// Per-expert counts from a trace CSV, `layer,expert,tokens` or `step,layer,expert,tokens` (what
// `memfine train --trace-out` writes), for `step` and `layer`; steps and layers the file lacks cycle
// through those it has. A file without a step column gives the same counts at every step.
std::vector<int64_t> read_trace(const std::string& path, int64_t layer, int64_t experts, int64_t step = 0);
// A stepped trace, `step,layer,expert,tokens` (what `memfine train --trace-out` writes), of each
// step's assignments per layer and expert.
using StepRouting = std::pair<int64_t, std::vector<std::vector<int64_t>>>;
std::string trace_csv(const std::vector<StepRouting>& steps);
// The number of distinct steps in a trace CSV (1 without a step column).
int64_t trace_steps(const std::string& path);

}  // namespace memfine
