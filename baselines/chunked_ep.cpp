// Baseline: ChunkedEP (Megatron-LM PR #7342; experimental/lite's chunked expert parallelism). Each
// rank's own tokens are split into `chunks` contiguous ranges, every rank running the same sequence
// of dispatches and combines (an empty range still takes its turn). Chunk i+1's dispatch is issued
// before chunk i's experts run. Under full recomputation (the published fused forward/backward) only
// the layer's input is kept, and backward replays the chunks last to first, each dispatched again,
// the next earlier one's rows in flight (held) while a chunk runs: the MoE's peak is one chunk's
// activations and one more chunk's dispatched rows. Without recomputation every chunk is stored.
//   Against MemFine's chunks (core/strategy/memfine/chunked_moe.h), which are the same token ranges
// replayed first to last, it differs by the replay's order and the prefetched rows. Its shared
// activation arena (one buffer per shape, reused by every layer of that shape) is what a caching
// allocator gives every strategy here already: the meter counts allocated bytes, so it changes none.
#include "core/strategy/shared_params.h"
#include "core/strategy/registry.h"

namespace memfine {
namespace {

ParamsOf<StrategyShape> params() {
  using S = StrategyShape;
  return {bind(&S::chunks, said(named(int_param("chunks",
                                                 "token chunks of each rank's own tokens (every rank runs the same "
                                                 "count)",
                                                 2, 1, int64_t(1) << 30)),
                                "{v} chunks", {{"1", "1 chunk"}})),
          bind<S>(said(choice_param("recompute",
                                    "'full' keeps each layer's input and replays its chunks last to first in backward "
                                    "(the published fused forward/backward); 'none' stores every chunk",
                                    "full", {"full", "none"}),
                       "recompute {v}", {{"none", "no recompute"}}),
                  [](const nlohmann::json& v, S& s) {
                    if (v != "full") return;
                    s.recompute_layer = true;
                    s.moe = MoeMode::Chunked;
                    s.replay = ChunkReplay::LastToFirstPrefetched;
                  })};
}

StrategyInfo info() {
  StrategyInfo i = shaped("chunked_ep",
                          "ChunkedEP (Megatron-LM PR #7342): each rank's tokens in contiguous chunks, the next chunk's "
                          "dispatch in flight while one's experts run; under full recompute backward replays the "
                          "chunks last to first",
                          params(), [](StrategyShape s) {
                            s.dispatch_ahead = true;
                            return s;
                          });
  return checked(drawn(i, "#d62728", "<"), params(), [](const StrategyShape& s, const ExperimentConfig& c) {
    check_moe_chunks(s.chunks, c);
    return std::string();
  });
}

MEMFINE_REGISTER_STRATEGY(info());

}  // namespace
}  // namespace memfine
