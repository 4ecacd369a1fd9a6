// Tensor types and places as configurations name them ("float32", "cuda").
#pragma once
#include <ATen/ATen.h>

#include <string>

namespace memfine {

// "float32", "float64" or "bfloat16"; throws std::invalid_argument for another.
at::ScalarType dtype_of(const std::string& name);
// The options of tensors of `dtype` on `device` ("cpu" or "cuda").
at::TensorOptions tensor_options(const std::string& device, const std::string& dtype);

}  // namespace memfine
