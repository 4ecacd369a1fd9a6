// A parallel layout of a whole model on a cluster: what the search enumerates (layout.h) and the
// pipeline splits (pipeline.h), apart from both so that neither includes the other.
#pragma once
#include <cstdint>
#include <string>

namespace memfine {

struct Layout {
  int64_t tp = 1, pp = 1, ep = 1, dp = 1, cp = 1;  // gpus = tp * pp * dp * cp; ep divides dp * cp * tp
  int64_t vpp = 1;                                 // virtual stages per rank (interleaved 1F1B)
  int64_t micro_batch = 1;                         // sequences per micro-batch
  int64_t grad_accumulation = 1;                   // pipeline schedules (fill and drain) per step
  int64_t global_batch = 1;                        // sequences per step
  int64_t gpus() const { return tp * pp * dp * cp; }
  std::string text() const;  // "TP2 PP8 EP32 DP16 CP1 mb1"
};

}  // namespace memfine
