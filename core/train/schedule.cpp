#include "core/train/schedule.h"

#include <algorithm>
#include <cmath>

namespace memfine {

double learning_rate(const TrainConfig& t, int64_t step) {
  if (step < t.warmup) return t.lr * double(step + 1) / double(t.warmup);
  const double p = t.steps - t.warmup > 1 ? double(step - t.warmup) / double(t.steps - t.warmup - 1) : 1.0;
  return t.min_lr + 0.5 * (t.lr - t.min_lr) * (1 + std::cos(M_PI * std::min(p, 1.0)));
}

}  // namespace memfine
