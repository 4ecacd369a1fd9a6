#include "core/predict/profile.h"

namespace memfine {

LayerWidths layer_widths(const ModelConfig& m, const StrategyShape& s) {
  const double h = double(m.hidden), g = double(m.ffn_hidden);
  const double q = double(m.heads * m.head_dim), kv = double(m.kv_heads * m.head_dim);
  LayerWidths w;
  w.attention = 5 * h + q + 2 * kv;  // Eq. 2's s term (its router term apart)
  w.router = double(m.experts);
  w.input = h;
  w.shared = 4 * g * double(m.shared_experts);
  w.dense_ffn = 4 * double(m.dense_ffn_hidden);
  // Per received row: the input, output and weighted rows (3 h) and the expert's g widths: z,
  // SiLU(a) and their product (4); moe_act recomputes the last two (z alone); buffer-free experts
  // keep z (and the product with keep_act) and the arrived row once.
  switch (s.experts) {
    case ExpertStorage::Stored:
      w.row = 3 * h + 4 * g;
      break;
    case ExpertStorage::ActRecomputed:
      w.row = 3 * h + 2 * g;
      break;
    case ExpertStorage::BufferFree:
      w.row = h + (s.keep_act ? 3 : 2) * g;
      break;
  }
  // Offloading: attention's core keeps q, k and v (a fused kernel's, no scores); the experts'
  // first GEMM its input rows, where the layer keeps its experts' activations.
  const OffloadSpec& o = s.offload;
  if (o.has(Module::AttnNorm)) w.offload_token += h;
  if (o.has(Module::QkvLinear)) w.offload_token += h;
  if (o.has(Module::CoreAttn)) w.offload_token += q + 2 * kv;
  if (o.has(Module::AttnProj)) w.offload_token += q;
  if (o.has(Module::MlpNorm)) w.offload_token += h;
  if (!s.recompute_layer && s.moe == MoeMode::Stored && s.experts != ExpertStorage::BufferFree) {
    if (o.has(Module::ExpertFc1)) w.offload_row += h;
    if (o.has(Module::MoeAct)) w.offload_row += s.experts == ExpertStorage::ActRecomputed ? 2 * g : 3 * g;
    if (o.has(Module::ExpertFc2) && s.experts != ExpertStorage::ActRecomputed) w.offload_row += g;
  }
  return w;
}

std::string row_text(const StrategyShape& s) {
  switch (s.experts) {
    case ExpertStorage::ActRecomputed:
      return "3h + 2g";
    case ExpertStorage::BufferFree:
      return s.keep_act ? "h + 3g" : "h + 2g";
    default:
      return "3h + 4g";
  }
}

double logits_bytes_per_token(const ModelConfig& m) { return double(m.vocab) * (2 + 4); }

}  // namespace memfine
