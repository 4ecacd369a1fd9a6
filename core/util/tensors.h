// Tensor types and places as configurations name them ("float32", "cuda").
#pragma once
#include <ATen/ATen.h>

#include <string>
#include <vector>

namespace memfine {

// "float32", "float64" or "bfloat16"; throws std::invalid_argument for another.
at::ScalarType dtype_of(const std::string& name);
// The options of tensors of `dtype` on `device` ("cpu" or "cuda").
at::TensorOptions tensor_options(const std::string& device, const std::string& dtype);

// Whether `parts` (contiguous, of one dtype and device, alike but for dim 0) lie back to back in one
// storage, in order: then they are one tensor's consecutive slices.
bool back_to_back(const std::vector<at::Tensor>& parts);

}  // namespace memfine
