// Baseline: store attention, recompute the MoE part as one block (Megatron's
// --recompute-modules moe). Against memfine it isolates what chunking adds.
#include "core/strategy/shared_params.h"
#include "core/strategy/registry.h"

namespace memfine {
namespace {

MEMFINE_REGISTER_STRATEGY(drawn(shaped("moe_recompute", "store attention, recompute the MoE block as a whole in backward",
                                 ParamsOf<StrategyShape>{skip_dead_param()}, [](StrategyShape s) {
                                   s.moe = MoeMode::RecomputedBlock;
                                   return s;
                                 }), "#8c564b", "^"));

}  // namespace
}  // namespace memfine
