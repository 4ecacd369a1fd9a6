// NeMo AutoModel's MoE layers under FSDP2 with Transformer Engine's attention and linears
// (Automodel 36044ad3d1: components/models/common/utils.py BackendConfig, components/moe/layers.py,
// experts.py, parallelizer.py): what autograd keeps. Attention is TE's, as in Megatron's profile; the
// MoE gate and the shared and dense MLPs are eager PyTorch, which keeps more per token; the routed
// experts use Megatron's fused weighted SwiGLU (vendored moe_utils.py).
#include "core/project/profile.h"
#include "core/project/profile_parts.h"

namespace memfine {

LayerWidths fsdp_widths(const ModelConfig& m, const StrategyShape& s, double kB) {
  const double h = double(m.hidden), F = double(m.ffn_hidden), E = double(m.experts), k = double(m.topk);
  const double Fs = F * double(m.shared_experts), Fd = double(m.dense_ffn_hidden);
  // Attention: TE's, as Megatron's (qwen3_moe/layers.py: TE RMSNorm, Linear and DotProductAttention).
  const double attn = te_attention(m, kB);
  ProfileParts p;
  // The post-attention norm's input, rstd and output (the gate's F.linear and the shared experts
  // save it).
  p.outside = attn + kB * 2 * h + kFp32;
  // The gate's softmax (fp32, layers.py Gate), its top-k indices (int64) and weights (fp32); the
  // shared experts as an eager MLP: gate_proj's output, SiLU's output, up_proj's output, their
  // product (4 Fs).
  p.block = kFp32 * E + k * (kInt64 + kFp32) + kB * 4 * Fs;
  // Per routed row (GroupedExpertsDeepEP): fc1's input, z (weighted_bias_swiglu saves it), fc2's
  // input, the row's probability; AutoModel has no moe_act setting: the shape's storage is priced
  // in the same terms as Megatron's.
  const RowWidth row = te_row(s, h, F, kB, kFp32);
  p.row = row.bytes;
  p.arrived = kB * h;
  // activation_checkpointing: true checkpoints each block but saves the router's projection and
  // its top-k (parallelizer.py apply_ac: MUST_SAVE): the block's input, the router's logits, the
  // top-k values and indices.
  p.layer_input = kB * (h + E) + k * (kB + kInt64);
  // A dense layer: attention, the norm (input, rstd, output) and an eager MLP (4 Fd).
  p.dense = attn + kB * (2 * h + 4 * Fd) + kFp32;
  LayerWidths w = assemble(p, s);
  if (s.recompute_layer) w.dense = kB * h;  // the router's outputs are a MoE layer's alone
  w.row_text = row.text + " bf16 + an fp32 probability";
  add_offload(m, s, kB, 2 * F, w);
  return w;
}

}  // namespace memfine
