// The implementation memory model (the paper's own model is in paper_model.h): byte-level
// accounting of what this code keeps during a step (the tensors autograd saves, stage by stage)
// and the transients on top, for a config, strategy, chunk count and routing. MACT uses it when
// running for real.
//   It accounts ATen's dispatch and combine (kernels: aten). With the fused kernels a step keeps
// less and the model reads high; MACT's headroom covers the low side (how far it reads, either
// way: paper_figures/kernels_table.md). Accounting the fused ops' smaller saved set alone is not
// enough: with less kept for backward, the peak moves to the hottest expert's SwiGLU in the
// (recomputed) forward, a transient this model does not account yet.
//   On real ranks (EmulatedRank::real) it accounts the all-to-all path instead of the emulated
// peers' tables (core/moe/alltoall.cpp, ATen experts): the sent, arrived and un-grouped rows and
// their gradients. Its ratio to the meter is recorded with every run (predicted_activation_bytes
// beside peak_activation_bytes) and tabled in paper_figures/model_error_table.md.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/config/config.h"
#include "core/moe/shape.h"
#include "core/workload/ep_rank.h"

namespace memfine {

// ---- Implementation model ----
struct Prediction {
  int64_t static_bytes = 0;
  int64_t activation_bytes = 0;
  std::string phase;                // where the peak happens, e.g. "backward of layer 1, MoE chunk 0"
  std::vector<int64_t> layer_peak;  // the peak while each layer's backward runs
  std::vector<int64_t> layer_kept;  // what each layer keeps from its forward until its backward
  int64_t loss_peak = 0;            // the peak of the loss's backward (no chunking changes it)
  std::vector<int64_t> chunks;      // the chunk count per layer it was made for (0: stored); empty: none
  int64_t host_bytes = 0;           // offloaded to the host at the forward's end (its peak); 0: none
  bool reran = false;               // Paged Stash overflows: the step runs again (the peak is the rerun's)
};

// Predicts static bytes and the activation peak of one training step of the emulated (or real) rank.
// `chunks_per_layer` overrides the chunk count per layer (MACT; a Chunked shape), 0 being a layer
// stored whole without recomputation (a plan that mixes storing and chunking); empty = the shape's.
Prediction predict_step(const ExperimentConfig& c, const EmulatedRank& rank, const StrategyShape& s,
                        const std::vector<int64_t>& chunks_per_layer = {});

}  // namespace memfine
