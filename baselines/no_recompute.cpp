// Baseline: store every activation; the fastest step and the largest memory. The plain
// computation: `verify` holds every other dropless strategy to it.
#include "core/strategy/registry.h"

namespace memfine {
namespace {

MEMFINE_REGISTER_STRATEGY(drawn(shaped(
    "no_recompute", "store all activations (no recomputation)", {}, [](const StrategySpec&) { return StrategyShape{}; },
    Role::Reference), "#7f7f7f", "o"));

}  // namespace
}  // namespace memfine
