// Baseline: keep only each decoder layer's input and recompute the whole layer in backward
// (Megatron's --recompute-granularity full; the MemFine paper's method 1).
#include "core/strategy.h"

namespace memfine {
namespace {

class FullRecompute : public Strategy {
 public:
  using Strategy::Strategy;
  LayerOutput run_layer(const at::Tensor& x, const LayerInput& in) override {
    return layer_recomputed(x, in, *this, moe_stored);
  }
};

MEMFINE_REGISTER_STRATEGY(StrategyInfo{
    "full_recompute", "recompute each whole decoder layer in backward (the paper's baseline)", {},
    [](const StrategySpec& s) { return std::unique_ptr<Strategy>(new FullRecompute(s)); }});

}  // namespace
}  // namespace memfine
