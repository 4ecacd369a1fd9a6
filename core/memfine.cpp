// MemFine's FCDA (fine-grained chunk distribution): the MoE's dispatch -> experts -> combine runs
// chunk by chunk over the sending side's token positions (paper Eq. 6), keeping only the chunk
// inputs; backward recomputes and backpropagates one chunk at a time (Eq. 7). The MoE's peak is
// then the largest chunk's, not the whole layer's. The rest of the layer is recomputed as in
// full_recompute, so memfine never stores more than full_recompute does.
#include <torch/csrc/autograd/custom_function.h>

#include "core/recompute.h"
#include "core/strategy.h"

namespace memfine {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct ChunkedCall {
  MoeRouting routing;
  const LayerWeights* weights = nullptr;
  int64_t chunks = 1;
  std::pair<int64_t, int64_t> range(int64_t c, int64_t n) const { return {c * n / chunks, (c + 1) * n / chunks}; }
};

TensorList expert_params(const LayerWeights& w) {
  TensorList p = w.w_in;
  p.insert(p.end(), w.w_out.begin(), w.w_out.end());
  return p;
}

struct ChunkedMoe : torch::autograd::Function<ChunkedMoe> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& probs,
                               at::TensorList params, const ChunkedCall* call) {
    const int64_t n = x.size(0);
    at::Tensor y = at::empty_like(x);
    at::Tensor peer_loss = at::zeros({}, x.options());
    {
      at::NoGradGuard no_grad;
      for (int64_t c = 0; c < call->chunks; ++c) {
        auto [a, b] = call->range(c, n);
        if (a == b) continue;
        Combined out = moe_range(x.narrow(0, a, b - a), probs.narrow(0, a, b - a), *call->weights, call->routing, a, b);
        y.narrow(0, a, b - a).copy_(out.y);
        peer_loss += out.peer_loss;
      }
    }
    ctx->save_for_backward({x, probs});
    ctx->saved_data["call"] = keep(*call);
    return {y, peer_loss};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    const ChunkedCall& call = kept<ChunkedCall>(ctx->saved_data["call"]);
    variable_list saved = ctx->get_saved_variables();
    const at::Tensor x = saved[0], probs = saved[1];
    const TensorList params = expert_params(*call.weights);
    const int64_t n = x.size(0);
    at::Tensor gx = at::zeros_like(x), gp = at::zeros_like(probs);
    TensorList gparams(params.size());
    for (int64_t c = 0; c < call.chunks; ++c) {
      auto [a, b] = call.range(c, n);
      if (a == b) continue;
      at::Tensor xc = x.narrow(0, a, b - a).detach().requires_grad_(true);
      at::Tensor pc = probs.narrow(0, a, b - a).detach().requires_grad_(true);
      Combined out;
      {
        at::AutoGradMode grad_on(true);
        out = moe_range(xc, pc, *call.weights, call.routing, a, b);
      }
      TensorList inputs = {xc, pc};
      inputs.insert(inputs.end(), params.begin(), params.end());
      at::Tensor gy = grad[0].defined() ? grad[0].narrow(0, a, b - a) : at::Tensor();
      TensorList g = backprop({out.y, out.peer_loss}, {gy, grad[1]}, inputs);
      out = Combined();
      if (g[0].defined()) gx.narrow(0, a, b - a).copy_(g[0]);
      if (g[1].defined()) gp.narrow(0, a, b - a).copy_(g[1]);
      for (size_t i = 0; i < params.size(); ++i) {
        const at::Tensor& gi = g[i + 2];
        if (!gi.defined()) continue;
        if (gparams[i].defined()) gparams[i].add_(gi);
        else gparams[i] = gi;
      }
    }
    variable_list result = {gx, gp};
    result.insert(result.end(), gparams.begin(), gparams.end());
    result.emplace_back();  // the call
    return result;
  }
};

class MemFine : public Strategy {
 public:
  explicit MemFine(StrategySpec spec) : Strategy(std::move(spec)) {
    chunks_ = spec_.get_int("chunks", 1);
    if (chunks_ < 1) throw std::invalid_argument("chunks must be 1 or more, got " + std::to_string(chunks_));
  }

  LayerOutput run_layer(const at::Tensor& x, const LayerInput& in) override {
    const int64_t chunks = chunks_;
    stats_.chunks.push_back(chunks);
    MoeFn chunked = [chunks](const at::Tensor& xn, const at::Tensor& probs, const MoeRouting& routing,
                             const LayerWeights& w) {
      ChunkedCall call{routing, &w, chunks};
      variable_list out = ChunkedMoe::apply(xn, probs, at::TensorList(expert_params(w)), &call);
      return Combined{out[0], out[1]};
    };
    return layer_recomputed(x, in, *this, chunked);
  }

 private:
  int64_t chunks_ = 1;
};

MEMFINE_REGISTER_STRATEGY(StrategyInfo{
    "memfine",
    "MemFine FCDA: MoE dispatch->experts->combine in token chunks, recomputed chunk by chunk; rest of the layer recomputed",
    {{"chunks", "number of token chunks (integer >= 1)"}},
    [](const StrategySpec& s) { return std::unique_ptr<Strategy>(new MemFine(s)); },
    [](const StrategySpec& s, const ExperimentConfig& c) {
      if (s.get_int("chunks", 1) > c.model.tokens())
        throw std::invalid_argument("chunks (" + std::to_string(s.get_int("chunks", 1)) + ") exceeds the tokens per rank (" +
                                    std::to_string(c.model.tokens()) + ")");
    }});

}  // namespace
}  // namespace memfine
