// Megatron-Core's decoder layer with Transformer Engine's spec (--transformer-impl
// transformer_engine, --moe-grouped-gemm, --moe-permute-fusion, --moe-router-fusion,
// --moe-router-dtype fp32, fused attention and RoPE): what autograd keeps, read from the code
// (Megatron-LM d98e8a64dd, TransformerEngine d0067d0da6; files and lines below). Sequence
// parallelism, which Megatron requires for MoE with TP > 1, splits every per-token term by TP.
#include "core/predict/profile.h"
#include "core/predict/profile_parts.h"

namespace memfine {

namespace {
constexpr double kFp32 = 4, kInt32 = 4, kBool = 1;
}  // namespace

LayerWidths megatron_widths(const ModelConfig& m, const StrategyShape& s, double kB) {
  const double h = double(m.hidden), F = double(m.ffn_hidden), E = double(m.experts);
  const double Fs = F * double(m.shared_experts), Fd = double(m.dense_ffn_hidden);
  const double attn = te_attention(m, kB);
  ProfileParts p;
  // The MoE layer's own norm (a separate TENorm: its input, rsigma) and its output, which the
  // router's gating linear (moe_utils.py) and the shared experts' fc1 save: the block's input,
  // what `--recompute-modules moe` keeps (moe_layer.py checkpoints MoELayer.forward).
  p.outside = attn + kB * 2 * h + kFp32;
  // Inside the block, per token: the fused router's probabilities and its aux-loss scores (fp32)
  // and routing map (router.py), the fused permutation's row map, 2E + 1 int32 a token
  // (triton/permutation.py make_row_id_map), the shared experts' fc1 output (2 Fs, saved by
  // bias_swiglu) and fc2 input (Fs).
  p.block = kFp32 * 2 * E + kBool * E + kInt32 * (2 * E + 1) + kB * 3 * Fs;
  // Per routed row: fc1's input (GroupedLinear saves it), fc1's output z (WeightedSwiGLU saves
  // it), fc2's input SiLU(a) * b (GroupedLinear), the row's probability (fp32) and its place in
  // the chunk sort (int32). moe_act discards fc2's input (experts.py CheckpointWithoutOutput).
  // Buffer-free experts (not a Megatron option) keep z and the arrived row, in Megatron's terms.
  const RowWidth row = te_row(s, h, F, kB, kFp32 + kInt32);
  p.row = row.bytes;
  // Full recomputation keeps each layer's input (recompute.py checkpoints hidden_states).
  p.layer_input = kB * h;
  p.arrived = kB * h;
  // A dense layer: attention, then fc1 with its fused norm (x, ln_out, rsigma), z and SiLU(a) * b.
  p.dense = attn + kB * (2 * h + 3 * Fd) + kFp32;
  LayerWidths w = assemble(p, s);
  w.row_text = row.text + " bf16 + 8 bytes (probability, row map)";
  // Offloading (--fine-grained-activation-offloading): its modules' saved tensors; the fused
  // SwiGLU keeps z (2F) as the activation's input.
  add_offload(m, s, kB, 2 * F, w);
  return w;
}

}  // namespace memfine
