// Baseline: store attention, recompute the MoE part as one block (Megatron's
// --recompute-modules moe). Against memfine it isolates what chunking adds.
#include "core/strategy/recompute.h"
#include "core/strategy/strategy.h"

namespace memfine {
namespace {

Combined moe_as_one_block(const at::Tensor& x_norm, const at::Tensor& probs, const MoeRouting& routing,
                          const LayerWeights& w) {
  const LayerWeights* wp = &w;
  RecomputeFn fn = [routing, wp](const TensorList& a) {
    Combined c = moe_stored(a[0], a[1], routing, *wp);
    return TensorList{c.y, c.peer_loss};
  };
  TensorList params = w.w_in;
  params.insert(params.end(), w.w_out.begin(), w.w_out.end());
  TensorList out = recompute(fn, {x_norm, probs}, params);
  return {out[0], out[1]};
}

class MoeRecompute : public Strategy {
 public:
  using Strategy::Strategy;
  LayerOutput run_layer(const at::Tensor& x, const LayerInput& in) override {
    return layer_forward(x, in, *this, moe_as_one_block);
  }
  std::optional<StrategyShape> memory_shape() const override {
    StrategyShape s;
    s.moe = MoeMode::RecomputedBlock;
    return s;
  }
};

MEMFINE_REGISTER_STRATEGY(StrategyInfo{
    "moe_recompute", "store attention, recompute the MoE block as a whole in backward", {},
    [](const StrategySpec& s) { return std::unique_ptr<Strategy>(new MoeRecompute(s)); }});

}  // namespace
}  // namespace memfine
