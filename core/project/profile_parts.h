// How a profile's per-token and per-row terms become what a layer keeps under a shape: the one
// rule every profile shares (a layer recomputed whole keeps its input; a MoE recomputed as a block
// or in chunks keeps what lies outside the block; its backward holds the rebuilt part again).
#pragma once
#include <string>

#include "core/config/config.h"
#include "core/moe/shape.h"
#include "core/project/widths.h"

namespace memfine {

// A profile's terms in bytes, stored (no recomputation).
struct ProfileParts {
  double outside = 0;      // per token, what a MoE-block recomputation keeps: attention, norms, the block's input
  double block = 0;        // per token, inside the MoE block: router, permutation maps, shared experts
  double row = 0;          // per routed row, under the shape's expert storage
  double layer_input = 0;  // per token, what a layer recomputed whole keeps
  double dense = 0;        // per token, a dense layer stored
  double arrived = 0;      // per routed row, the dispatched row itself: what a prefetched chunk holds
};

inline LayerWidths assemble(const ProfileParts& p, const StrategyShape& s) {
  LayerWidths w;
  const double chunks = s.moe == MoeMode::Chunked ? double(s.chunks) : 1;
  // ChunkedEP's replay holds the next earlier chunk's dispatched rows beside the one that runs.
  const double ahead = s.moe == MoeMode::Chunked && s.replay == ChunkReplay::LastToFirstPrefetched && s.chunks > 1
                           ? p.arrived / chunks
                           : 0;
  const double stored = p.outside + p.block;
  if (s.recompute_layer) {
    w.token = p.layer_input, w.token_again = stored, w.row_again = p.row / chunks + ahead;
    w.dense = p.layer_input, w.dense_again = p.dense;
  } else if (s.moe != MoeMode::Stored) {
    w.token = p.outside, w.token_again = p.block, w.row_again = p.row / chunks + ahead;
    w.dense = p.dense;
  } else {
    w.token = stored, w.row = p.row, w.dense = p.dense;
  }
  return w;
}

}  // namespace memfine

namespace memfine {

// Attention with Transformer Engine's fused kernels, per token (profile_te.cpp). `fp8`: its linears
// keep FP8 copies of their inputs (`fp8` bytes an element; 0: bf16) where bf16 ones were kept for
// them alone, and beside the bf16 ones another module keeps too.
double te_attention(const ModelConfig& m, double kB, double fp8 = 0);
// MLA's query, key and value after the up-projections and RoPE, elements per token: what the core
// saves of them (H (dn + dr) each for q and k, H dv for v).
double te_mla_qkv(const ModelConfig& m);

// A routed row under the shape's expert storage in the frameworks whose fused SwiGLU keeps z and
// fc2's input (h + 3F; moe_act discards fc2's input; buffer-free experts keep z and the arrived
// row), `tail` bytes of probability and index besides; its width as notes say it.
struct RowWidth {
  double bytes = 0;
  std::string text;
};
// `fp8`: fc1's and fc2's inputs kept as FP8 copies (`fp8` bytes an element; 0: bf16), z in bf16.
RowWidth te_row(const StrategyShape& s, double h, double F, double kB, double tail, double fp8 = 0);

// What fine-grained offloading moves of a layer under `s` (added to `w`): the input norm's input,
// qkv's input, the core's q, k and v, the projection's input; per routed row fc1's input, the
// activation's saved input (`act_row` elements) and fc2's input, where the layer keeps its rows.
void add_offload(const ModelConfig& m, const StrategyShape& s, double kB, double act_row, LayerWidths& w);

}  // namespace memfine
