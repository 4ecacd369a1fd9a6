// Baseline: store every activation; the fastest step and the largest memory.
#include "core/strategy/strategy.h"

namespace memfine {
namespace {

class NoRecompute : public Strategy {
 public:
  using Strategy::Strategy;
  LayerOutput run_layer(const at::Tensor& x, const LayerInput& in) override {
    return layer_forward(x, in, *this, moe_stored);
  }
  std::optional<StrategyShape> memory_shape() const override { return StrategyShape{}; }
};

MEMFINE_REGISTER_STRATEGY(StrategyInfo{
    "no_recompute", "store all activations (no recomputation)", {},
    [](const StrategySpec& s) { return std::unique_ptr<Strategy>(new NoRecompute(s)); },
    {},
    Role::Reference});  // the plain computation: verify holds the others to it

}  // namespace
}  // namespace memfine
