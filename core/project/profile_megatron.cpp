// Megatron-Core's decoder layer with Transformer Engine's spec (--transformer-impl
// transformer_engine, --moe-grouped-gemm, --moe-permute-fusion, --moe-router-fusion,
// --moe-router-dtype fp32, fused attention and RoPE): what autograd keeps, read from the code
// (Megatron-LM d98e8a64dd, TransformerEngine d0067d0da6; files and lines below). Sequence
// parallelism, which Megatron requires for MoE with TP > 1, splits every per-token term by TP.
#include "core/project/profile.h"
#include "core/project/profile_parts.h"

namespace memfine {

// Megatron-Core's TE spec fuses the attention's input norm into linear_qkv and a dense MLP's into
// linear_fc1 (TELayerNormColumnParallelLinear: the layer's norm an IdentityOp); a MoE layer's norm
// is a TENorm, and MLA's input norm one of its own (gpt_layer_specs.py).
double megatron_unfused_norms(const ModelConfig& m, bool moe_layer) {
  return (moe_layer ? 1 : 0) + (m.attention == "mla" ? 1 : 0);
}

RecomputedModules recomputed_under(const RecomputedModules& again, const StrategyShape& s) {
  return s.recompute_layer ? RecomputedModules{} : again;
}

LayerWidths megatron_widths(const ModelConfig& m, const StrategyShape& s, double kB, const RecomputedModules& again,
                            double fp8) {
  const double h = double(m.hidden), F = double(m.ffn_hidden), E = double(m.experts);
  const double Fs = F * double(m.shared_experts), Fd = double(m.dense_ffn_hidden);
  const double attn = te_attention(m, kB, fp8);
  // A linear's saved input: bf16, or in FP8 an FP8 copy (TE's linear.py, grouped_linear.py).
  const double in = fp8 > 0 ? fp8 : kB;
  ProfileParts p;
  // The MoE layer's own norm (a separate TENorm: its input, rsigma) and its output, which the
  // router's gating linear (moe_utils.py) and the shared experts' fc1 save: the block's input,
  // what `--recompute-modules moe` keeps (moe_layer.py checkpoints MoELayer.forward).
  // In FP8 the shared experts' fc1 keeps an FP8 copy of that output beside the router's bf16 one.
  p.outside = attn + kB * 2 * h + kFp32 + (fp8 > 0 && Fs > 0 ? fp8 * h : 0);
  // Inside the block, per token: the fused router's probabilities and its aux-loss scores (fp32)
  // and routing map (router.py), the fused permutation's row map, 2E + 1 int32 a token
  // (triton/permutation.py make_row_id_map), the shared experts' fc1 output (2 Fs, saved by
  // bias_swiglu) and fc2 input (Fs).
  p.block = kFp32 * 2 * E + kBool * E + kInt32 * (2 * E + 1) + kB * 2 * Fs + in * Fs;
  // Per routed row: fc1's input (GroupedLinear saves it), fc1's output z (WeightedSwiGLU saves
  // it), fc2's input SiLU(a) * b (GroupedLinear), the row's probability (fp32) and its place in
  // the chunk sort (int32). moe_act discards fc2's input (experts.py CheckpointWithoutOutput).
  // Buffer-free experts (not a Megatron option) keep z and the arrived row, in Megatron's terms.
  const RowWidth row = te_row(s, h, F, kB, kFp32 + kInt32, fp8);
  // A clamped GLU (gpt-oss; fusions/fused_bias_geglu.py weighted_bias_quick_geglu_impl): the clamps
  // keep fc1's output and the activation the concatenation of the clamped halves, 2F more; moe_act
  // runs the activation without autograd and lets both go.
  const bool clamped = m.glu_limit > 0 && s.experts != ExpertStorage::ActRecomputed;
  p.row = row.bytes + (clamped ? kB * 2 * F : 0);
  // Full recomputation keeps each layer's input (recompute.py checkpoints hidden_states).
  p.layer_input = kB * h;
  p.arrived = kB * h;
  // A dense layer: attention, then fc1 with its fused norm (x, ln_out, rsigma), z and SiLU(a) * b.
  p.dense = attn + kB * (h + 2 * Fd) + in * (h + Fd) + kFp32;
  // --recompute-modules (selective granularity: a layer recomputed whole is as it is), per token of
  // a MoE layer and of a dense one, what each lets go until the layer's backward runs it again and
  // holds it while that backward runs:
  // - layernorm (transformer_layer.py: recompute_input_layernorm and recompute_pre_mlp_layernorm
  //   where the norm is not an IdentityOp): each unfused norm runs under
  //   tensor_parallel.CheckpointWithoutOutput, without autograd (no rsigma kept), its input saved and
  //   its output's storage let go once the module after it has run, though that module saved it;
  // - mla_up_proj (multi_latent_attention.py recompute_up_proj): the up-projections and RoPE under
  //   CheckpointWithoutOutput, their compressed inputs saved and q, k and v let go after the core
  //   attention has saved them;
  // - mlp (transformer_layer.py recompute_mlp, dense layers only): the MLP under
  //   tensor_parallel.checkpoint, its input kept and the rest of what it keeps (the fused norm's
  //   output and rsigma, z and fc2's input) let go;
  // - core_attn (attention.py _checkpointed_attention_forward): the fused attention under
  //   tensor_parallel.checkpoint, q, k and v kept as its inputs and its output as linear_proj's:
  //   the softmax statistics let go; its backward runs the core again, another output beside.
  double moe_gone = 0, dense_gone = 0, moe_back = 0, dense_back = 0;
  auto gone = [&](double moe_layer, double dense_layer, double extra_back) {
    moe_gone += moe_layer, dense_gone += dense_layer, moe_back += moe_layer + extra_back;
    dense_back += dense_layer + extra_back;
  };
  const RecomputedModules run = recomputed_under(again, s);
  const double norm_out = kB * h + kFp32, H = double(m.heads);
  if (run.layernorm) gone(megatron_unfused_norms(m, true) * norm_out, megatron_unfused_norms(m, false) * norm_out, 0);
  if (run.mla_up_proj && m.attention == "mla") gone(kB * te_mla_qkv(m), kB * te_mla_qkv(m), 0);
  if (run.mlp) gone(0, kB * 2 * Fd + in * (h + Fd) + kFp32, 0);
  if (run.core_attn && m.attention != "none") gone(kFp32 * H, kFp32 * H, kB * H * double(m.v_dim()));
  p.outside -= moe_gone, p.dense -= dense_gone;
  LayerWidths w = assemble(p, s);
  w.token_again += moe_back, w.dense_again += dense_back;
  w.row_text =
      row.text + (clamped ? " + 2F (the clamped GLU's halves)" : "") + " bf16 + 8 bytes (probability, row map)";
  // Offloading (--fine-grained-activation-offloading): its modules' saved tensors; the fused
  // SwiGLU keeps z (2F) as the activation's input.
  add_offload(m, s, kB, 2 * F, w);
  return w;
}

}  // namespace memfine
