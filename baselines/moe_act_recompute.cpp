// Baseline: Megatron-Core's selective recompute of the expert activation
// (--recompute-granularity selective --recompute-modules moe_act): everything is stored as in
// no_recompute except each expert's activation output SiLU(a) * b, which is discarded after the
// second GEMM's forward and recomputed in backward from the first GEMM's output z = [a | b]
// ("output-discarding checkpoint"); the GEMMs are not recomputed. A strategy that changes only
// what an expert stores: it runs through the expert hook, on one process and on real ranks.
#include <torch/csrc/autograd/custom_function.h>

#include "core/strategy/strategy.h"

namespace memfine {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// out = (SiLU(a) * b) @ w_out, keeping z and w_out only.
struct ActThenDown : torch::autograd::Function<ActThenDown> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& z, const at::Tensor& w_out) {
    at::Tensor out;
    {
      auto ab = z.chunk(2, -1);
      out = at::matmul(at::silu(ab[0]) * ab[1], w_out);  // the product is freed here
    }
    ctx->save_for_backward({z, w_out});
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& z = saved[0];
    const at::Tensor& w_out = saved[1];
    const at::Tensor& g = grad[0];
    auto ab = z.chunk(2, -1);
    const at::Tensor a = ab[0], b = ab[1];
    at::Tensor silu_a = at::silu(a);
    at::Tensor g_w;
    {
      at::Tensor y = silu_a * b;  // recomputed for the weight gradient only
      g_w = at::matmul(y.t(), g);
    }
    at::Tensor g_y = at::matmul(g, w_out.t());
    at::Tensor g_z = at::empty_like(z);
    auto gz = g_z.chunk(2, -1);
    at::mul_out(gz[1], g_y, silu_a);
    silu_a = at::Tensor();
    g_y.mul_(b);  // d/d(silu(a)), in place: no further buffer
    at::silu_backward_out(gz[0], g_y, a);
    return {g_z, g_w};
  }
};

class MoeActRecompute : public Strategy {
 public:
  using Strategy::Strategy;
  LayerOutput run_layer(const at::Tensor& x, const LayerInput& in) override {
    return layer_forward(x, in, *this, moe_stored);
  }
  ExpertFn expert() const override {
    return [](const at::Tensor& rows, const at::Tensor& w_in, const at::Tensor& w_out) {
      return ActThenDown::apply(at::matmul(rows, w_in), w_out);
    };
  }
  std::optional<StrategyShape> memory_shape() const override {
    StrategyShape s;
    s.expert_act_recomputed = true;
    return s;
  }
};

MEMFINE_REGISTER_STRATEGY(StrategyInfo{
    "moe_act_recompute",
    "Megatron's selective recompute of the expert activation (moe_act): store all but SiLU(a)*b, recomputed in backward",
    {},
    [](const StrategySpec& s) { return std::unique_ptr<Strategy>(new MoeActRecompute(s)); }});

}  // namespace
}  // namespace memfine
