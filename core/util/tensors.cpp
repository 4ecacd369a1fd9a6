#include "core/util/tensors.h"

#include <stdexcept>

namespace memfine {

at::ScalarType dtype_of(const std::string& name) {
  if (name == "float64") return at::kDouble;
  if (name == "bfloat16") return at::kBFloat16;
  return at::kFloat;
}

at::TensorOptions tensor_options(const std::string& device, const std::string& dtype) {
  return at::TensorOptions().dtype(dtype_of(dtype)).device(device == "cuda" ? at::kCUDA : at::kCPU);
}

bool back_to_back(const std::vector<at::Tensor>& parts) {
  if (parts.empty() || parts.front().dim() == 0) return false;
  const at::Tensor& f = parts.front();
  int64_t offset = f.storage_offset();
  for (const auto& p : parts) {
    if (!p.is_contiguous() || p.dim() != f.dim() || p.sizes().slice(1) != f.sizes().slice(1) ||
        p.scalar_type() != f.scalar_type() || p.device() != f.device() ||
        p.storage().unsafeGetStorageImpl() != f.storage().unsafeGetStorageImpl() || p.storage_offset() != offset)
      return false;
    offset += p.numel();
  }
  return true;
}

}  // namespace memfine
