// What Transformer Engine's attention keeps, and what fine-grained offloading moves, shared by the
// profiles of the frameworks that run TE's kernels (megatron_te, fsdp_te).
#include "core/project/profile_parts.h"

namespace memfine {

// GQA (Megatron's gpt_layer_specs.py: the input norm fused into linear_qkv's
// TELayerNormColumnParallelLinear): its input x and normed output (TE layernorm_linear.py
// prepare_for_saving: inputmat, ln_out) and rsigma; q, k, v after RoPE and the output, which
// linear_proj saves as its input (dot_product_attention/backends.py: q, k, v, out_f16); the fused
// kernel's softmax statistics, one fp32 per head (cpp_extensions/fused_attn.py), no scores.
// --qk-layernorm (Qwen3) keeps the norms' inputs and rsigma too (ops/basic/rmsnorm.py).
// MLA (multi_latent_attention.py, no down-projection fusion): the separate input norm's input,
// output and rsigma; the compressed query and its norm's output, rsigma; the compressed key-value
// with its rotary part, its norm's output, rsigma; query, key and value after the up-projections
// and RoPE; the core's output; the statistics.
double te_mla_qkv(const ModelConfig& m) {
  return double(m.heads) * (2 * double(m.head_dim) + double(m.v_dim()));
}

// In FP8 (TE's layernorm_linear.py and linear.py save the quantized input for the weight gradient):
// linear_qkv's normed input an FP8 copy; linear_proj's input, which the core keeps in bf16 too, an
// FP8 copy beside it. MLA's two down-projections each keep an FP8 copy of the normed input, the
// up-projections FP8 copies of the compressed query and key-value norms' outputs.
double te_attention(const ModelConfig& m, double kB, double fp8) {
  const double h = double(m.hidden), H = double(m.heads), G = double(m.kv_heads), d = double(m.head_dim);
  if (m.attention == "none") return 0;
  if (m.attention == "mla") {
    const double dr = double(m.rope_head_dim), dv = double(m.v_dim());
    const double q_lr = double(m.q_lora_rank), kv_lr = double(m.kv_lora_rank);
    const double fp32 = kFp32 * ((q_lr > 0 ? 3 : 2) + H);
    if (fp8 > 0)
      return kB * (h + q_lr + kv_lr + dr + te_mla_qkv(m) + H * dv) + fp8 * (2 * h + q_lr + kv_lr + H * dv) + fp32;
    return kB * (2 * h + 2 * q_lr + 2 * kv_lr + dr + te_mla_qkv(m) + H * dv) + fp32;
  }
  const double qk_norm = m.qk_norm ? (H + G) * d : 0;
  const double fp32 = kFp32 * (1 + H + (m.qk_norm ? H + G : 0));
  if (fp8 > 0) return kB * (h + 2 * H * d + 2 * G * d + qk_norm) + fp8 * (h + H * d) + fp32;
  return kB * (2 * h + 2 * H * d + 2 * G * d + qk_norm) + fp32;
}

RowWidth te_row(const StrategyShape& s, double h, double F, double kB, double tail, double fp8) {
  switch (s.experts) {
    case ExpertStorage::ActRecomputed:
      if (fp8 > 0) return {fp8 * h + kB * 2 * F + tail, "h fp8 + 2F"};
      return {kB * (h + 2 * F) + tail, "h + 2F"};
    case ExpertStorage::BufferFree:
      return {kB * (h + (s.keep_act ? 3 : 2) * F) + tail, s.keep_act ? "h + 3F" : "h + 2F"};
    default:
      if (fp8 > 0) return {fp8 * (h + F) + kB * 2 * F + tail, "h + F fp8 + 2F"};
      return {kB * (h + 3 * F) + tail, "h + 3F"};
  }
}

void add_offload(const ModelConfig& m, const StrategyShape& s, double kB, double act_row, LayerWidths& w) {
  const OffloadSpec& o = s.offload;
  const double h = double(m.hidden), F = double(m.ffn_hidden);
  const double q = double(m.heads * m.head_dim), kv = double(m.kv_heads * m.head_dim);
  if (o.has(Module::AttnNorm)) w.offload_token += kB * h;
  if (o.has(Module::QkvLinear)) w.offload_token += kB * h;
  if (o.has(Module::CoreAttn)) w.offload_token += kB * (q + 2 * kv);
  if (o.has(Module::AttnProj)) w.offload_token += kB * q;
  if (o.has(Module::MlpNorm)) w.offload_token += kB * h;
  if (!s.recompute_layer && s.moe == MoeMode::Stored && s.experts != ExpertStorage::BufferFree) {
    if (o.has(Module::ExpertFc1)) w.offload_row += kB * h;
    if (o.has(Module::MoeAct)) w.offload_row += kB * act_row;
    if (o.has(Module::ExpertFc2) && s.experts != ExpertStorage::ActRecomputed) w.offload_row += kB * F;
  }
}

}  // namespace memfine
