// What a decoder layer keeps for its backward at cluster scale, per token and per routed row: the
// widths a framework profile (profile.h) gives and its parts (profile_parts.h) assemble.
#pragma once
#include <string>

namespace memfine {

// Element widths in bytes, for the terms stored at their own type (statistics, index maps, masks).
constexpr double kFp32 = 4, kInt32 = 4, kInt64 = 8, kBool = 1;

// Bytes one layer keeps (activations of `element_bytes`; fp32 statistics and index maps at their
// own widths): per token of the rank's sequence-parallel share (TP x CP) and per row the hottest
// rank's experts receive.
struct LayerWidths {
  // A MoE layer's, from its forward to its backward, and what its backward holds again while it
  // runs (what recomputation rebuilds: one chunk's rows where the MoE runs in chunks).
  double token = 0, row = 0;
  double token_again = 0, row_again = 0;
  // A dense layer's, per token, the same two ways.
  double dense = 0, dense_again = 0;
  // Of what a MoE layer keeps, what offloading moves to the host (the shape's modules): per token,
  // and per routed row where its experts keep their rows. A dense layer moves the per-token part.
  double offload_token = 0, offload_row = 0;
  // The row's width as the projection's notes say it: "h + 3F bf16 + 1 fp32".
  std::string row_text;
};

}  // namespace memfine
