// The pipeline bubble for `memfine project`: with p stages, m micro-batches per step and v virtual
// stages per rank (interleaved 1F1B; v = 1 is plain 1F1B), each rank idles (p-1)/v micro-batch
// times of forward and backward per step (Narayanan et al., SC'21, section 2.2).
#pragma once
#include <cstdint>

namespace memfine {

// The idle time per step, from the time of one micro-batch's forward and backward on one stage.
double pipeline_bubble_time(int64_t stages, int64_t virtual_stages, double micro_batch_time);
// The bubble's share of the step: (p-1)/v / (m + (p-1)/v).
double pipeline_bubble_fraction(int64_t stages, int64_t virtual_stages, int64_t micro_batches);

}  // namespace memfine
