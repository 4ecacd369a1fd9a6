// What a decoder layer keeps for its backward at cluster scale, per token and per routed row, under
// a strategy's shape: the widths `memfine project` multiplies by a layout's tokens and rows. A
// framework profile says it for the code a run uses; `memfine` is this suite's own layer, the
// widths its implementation model (memory_model.h) accounts to the byte at the benchmark's scale:
// the paper's Eq. 2 s term outside the experts, and per received row the expert's input, output
// and weighted rows (3 h) with z = [a | b], SiLU(a) and their product (4 g), fewer as the shape's
// expert storage keeps fewer.
#pragma once
#include <string>

#include "core/config/config.h"
#include "core/moe/shape.h"

namespace memfine {

// Elements (not bytes) of one layer's activations.
struct LayerWidths {
  // Per token of a rank's sequence-parallel share (split by TP x CP).
  double attention = 0;  // norms, attention's saved tensors and the residual: Eq. 2's s term
  double router = 0;     // the router's probabilities
  double input = 0;      // the layer's input: what a layer recomputed in backward keeps
  // Per token, split by TP alone (the shared and dense experts' width is).
  double shared = 0;     // the shared experts' SwiGLU (input rows aside)
  double dense_ffn = 0;  // a dense layer's SwiGLU
  // Per row the hottest rank's experts receive.
  double row = 0;
  // Of the above, what offloading moves to the host where the shape's modules say (per token of
  // the sequence-parallel share; per routed row where its experts keep their rows).
  double offload_token = 0, offload_row = 0;
};

// The `memfine` profile's widths of a MoE layer under `s` (a dense layer's are the same but for
// the router, the experts and what offloading takes of them).
LayerWidths layer_widths(const ModelConfig& m, const StrategyShape& s);

// Its row widths as the projection's notes say them: "3h + 4g".
std::string row_text(const StrategyShape& s);

// The loss's logits per token in bytes (bf16 and the fp32 softmax), split by TP.
double logits_bytes_per_token(const ModelConfig& m);

}  // namespace memfine
