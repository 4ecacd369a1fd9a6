#include "core/strategy/recompute.h"

#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>

namespace memfine {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

namespace {

// The root of an inner backward: hands the gradients it holds to the outputs' graph, moving them
// out, so that the graph's nodes hold the only references (a GraphRoot would keep a copy).
struct GradSource : torch::autograd::Node {
  TensorList grads;
  variable_list apply(variable_list&& /*ones*/) override { return std::move(grads); }
  std::string name() const override { return "memfine::GradSource"; }
};

// Identity on a region input; its backward takes the gradient into a slot instead of passing it
// to an AccumulateGrad, which would clone it while the residual branch still holds it.
struct TakeGrad : torch::autograd::Function<TakeGrad> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, TensorList* slot, int64_t i) {
    ctx->saved_data["slot"] = reinterpret_cast<int64_t>(slot);
    ctx->saved_data["i"] = i;
    return x.view_as(x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    auto* slot = reinterpret_cast<TensorList*>(ctx->saved_data["slot"].toInt());
    at::Tensor& dst = (*slot)[size_t(ctx->saved_data["i"].toInt())];
    if (!dst.defined())
      dst = std::move(grad[0]);
    else if (grad[0].defined())
      dst = dst + grad[0];
    return {at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// A custom function's backward receives its gradient through a few handles of one tensor that the
// engine holds (its input buffer, CppNode::apply's copy, backward's by-value list: three in
// LibTorch 1.13, fewer in 2.x). With no handle besides those and no other tensor on its storage,
// nothing else can read it (a gradient shared with a residual branch has more handles): its storage
// moves to a new tensor that the caller alone owns, and the engine's handles are left empty.
// Otherwise it is returned as it is, which costs memory, never correctness. How many handles the
// engine holds is measured once on a gradient known to be unshared, not assumed: taking a shared
// one would empty the other branch's gradient.
struct CountHandles : torch::autograd::Function<CountHandles> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t* count) {
    ctx->saved_data["count"] = reinterpret_cast<int64_t>(count);
    return x.clone();
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    auto* count = reinterpret_cast<int64_t*>(ctx->saved_data["count"].toInt());
    const bool alone = grad[0].defined() && grad[0].has_storage() && grad[0].storage().use_count() == 1;
    *count = alone ? int64_t(grad[0].use_count()) : 0;
    return {grad[0], at::Tensor()};
  }
};

int64_t engine_handles() {
  static const int64_t handles = [] {
    int64_t count = 0;
    at::AutoGradMode grad_on(true);
    at::Tensor x = at::ones({2}).requires_grad_(true);
    // The product's backward makes a fresh tensor: CountHandles gets a gradient nothing else holds.
    (CountHandles::apply(x, &count) * 2.0).sum().backward();
    return count;
  }();
  return handles;
}

at::Tensor take_gradient(at::Tensor& grad) {
  if (!grad.defined() || int64_t(grad.use_count()) > engine_handles() || !grad.has_storage() ||
      grad.storage().use_count() != 1 || grad.requires_grad())
    return grad;
  at::NoGradGuard no_grad;
  at::Tensor own = at::empty({0}, grad.options());
  own.set_(grad.storage(), grad.storage_offset(), grad.sizes(), grad.strides());
  grad.set_();
  grad = at::Tensor();
  return own;
}

thread_local int g_recompute_depth = 0;

struct RecomputeScope {
  RecomputeScope() { ++g_recompute_depth; }
  ~RecomputeScope() { --g_recompute_depth; }
};

struct Recompute : torch::autograd::Function<Recompute> {
  static variable_list forward(AutogradContext* ctx, at::TensorList activations, at::TensorList params,
                               const RecomputeFn* fn) {
    engine_handles();  // measured here, outside any backward
    TensorList outs;
    {
      at::NoGradGuard no_grad;
      outs = (*fn)(activations.vec());
    }
    ctx->saved_data["fn"] = keep(*fn);
    ctx->saved_data["n_params"] = int64_t(params.size());
    ctx->save_for_backward(activations.vec());
    return outs;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    TensorList saved = ctx->get_saved_variables();
    const size_t n_acts = saved.size();
    RegionInputs in = region_inputs(saved);
    saved.clear();
    const auto& fn = kept<RecomputeFn>(ctx->saved_data["fn"]);
    TensorList outs;
    {
      at::AutoGradMode grad_on(true);
      RecomputeScope scope;
      outs = fn(in.tensors);
    }
    in.tensors.clear();
    for (auto& g : grad_outputs) g = take_gradient(g);
    backward_into_leaves(std::move(outs), std::move(grad_outputs));
    // Parameters' gradients are in their .grad already; the function pointer has none.
    variable_list result = std::move(*in.grads);
    result.resize(n_acts + size_t(ctx->saved_data["n_params"].toInt()) + 1);
    return result;
  }
};

}  // namespace

RegionInputs region_inputs(const TensorList& saved) {
  RegionInputs r;
  r.grads = std::make_shared<TensorList>(saved.size());
  for (size_t i = 0; i < saved.size(); ++i) {
    at::Tensor a = saved[i].detach();
    if (saved[i].requires_grad()) {
      at::AutoGradMode grad_on(true);
      a = TakeGrad::apply(a.requires_grad_(true), r.grads.get(), int64_t(i));
    }
    r.tensors.push_back(std::move(a));
  }
  return r;
}

void backward_into_leaves(TensorList outputs, TensorList grads) {
  auto source = std::make_shared<GradSource>();
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!outputs[i].defined() || !outputs[i].requires_grad() || i >= grads.size() || !grads[i].defined()) continue;
    source->add_next_edge(torch::autograd::impl::gradient_edge(outputs[i]));
    source->grads.push_back(std::move(grads[i]));
  }
  outputs.clear();
  grads.clear();
  if (source->grads.empty()) return;
  const at::Tensor one = at::ones({}, source->grads[0].options());
  source->add_input_metadata(one);
  torch::autograd::Engine::get_default_engine().execute({torch::autograd::Edge(source, 0)}, {one},
                                                        /*keep_graph=*/false, /*create_graph=*/false,
                                                        /*accumulate_grad=*/true);
}

bool recomputing_for_backward() { return g_recompute_depth > 0; }

TensorList recompute(const RecomputeFn& fn, const TensorList& activations, const TensorList& params) {
  return Recompute::apply(at::TensorList(activations), at::TensorList(params), &fn);
}

}  // namespace memfine
