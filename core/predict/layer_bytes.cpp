// What a layer keeps outside its MoE, and what offloading takes of it.
#include "core/predict/step_bytes.h"

namespace memfine {

Outside outside_moe(const Sizes& z, bool input_needs_grad) {
  const double act = z.E * z.T * z.h;
  auto norm = [&](bool needs_grad) { return needs_grad ? kNormKeptWithGrad * act + z.E * z.T : 2 * act; };
  Outside o;
  if (z.attention) {
    o.norm1 = norm(input_needs_grad);
    // q, k, v and the attention context as contiguous copies, the softmax output, the causal mask;
    // through sdpa, q, k and v as the projections made them, its output (which the projection reads
    // in place) and the rows' log-sum-exp in float32.
    o.attention = z.sdpa ? z.E * 4 * z.T * z.heads_dim + 4 * z.b * z.H * z.s
                         : z.E * (4 * z.T * z.heads_dim + z.b * z.H * z.s * z.s) + z.s * z.s;
    o.h1 = act;
  }
  o.norm2 = norm(z.attention || input_needs_grad);
  o.router = z.E * z.T * z.experts;
  o.shared = z.E * 4 * z.gs * z.T;
  o.output = act;
  return o;
}

OffloadedBytes offloaded_bytes(const Sizes& z, const StrategyShape& sl, const MoeRows& m, bool input_needs_grad) {
  const OffloadSpec& spec = sl.offload;
  OffloadedBytes b;
  if (sl.recompute_layer) return b;  // its forward keeps nothing but its input
  auto add = [&](double bytes, double* to) {
    if (bytes > 0 && bytes >= double(spec.min_bytes)) *to += bytes;
  };
  const double act = z.E * z.T * z.h, r = z.E * z.T, hd = z.E * z.T * z.heads_dim;
  const bool squares = kNormKeptWithGrad > 2;
  // An RMSNorm keeps its input, the squares (LibTorch 1.13), x * rsqrt(..) and the rsqrt when its
  // input needs a gradient; x * rsqrt(..) alone when it does not (its output is the next module's).
  auto norm = [&](bool needs_grad, double* input_to) {
    add(act, &b.own);  // x * rsqrt(..)
    if (!needs_grad) return;
    add(act, input_to);
    if (squares) add(act, &b.own);
    add(r, &b.own);
  };
  if (z.attention) {
    if (spec.has(Module::AttnNorm)) norm(input_needs_grad, &b.prev);
    if (spec.has(Module::QkvLinear)) add(act, &b.own);  // the norm's output, read by q, k and v
    if (spec.has(Module::CoreAttn)) {
      for (int i = 0; i < 3; ++i) add(hd, &b.own);  // q, k and v as contiguous copies
      add(z.E * z.b * z.H * z.s * z.s, &b.own);     // the softmax output
      if (!spec.encodes()) add(z.s * z.s, &b.own);  // the causal mask (boolean: never encoded)
    }
    if (spec.has(Module::AttnProj)) add(hd, &b.own);  // the context as a contiguous copy
  }
  if (spec.has(Module::MlpNorm)) norm(z.attention || input_needs_grad, z.attention ? &b.own : &b.prev);
  // The routed experts, where a pass keeps them (a chunked MoE is recomputed: nothing kept).
  if (sl.moe == MoeMode::Stored && !z.buffer_free) {
    const bool fc1 = spec.has(Module::ExpertFc1), act_ = spec.has(Module::MoeAct), fc2 = spec.has(Module::ExpertFc2);
    if (z.a2a && fc1) add(z.E * rows_received(m) * z.h, &b.own);  // every expert's input: one buffer
    for (size_t e = 0; e < m.own.size(); ++e) {
      const double rows = double(m.own[e] + m.peer[e] + m.pad[e]);
      if (rows == 0) continue;
      if (fc1 && !z.a2a) add(z.E * rows * z.h, &b.own);
      if (act_) {
        add(z.E * rows * 2 * z.g, &b.own);                     // z = [a | b]
        if (!z.act_recomputed) add(z.E * rows * z.g, &b.own);  // SiLU(a)
      }
      if (fc2 && !z.act_recomputed) add(z.E * rows * z.g, &b.own);  // SiLU(a) * b
    }
  }
  return b;
}

}  // namespace memfine
