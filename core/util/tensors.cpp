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

}  // namespace memfine
