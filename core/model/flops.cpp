#include "core/model/flops.h"

#include <algorithm>

namespace memfine {

StepFlops step_flops(const ModelConfig& m, int64_t received_rows) {
  const double T = double(m.tokens()), h = double(m.hidden), L = double(m.layers);
  StepFlops f;
  if (m.attention == "gqa") {
    const double q = double(m.heads * m.head_dim), kv = double(m.kv_heads * m.head_dim);
    const double proj = 2.0 * T * h * (2.0 * q + 2.0 * kv);                               // q, k, v, o
    const double core = 4.0 * double(m.micro_batch) * double(m.seq) * double(m.seq) * q;  // QK^T and PV, full square
    f.attention = 3.0 * L * (proj + core);
  }
  f.router = 3.0 * L * 2.0 * T * h * double(m.experts);
  f.experts = 3.0 * expert_forward_flops(double(received_rows), h, double(m.ffn_hidden));
  if (m.shared_experts > 0) f.shared = 3.0 * L * expert_forward_flops(T, h, double(m.ffn_hidden * m.shared_experts));
  return f;
}

double attention_proj_flops(const ModelConfig& m) {
  const double h = double(m.hidden), H = double(m.heads);
  if (m.attention == "mla") {
    const double qk = double(m.head_dim), v = double(m.v_dim()), rope = double(m.rope_head_dim);
    const double q =
        m.q_lora_rank > 0 ? 2 * h * double(m.q_lora_rank) + 2 * double(m.q_lora_rank) * H * qk : 2 * h * H * qk;
    const double kv = 2 * h * double(m.kv_lora_rank + m.rope_head_dim) +
                      2 * double(m.kv_lora_rank) * H * (qk - rope + v);  // k without its rotary part, and v
    return q + kv + 2 * H * v * h;
  }
  const double q = H * double(m.head_dim), kv = double(m.kv_heads * m.head_dim);
  return 2 * h * (q + 2 * kv) + 2 * q * h;
}

double attention_core_flops(const ModelConfig& m) {
  const double qk = double(m.head_dim), v = double(m.v_dim()), s = double(m.seq);
  // Keys a query attends to on average: half the causal sequence; in a windowed layer the window
  // (less the first window's queries, which see fewer).
  const double w = std::min(double(m.sliding_window), s);
  const double windowed = m.sliding_window > 0 ? w - w * w / (2 * s) + w / (2 * s) : s / 2;
  const double keys = (1 - m.sliding_share) * s / 2 + m.sliding_share * windowed;
  return 2 * keys * double(m.heads) * (qk + v);
}

LayerFlops layer_flops(const ModelConfig& m) {
  const double h = double(m.hidden);
  LayerFlops f;
  f.attention_proj = attention_proj_flops(m);
  f.attention_core = attention_core_flops(m);
  f.dense_ffn = expert_forward_flops(1, h, double(m.dense_ffn_hidden));
  f.router = 2 * h * double(m.experts);
  f.experts = expert_forward_flops(double(m.topk), h, double(m.ffn_hidden));
  f.shared = expert_forward_flops(double(m.shared_experts), h, double(m.ffn_hidden));
  f.lm_head = 2 * h * double(m.vocab);
  f.mtp_proj = 2 * 2 * h * h;
  return f;
}

namespace {
// SwiGLU's two GEMMs: fc1 (gate and up, column-parallel) and fc2 (row-parallel).
std::vector<DenseGemm> swiglu_gemms(double h, double ffn) {
  if (ffn <= 0) return {};
  return {{2 * ffn, h, TpSplit::Columns}, {h, ffn, TpSplit::Rows}};
}
}  // namespace

LayerGemms layer_gemms(const ModelConfig& m) {
  const double h = double(m.hidden), H = double(m.heads);
  LayerGemms g;
  if (m.attention == "mla") {
    const double qk = double(m.head_dim), v = double(m.v_dim()), rope = double(m.rope_head_dim);
    const double q_lora = double(m.q_lora_rank), kv_lora = double(m.kv_lora_rank);
    const DenseGemm q_up = m.q_lora_rank > 0 ? DenseGemm{H * qk, q_lora} : DenseGemm{H * qk, h};
    const DenseGemm kv_up{H * (qk - rope + v), kv_lora};
    if (m.q_lora_rank > 0) g.attention.push_back({q_lora, h});
    g.attention.push_back(q_up);
    g.attention.push_back({kv_lora + rope, h});
    g.attention.push_back(kv_up);
    g.attention.push_back({h, H * v, TpSplit::Rows});
    g.mla_up = {q_up, kv_up};
  } else {
    const double q = H * double(m.head_dim), kv = double(m.kv_heads * m.head_dim);
    g.attention = {{q + 2 * kv, h}, {h, q, TpSplit::Rows}};
  }
  g.dense_ffn = swiglu_gemms(h, double(m.dense_ffn_hidden));
  g.router = {{double(m.experts), h, TpSplit::None}};
  g.shared = swiglu_gemms(h, double(m.shared_experts) * double(m.ffn_hidden));
  g.lm_head = {{double(m.vocab), h}};
  g.mtp_proj = {{h, 2 * h}};
  return g;
}

TokenFlops token_flops(const ModelConfig& m) {
  const double L = double(m.layers), moe = double(m.moe_layers());
  const LayerFlops l = layer_flops(m);
  TokenFlops f;
  f.attention_proj = L * l.attention_proj;
  f.attention_core = L * l.attention_core;
  f.dense_ffn = double(m.dense_layers) * l.dense_ffn;
  f.router = moe * l.router;
  f.experts = moe * l.experts;
  f.shared = moe * l.shared;
  f.lm_head = l.lm_head;
  const double moe_layer = l.attention_proj + l.attention_core + l.router + l.experts + l.shared;
  f.mtp = double(m.mtp_layers) * (moe_layer + l.mtp_proj + l.lm_head);
  return f;
}

LayerBytes memory_bound_bytes(const ModelConfig& m, double element_bytes) {
  const double kBf16 = element_bytes, kFp32 = 4;
  const double h = double(m.hidden), H = double(m.heads), g = double(m.ffn_hidden);
  LayerBytes b;
  const double qk_norm = m.qk_norm ? 2 * (H + double(m.kv_heads)) * double(m.head_dim) : 0;
  const double norms = 2 * 2 * h + (m.attention == "mla" ? 2 * double(m.q_lora_rank + m.kv_lora_rank) : 0) + qk_norm;
  const double rotary =
      m.attention == "mla" ? 2 * (H + 1) * double(m.rope_head_dim) : 2 * (H + double(m.kv_heads)) * double(m.head_dim);
  b.attention = kBf16 * (norms + 2 * 3 * h + rotary);
  b.dense_ffn = kBf16 * 3 * double(m.dense_ffn_hidden);
  b.moe_token = kBf16 * 2 * double(m.experts) + kBf16 * 3 * g * double(m.shared_experts);
  b.routed_row = kBf16 * (2 * h + 2 * h + 3 * g);
  b.head = kBf16 * double(m.vocab) + kFp32 * 2 * double(m.vocab);
  return b;
}

double total_parameters(const ModelConfig& m) {
  const double h = double(m.hidden), g = double(m.ffn_hidden), E = double(m.experts);
  const double attention = attention_proj_flops(m) / 2;
  const double moe_layer = attention + h * E + 3 * h * g * (E + double(m.shared_experts));
  return double(m.layers) * attention + double(m.dense_layers) * 3 * h * double(m.dense_ffn_hidden) +
         double(m.moe_layers()) * (moe_layer - attention) + 2 * double(m.vocab) * h +
         double(m.mtp_layers) * (moe_layer + 2 * h * h);
}

double active_matmul_parameters(const ModelConfig& m) {
  const TokenFlops f = token_flops(m);
  return (f.forward() - f.attention_core - f.mtp) / 2;
}

}  // namespace memfine
