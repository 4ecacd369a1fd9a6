// Baseline: Megatron-Core's selective recompute of the expert activation
// (--recompute-granularity selective --recompute-modules moe_act): everything is stored as in
// no_recompute except each expert's activation output SiLU(a) * b, which is discarded after the
// second GEMM's forward and recomputed in backward from the first GEMM's output z = [a | b]
// ("output-discarding checkpoint", core/moe/expert_storage.cpp); the GEMMs are not recomputed.
// A strategy that changes only what an expert stores: it runs through the expert hook, on one
// process and on real ranks.
#include "core/moe/expert_storage.h"
#include "core/strategy/strategy.h"

namespace memfine {
namespace {

class MoeActRecompute : public Strategy {
 public:
  using Strategy::Strategy;
  LayerOutput run_layer(const at::Tensor& x, const LayerInput& in) override {
    return layer_forward(x, in, *this, moe_stored);
  }
  ExpertPath expert() const override { return expert_path(ExpertStorage::ActRecomputed); }
  std::optional<StrategyShape> memory_shape() const override {
    StrategyShape s;
    s.experts = ExpertStorage::ActRecomputed;
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
