// MemFine's FCDA (fine-grained chunk distribution): the MoE's dispatch -> experts -> combine runs
// chunk by chunk over the sending side's token positions (paper Eq. 6), keeping only the chunk
// inputs; backward recomputes and backpropagates one chunk at a time (Eq. 7). The MoE's peak is
// then the largest chunk's, not the whole layer's.
#pragma once
#include <ATen/ATen.h>

#include "core/moe/shape.h"
#include "core/moe/stages.h"

namespace memfine {

// The MoE of one layer in `chunks` token chunks (a MoeFn for layer_forward/layer_recomputed); its
// backward replays them as `replay` says (core/moe/shape.h).
Combined chunked_moe(const at::Tensor& x_norm, const at::Tensor& probs, const MoeRouting& routing,
                     const LayerWeights& w, int64_t chunks, ChunkReplay replay = ChunkReplay::InOrder);

}  // namespace memfine
