#include "core/project/pipeline.h"

namespace memfine {

double pipeline_bubble_time(int64_t stages, int64_t virtual_stages, double micro_batch_time) {
  return double(stages - 1) / double(virtual_stages) * micro_batch_time;
}

double pipeline_bubble_fraction(int64_t stages, int64_t virtual_stages, int64_t micro_batches) {
  const double idle = double(stages - 1) / double(virtual_stages);
  return idle / (double(micro_batches) + idle);
}

}  // namespace memfine
