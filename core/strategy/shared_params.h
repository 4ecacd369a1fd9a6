// Parameters strategies share, declared once: activation offloading's (the `offload` baseline; any
// strategy may add them to its own: which modules, the smallest tensor, the margin, the prefetch
// depth and the host bandwidths its copy times are modelled with), the stored format of 8-bit
// storage, MemFine's chunks composed with another strategy, and skip_dead for those that recompute.
#pragma once
#include <string>
#include <vector>

#include "core/moe/shape.h"
#include "core/strategy/params.h"

namespace memfine {

// `named`: the modules always in the label (the offload baseline); otherwise only when some are
// chosen (a strategy that offloads nothing by default keeps its labels).
std::vector<Param> offload_params(std::vector<std::string> default_modules, bool named_modules = true);
// The spec's offloading, from the parameters above.
OffloadSpec offload_spec(const StrategySpec& spec);

// The stored format (`format`, with `fallback` its default: "none" keeps tensors as they are), FP8's
// `scale` and `rows`; and the spec's, into `o`.
std::vector<Param> codec_params(const std::string& fallback);
void set_codec(const StrategySpec& spec, OffloadSpec& o);

// `skip_dead` of a recomputing strategy (StrategyShape::skip_dead).
Param skip_dead_param();

// `chunks`: 1 the MoE as the strategy keeps it; more, in MemFine's token chunks, recomputed chunk by
// chunk, `rest` saying what the rest of the layer does meanwhile.
Param moe_chunks_param(const std::string& rest);
// Its shape's MoE from `chunks`; and the count refused beyond the tokens per rank.
void set_moe_chunks(const StrategySpec& spec, StrategyShape& s);
void check_moe_chunks(const StrategySpec& spec, const ExperimentConfig& c);

}  // namespace memfine
