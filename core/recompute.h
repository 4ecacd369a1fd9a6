// Activation recomputation (checkpointing) for LibTorch C++, which has no torch.utils.checkpoint:
// the wrapped function runs without storing activations; backward runs it again with autograd on
// and backpropagates through the fresh graph. Nested use (MemFine's chunked MoE inside a
// recomputed layer) works because LibTorch's engine allows re-entrant backward.
#pragma once
#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <torch/custom_class.h>

#include <functional>
#include <vector>

namespace memfine {

using TensorList = std::vector<at::Tensor>;
using RecomputeFn = std::function<TensorList(const TensorList& activations)>;

// `activations` are the tensors `fn` reads from outside that may carry gradients other than
// parameters; `fn` must use those given to it. `params` are leaves `fn` uses directly (from its
// closure): they are listed so that their gradients flow. The outputs of `fn` must be tensors
// that are either differentiable or not needed in backward.
TensorList recompute(const RecomputeFn& fn, const TensorList& activations, const TensorList& params);

// Keeps any C++ object alive inside an autograd context until its backward has run.
template <class T>
struct Kept : torch::CustomClassHolder {
  explicit Kept(T v) : value(std::move(v)) {}
  T value;
};
template <class T>
c10::IValue keep(T v) {
  return c10::IValue::make_capsule(c10::make_intrusive<Kept<T>>(std::move(v)));
}
template <class T>
T& kept(const c10::IValue& v) {
  return static_cast<Kept<T>*>(v.toCapsule().get())->value;
}

// True while a recomputed region runs its forward again inside backward. There the region's
// output values are never read (only its graph is), so a part that recomputes itself later
// anyway (MemFine's chunked MoE) may skip computing them.
bool recomputing_for_backward();

// Runs autograd::grad for the outputs that need it; gradients of `inputs` (undefined where unused).
TensorList backprop(const TensorList& outputs, const TensorList& grad_outputs, const TensorList& inputs);

}  // namespace memfine
