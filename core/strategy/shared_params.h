// Parameters strategies share, declared once with where they go: activation offloading's (the
// `offload` baseline; any strategy may add them to its own: which modules, the smallest tensor,
// the margin, the prefetch depth and the host bandwidths its copy times are modelled with), the
// stored format of 8-bit storage, MemFine's chunks composed with another strategy, and skip_dead
// for those that recompute.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "core/moe/shape.h"
#include "core/strategy/params.h"

namespace memfine {

// `named`: the modules always in the label (the offload baseline); otherwise only when some are
// chosen (a strategy that offloads nothing by default keeps its labels).
std::vector<Bound<OffloadSpec>> offload_params(std::vector<std::string> default_modules, bool named_modules = true);

// The stored format (`format`, with `fallback` its default: StoredAs::Plain, "none", keeps
// tensors as they are and is offered only then), FP8's `scale` and `rows`.
std::vector<Bound<OffloadSpec>> codec_params(StoredAs fallback);

// How a figure says an `experts` choice (Param::phrase, Param::phrases).
inline std::string experts_phrase() { return "experts {v}"; }
inline std::map<std::string, std::string> experts_phrases() {
  return {{"stored", ""}, {"buffer_free", "buffer-free experts"}, {"moe_act", "act recomputed"}};
}

// `skip_dead` of a recomputing strategy (StrategyShape::skip_dead).
Bound<StrategyShape> skip_dead_param();

// `chunks`: 1 the MoE as the strategy keeps it; more, in MemFine's token chunks, recomputed chunk by
// chunk (MoeMode::Chunked), `rest` saying what the rest of the layer does meanwhile.
Bound<StrategyShape> moe_chunks_param(const std::string& rest);
// A chunk count refused beyond the tokens per rank.
void check_moe_chunks(int64_t chunks, const ExperimentConfig& c);

}  // namespace memfine
