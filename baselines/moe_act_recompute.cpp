// Baseline: Megatron-Core's selective recompute of the expert activation
// (--recompute-granularity selective --recompute-modules moe_act): everything is stored as in
// no_recompute except each expert's activation output SiLU(a) * b, which is discarded after the
// second GEMM's forward and recomputed in backward from the first GEMM's output z = [a | b]
// (core/moe/expert_storage.h); the GEMMs are not recomputed. It changes only what an expert
// stores, so it runs through the expert hook, on one process and on real ranks.
#include "core/strategy/registry.h"

namespace memfine {
namespace {

MEMFINE_REGISTER_STRATEGY(drawn(shaped("moe_act_recompute",
                                 "Megatron's selective recompute of the expert activation (moe_act): store all but "
                                 "SiLU(a)*b, recomputed in backward",
                                 {}, [](const StrategySpec&) {
                                   StrategyShape s;
                                   s.experts = ExpertStorage::ActRecomputed;
                                   return s;
                                 }), "#17becf", "v"));

}  // namespace
}  // namespace memfine
