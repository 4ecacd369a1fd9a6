// The learning-rate schedule of `memfine train`: a linear warmup to train.lr, then cosine decay to
// train.min_lr at the last step.
#pragma once
#include <cstdint>

#include "core/config/config.h"

namespace memfine {

double learning_rate(const TrainConfig& t, int64_t step);

}  // namespace memfine
