// The one executor: runs a decoder layer as a shape says (core/moe/shape.h), through the stages in
// Megatron-Core's order: attention block, route, MoE (dispatch -> experts -> combine, stored,
// recomputed as a block, or in token chunks), shared expert, residual; the whole layer recomputed
// in backward where the shape says so.
#pragma once
#include <ATen/ATen.h>

#include <functional>

#include "core/strategy/strategy.h"

namespace memfine {

// How the MoE part of a layer runs, given the normed hidden states and router probabilities.
using MoeFn = std::function<Combined(const at::Tensor& x_norm, const at::Tensor& probs, const MoeRouting& routing,
                                     const LayerWeights& w)>;

// The layer as `shape` says, its experts as `s` says (Strategy::expert) and its routing capped as
// `s` caps it (Strategy::cap_routing).
LayerOutput run_shape(const at::Tensor& x, const LayerInput& in, Strategy& s, const StrategyShape& shape);

// The layer's stages in order with `moe` for its MoE; stored for backward.
LayerOutput layer_forward(const at::Tensor& x, const LayerInput& in, Strategy& s, const MoeFn& moe);
// The same recomputed in backward (Megatron's --recompute-granularity full).
LayerOutput layer_recomputed(const at::Tensor& x, const LayerInput& in, Strategy& s, const MoeFn& moe);

// The MoE in one pass over all tokens, activations stored.
Combined moe_stored(const at::Tensor& x_norm, const at::Tensor& probs, const MoeRouting& routing,
                    const LayerWeights& w);
// The MoE in `chunks` token chunks one after another, each stored (ChunkedEP without recomputation).
Combined moe_stored_in_chunks(const at::Tensor& x_norm, const at::Tensor& probs, const MoeRouting& routing,
                              const LayerWeights& w, int64_t chunks);
// The MoE recomputed as one block in backward (Megatron's --recompute-modules moe).
Combined moe_as_one_block(const at::Tensor& x_norm, const at::Tensor& probs, const MoeRouting& routing,
                          const LayerWeights& w);

}  // namespace memfine
