// A parallel layout of a whole model on a cluster: what the search enumerates (layout.h) and the
// pipeline splits (pipeline.h), apart from both so that neither includes the other.
#pragma once
#include <cstdint>
#include <string>

namespace memfine {

struct Layout {
  int64_t tp = 1, pp = 1, ep = 1, dp = 1, cp = 1;  // gpus = tp * pp * dp * cp; ep * etp divides dp * cp * tp
  // Expert tensor parallelism (Megatron's --expert-tensor-parallel-size): each expert's FFN split
  // over `etp` neighbouring GPUs, which gather the routed rows their expert-parallel rank receives.
  int64_t etp = 1;
  int64_t vpp = 1;                                 // virtual stages per rank (interleaved 1F1B)
  int64_t micro_batch = 1;                         // sequences per micro-batch
  int64_t grad_accumulation = 1;                   // pipeline schedules (fill and drain) per step
  int64_t global_batch = 1;                        // sequences per step
  int64_t gpus() const { return tp * pp * dp * cp; }
  std::string text() const;  // "TP2 PP8 EP32 DP16 CP1 mb1" ("EP8 ETP2" where etp > 1)
};

}  // namespace memfine
