// Capacity arithmetic shared by the capacity baseline and its tests.
#pragma once
#include <ATen/ATen.h>

#include <cmath>
#include <cstdint>

namespace memfine {

// Megatron-Core: capacity = ceil(tokens * topk / experts * capacity_factor).
inline int64_t capacity_per_expert(int64_t tokens, int64_t topk, int64_t experts, double factor) {
  return int64_t(std::ceil(double(tokens * topk) / double(experts) * factor));
}

// For items grouped by `group` (int64 [N]), keeps in each group the `capacity` items of highest
// `priority` (double [N]; ties: lower index first). Returns bool [N].
at::Tensor keep_within_capacity(const at::Tensor& group, const at::Tensor& priority, int64_t capacity);

}  // namespace memfine
