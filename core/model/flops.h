// One FLOP formula for the suite (a multiply-add counts 2). Backward costs twice the forward, so a
// training step is 3x the forward; recomputation is not counted (model FLOPs, as in MFU).
#pragma once
#include <cstdint>

#include "core/config/config.h"

namespace memfine {

// SwiGLU expert forward on T routed token-expert rows: 6 * T * h * g.
inline double expert_forward_flops(double rows, double hidden, double ffn) { return 6.0 * rows * hidden * ffn; }

struct StepFlops {
  double attention = 0, router = 0, experts = 0, shared = 0;
  double total() const { return attention + router + experts + shared; }
};

// A training step (forward + backward) of the rank's layers; `received_rows` is s' summed over layers.
StepFlops step_flops(const ModelConfig& m, int64_t received_rows);

}  // namespace memfine
