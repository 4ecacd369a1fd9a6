// Activation recomputation (checkpointing) for LibTorch C++, which has no torch.utils.checkpoint:
// the wrapped function runs without storing activations; backward runs it again with autograd on
// and backpropagates through the fresh graph. Nested use (MemFine's chunked MoE inside a
// recomputed layer) works because LibTorch's engine allows re-entrant backward.
//
// It is as lean as PyTorch's non-reentrant checkpoint (tests/pytorch_reference.py measures both):
//  * every weight gradient is accumulated into the parameter's preallocated .grad by the op that
//    produces it, as loss.backward() does, never returned as a temporary beside the others;
//  * the recomputed outputs are let go before their backward runs (only their graph is needed);
//  * the incoming gradient is handed to the inner backward as its only owner, so autograd can add
//    the residual branch's gradient into it in place and free it as soon as it is used;
//  * the gradients of the region's inputs are taken as they arrive (no AccumulateGrad clone).
#pragma once
#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <torch/custom_class.h>

#include <functional>
#include <memory>
#include <vector>

namespace memfine {

using TensorList = std::vector<at::Tensor>;
using RecomputeFn = std::function<TensorList(const TensorList& activations)>;

// `activations` are the tensors `fn` reads from outside that may carry gradients other than
// parameters; `fn` must use those given to it. `params` are leaves `fn` uses directly (from its
// closure): listed so that the region's output needs a gradient even when no activation does;
// their gradients are accumulated into their .grad during the region's backward. The outputs of
// `fn` must be tensors that are either differentiable or not needed in backward.
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

// Inputs of a region run again inside backward: detached copies (no data copied) of `saved`;
// those that needed a gradient pass through a node that takes the gradient as it arrives, into
// `grads` (undefined where none came).
struct RegionInputs {
  TensorList tensors;
  std::shared_ptr<TensorList> grads;
};
RegionInputs region_inputs(const TensorList& saved);

// Backpropagates `grads` from `outputs` (pairs with an undefined gradient, or an output without
// graph, are skipped), accumulating into every leaf's .grad as loss.backward() does. Both lists
// are taken by value and let go of before the graph runs, so pass them with std::move.
void backward_into_leaves(TensorList outputs, TensorList grads);

}  // namespace memfine
