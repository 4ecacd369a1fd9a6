// Baseline: keep only each decoder layer's input and recompute the whole layer in backward
// (Megatron's --recompute-granularity full; the MemFine paper's method 1, which tables divide by).
#include "core/strategy/shared_params.h"
#include "core/strategy/registry.h"

namespace memfine {
namespace {

MEMFINE_REGISTER_STRATEGY(drawn(shaped(
    "full_recompute", "recompute each whole decoder layer in backward (the paper's baseline)",
    ParamsOf<StrategyShape>{skip_dead_param()},
    [](StrategyShape s) {
      s.recompute_layer = true;
      return s;
    },
    Role::Baseline), "#1f77b4", "s"));

}  // namespace
}  // namespace memfine
