#include "core/model/flops.h"

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

}  // namespace memfine
