// Baseline: keep only each decoder layer's input and recompute the whole layer in backward
// (Megatron's --recompute-granularity full; the MemFine paper's method 1).
#include "core/strategy/strategy.h"

namespace memfine {
namespace {

class FullRecompute : public Strategy {
 public:
  using Strategy::Strategy;
  LayerOutput run_layer(const at::Tensor& x, const LayerInput& in) override {
    return layer_recomputed(x, in, *this, moe_stored);
  }
  std::optional<StrategyShape> memory_shape() const override {
    StrategyShape s;
    s.recompute_layer = true;
    return s;
  }
  std::optional<PaperChunks> paper_chunks(double, double) const override { return PaperChunks{1, 1}; }
};

MEMFINE_REGISTER_STRATEGY(StrategyInfo{
    "full_recompute", "recompute each whole decoder layer in backward (the paper's baseline)", {},
    [](const StrategySpec& s) { return std::unique_ptr<Strategy>(new FullRecompute(s)); },
    {},
    Role::Baseline});  // the paper's: tables give every ratio against it

}  // namespace
}  // namespace memfine
