// Baseline: MoEBlaze-style buffer-free experts (arXiv 2601.05296; SonicMoE does the same in
// code): everything outside the routed experts is stored as in no_recompute, and the experts run
// buffer-free (core/moe/buffer_free.h): index-only dispatch, rows read through their index block
// by block, the weighted combine written into the output, z = [a | b] kept and SiLU(a) * b
// recomputed, the router gradient as a row reduction. `keep_act: true` keeps SiLU(a) * b too
// (readings of the paper disagree on whether it does). On real ranks the rows that arrived are kept
// once per rank.
#include "core/strategy/registry.h"

namespace memfine {
namespace {

MEMFINE_REGISTER_STRATEGY(drawn(shaped(
    "moeblaze",
    "MoEBlaze-style buffer-free experts: index-only dispatch, z kept and SiLU recomputed, combine into the output",
    ParamsOf<StrategyShape>{
        bind(&StrategyShape::keep_act, said(bool_param("keep_act", "also keep SiLU(a)*b instead of recomputing it", false),
                                            "", {{"true", "keeps act"}, {"false", ""}})),
        bind(&StrategyShape::block_rows,
             int_param("block_rows", "rows per block of an expert's forward and backward, the tile of a fused kernel",
                       256, 1, int64_t(1) << 30))},
    [](StrategyShape s) {
      s.experts = ExpertStorage::BufferFree;
      return s;
    }), "#bcbd22", "P"));

}  // namespace
}  // namespace memfine
