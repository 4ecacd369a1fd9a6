// Megatron-Core's MoE arrangement (TEGroupedMLP with the router's probabilities applied inside the
// activation, TE's weighted SwiGLU, then an unweighted unpermute): the sums combine's weighting
// computes (stages.cpp), in another order. What it buys: a replay for backward (full or MoE-block
// recomputation) need not compute the experts' second GEMM nor the combine, whose outputs backward
// never reads: fc2's backward needs its input and weight, the unweighted combine's only where the
// rows go (Megatron-LM PR #7416, --moe-skip-dead-recompute). The dead parts return placeholders
// that keep the graph.
#include <torch/csrc/autograd/custom_function.h>

#include "core/moe/stages.h"
#include "core/util/modules.h"

namespace memfine {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

namespace {

// act @ w, its value not computed: backward from act and w as the GEMM's would be.
struct DeadLinear : torch::autograd::Function<DeadLinear> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& act, const at::Tensor& w) {
    ctx->save_for_backward({act, w});
    return at::zeros({1, 1}, act.options()).expand({act.size(0), w.size(1)});
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& g = grad[0];
    return {at::matmul(g, saved[1].t()), at::matmul(saved[0].t(), g)};
  }
};

// Rows added into their tokens' places ([n, hidden]), the sum not computed: backward hands each
// row its token's gradient.
struct DeadScatter : torch::autograd::Function<DeadScatter> {
  static at::Tensor forward(AutogradContext* ctx, at::TensorList rows, at::TensorList tokens, int64_t n,
                            int64_t hidden) {
    ctx->saved_data["tokens"] = c10::List<at::Tensor>(std::vector<at::Tensor>(tokens.begin(), tokens.end()));
    const at::TensorOptions o = rows.empty() ? at::TensorOptions() : rows[0].options();
    return at::zeros({1, 1}, o).expand({n, hidden});
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    const auto tokens = ctx->saved_data["tokens"].toTensorList();
    variable_list out;
    for (size_t i = 0; i < tokens.size(); ++i) out.push_back(grad[0].index_select(0, tokens.get(i)));
    out.resize(2 * tokens.size() + 2);  // the tokens, n and hidden take none
    return out;
  }
};

// Each row's weight in its expert's activation: an own row's probability, 1 for the rows computed
// for peers (they weigh them at their combine) and for padding.
at::Tensor row_weights(const Dispatched& d, size_t e, const at::Tensor& flat_probs) {
  at::Tensor own = flat_probs.index_select(0, d.own_slot[e]);
  const int64_t rest = d.inputs[e].size(0) - d.own_rows[e];
  return rest > 0 ? at::cat({own, at::ones({rest}, own.options())}) : own;
}

}  // namespace

at::Tensor dead_linear(const at::Tensor& act, const at::Tensor& w) { return DeadLinear::apply(act, w); }

at::Tensor dead_scatter(const std::vector<at::Tensor>& rows, const std::vector<at::Tensor>& tokens, int64_t n,
                        int64_t hidden) {
  return DeadScatter::apply(at::TensorList(rows), at::TensorList(tokens), n, hidden);
}

std::vector<at::Tensor> experts_weighted(const Dispatched& d, const LayerWeights& w, const MoeRouting& mr,
                                         const at::Tensor& probs) {
  const at::Tensor flat_probs = probs.reshape(-1);
  std::vector<at::Tensor> out;
  for (size_t e = 0; e < d.inputs.size(); ++e) {
    const at::Tensor& rows = d.inputs[e];
    if (rows.size(0) == 0) {
      out.push_back(rows);
      continue;
    }
    ModuleScope experts(Module::Experts);
    at::Tensor z, act;
    {
      ModuleScope fc1(Module::ExpertFc1);
      z = at::matmul(rows, w.w_in[e]);
    }
    {
      ModuleScope moe_act(Module::MoeAct);
      auto halves = z.chunk(2, -1);
      act = at::silu(halves[0]) * halves[1] * row_weights(d, e, flat_probs).unsqueeze(1);
    }
    ModuleScope fc2(Module::ExpertFc2);
    out.push_back(mr.outputs_dead ? DeadLinear::apply(act, w.w_out[e]) : at::matmul(act, w.w_out[e]));
  }
  return out;
}

Combined combine_unweighted(const std::vector<at::Tensor>& outputs, const Dispatched& d, const at::Tensor& probs,
                            const MoeRouting& mr) {
  const int64_t n = d.end - d.begin, h = mr.tables->remote_outputs.size(1);
  at::Tensor peer_loss = at::zeros({}, probs.options());
  std::vector<at::Tensor> rows, tokens;
  for (size_t e = 0; e < outputs.size(); ++e) {
    if (d.own_rows[e] > 0) rows.push_back(outputs[e].narrow(0, 0, d.own_rows[e])), tokens.push_back(d.own_token[e]);
    if (d.peer_rows[e] > 0) {
      at::Tensor sent = outputs[e].narrow(0, d.own_rows[e], d.peer_rows[e]);
      peer_loss = peer_loss + peer_sink(sent, d.peer_key[e], &mr.tables->peer_grads, mr.loss_norm, !mr.outputs_dead);
    }
  }
  // Outputs of remote experts arrive (seeded) and are weighted here, as combine weighs them.
  if (d.remote_slot.numel() > 0) {
    const at::Tensor weight = probs.reshape(-1).index_select(0, d.remote_slot);
    rows.push_back(mr.tables->remote_outputs.index_select(0, d.remote_key) * weight.unsqueeze(1));
    tokens.push_back(d.remote_token);
  }
  if (mr.outputs_dead && rows.empty()) return {at::zeros({1, 1}, probs.options()).expand({n, h}), peer_loss};
  // As lists (a std::vector is not one to autograd: its tensors would get no gradient).
  if (mr.outputs_dead) return {DeadScatter::apply(at::TensorList(rows), at::TensorList(tokens), n, h), peer_loss};
  at::Tensor y = at::zeros({n, h}, probs.options());
  for (size_t i = 0; i < rows.size(); ++i) y.index_add_(0, tokens[i], rows[i]);
  return {y, peer_loss};
}

}  // namespace memfine
