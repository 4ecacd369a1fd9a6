#include "core/recompute.h"

#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

namespace memfine {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

TensorList backprop(const TensorList& outputs, const TensorList& grad_outputs, const TensorList& inputs) {
  TensorList outs, gouts, ins;
  std::vector<size_t> where;
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!outputs[i].defined() || !outputs[i].requires_grad()) continue;
    outs.push_back(outputs[i]);
    gouts.push_back(grad_outputs[i].defined() ? grad_outputs[i] : at::zeros_like(outputs[i]));
  }
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].defined() && inputs[i].requires_grad()) ins.push_back(inputs[i]), where.push_back(i);
  TensorList result(inputs.size());
  if (outs.empty() || ins.empty()) return result;
  TensorList g = torch::autograd::grad(outs, ins, gouts, /*retain_graph=*/false, /*create_graph=*/false,
                                       /*allow_unused=*/true);
  for (size_t j = 0; j < where.size(); ++j) result[where[j]] = g[j];
  return result;
}

namespace {

thread_local int g_recompute_depth = 0;

struct RecomputeScope {
  RecomputeScope() { ++g_recompute_depth; }
  ~RecomputeScope() { --g_recompute_depth; }
};

struct Recompute : torch::autograd::Function<Recompute> {
  static variable_list forward(AutogradContext* ctx, at::TensorList activations, at::TensorList params,
                               const RecomputeFn* fn) {
    TensorList outs;
    {
      at::NoGradGuard no_grad;
      outs = (*fn)(activations.vec());
    }
    ctx->saved_data["fn"] = keep(*fn);
    // Parameters are leaves that outlive the step; holding them here costs nothing.
    ctx->saved_data["params"] = keep(params.vec());
    ctx->save_for_backward(activations.vec());
    return outs;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto& fn = kept<RecomputeFn>(ctx->saved_data["fn"]);
    const auto& params = kept<TensorList>(ctx->saved_data["params"]);
    variable_list saved = ctx->get_saved_variables();
    TensorList acts, inputs;
    for (const auto& a : saved) {
      acts.push_back(a.detach().requires_grad_(a.requires_grad()));
      inputs.push_back(acts.back());
    }
    inputs.insert(inputs.end(), params.begin(), params.end());
    TensorList outs;
    {
      at::AutoGradMode grad_on(true);
      RecomputeScope scope;
      outs = fn(acts);
    }
    TensorList g = backprop(outs, grad_outputs, inputs);
    saved.clear();
    g.emplace_back();  // for the fn pointer
    return g;
  }
};

}  // namespace

bool recomputing_for_backward() { return g_recompute_depth > 0; }

TensorList recompute(const RecomputeFn& fn, const TensorList& activations, const TensorList& params) {
  return Recompute::apply(at::TensorList(activations), at::TensorList(params), &fn);
}

}  // namespace memfine
