#include "core/project/compute.h"

#include <algorithm>

#include "core/model/flops.h"
#include "core/project/profile.h"
#include "core/project/rates.h"
#include "core/util/format.h"

namespace memfine {

Stage stage_of(const ModelConfig& m, const RankShape& r) {
  return {double(r.layers() + r.mtp), double(r.dense), double(r.moe + r.mtp), double(r.mtp),
          r.loss ? double(1 + m.mtp_layers) : 0};
}

bool replays_moe(const StrategyShape& s) { return s.recompute_layer || s.moe != MoeMode::Stored; }

double moe_runs(const StrategyShape& s) {
  return s.moe == MoeMode::Chunked || s.moe == MoeMode::Stored ? double(std::max<int64_t>(s.chunks, 1)) : 1;
}

bool on_sink_curve(const ModelConfig& m, const Hardware& hw, const ProjectSetting& set) {
  return m.attention_sinks && set.framework.sinks_on_sink_curve && !hw.sink_attention_head_dim_curve.empty();
}

bool on_flex_curve(const Hardware& hw, const ProjectSetting& set) {
  return set.framework.flex_attention && !hw.flex_attention_head_dim_curve.empty();
}

double core_attention_rate(const ModelConfig& m, const Hardware& hw, const ProjectSetting& set) {
  if (on_flex_curve(hw, set)) return curve_at(hw.flex_attention_head_dim_curve, double(m.head_dim)) * 1e12;
  return attention_rate(hw, double(m.head_dim), on_sink_curve(m, hw, set));
}

bool op_level_checkpointing(const ProjectSetting& set, const StrategyShape& s) {
  return set.framework.selective_op && !s.recompute_layer && s.moe == MoeMode::Stored;
}

bool sorts_rows(const ProjectSetting& set) {
  return set.framework.alltoall_sorts_rows && set.dispatcher == Dispatcher::AllToAll;
}

namespace {

// The experts' bias traffic behind the dispatcher the run uses (framework.h).
const FrameworkSetting::BiasBytes& expert_bias_of(const ProjectSetting& set) {
  return set.dispatcher == Dispatcher::DeepEp ? set.framework.deepep_expert_bias : set.framework.expert_bias;
}

// How compute_of priced a micro-batch, as the projection's notes say it: the rates taken, the
// memory-bound kernels counted.
std::string pricing_note(const ModelConfig& m, const Hardware& hw, const ProjectSetting& set, bool sorts, bool biases) {
  const FrameworkSetting::BiasBytes& bias = expert_bias_of(set);
  return "dense GEMMs " + gemm_rate_note(hw) + ", attention at " +
         (on_flex_curve(hw, set)
              ? four_digits(core_attention_rate(m, hw, set) / 1e12) + " (FlexAttention at head dim " +
                    std::to_string(m.head_dim) + " on the preset's flex curve)"
              : attention_rate_note(hw, m.head_dim, on_sink_curve(m, hw, set))) +
         ", grouped expert GEMMs " + grouped_rate_note(hw) +
         "; MemFine's chunks run at their rows per chunk; memory-bound kernels (norms, "
         "residuals, rotary, permutes" +
         (sorts ? " and, where a rank holds several experts, the all-to-all dispatcher's sorts of its rows" : "") +
         ", SwiGLU's product, the loss" +
         (biases ? ", the experts' biases added outside the GEMMs (" + four_digits(bias.h) +
                       " bytes an element of a routed row" +
                       (bias.f > 0 ? " and " + four_digits(bias.f) + " of its expert width" : std::string()) + ")"
                 : "") +
         (m.glu_limit > 0 && set.framework.glu_clamp_forward_bytes > 0
              ? ", the experts' GLU inputs clamped outside the fused activation (" +
                    four_digits(set.framework.glu_clamp_forward_bytes + set.framework.glu_clamp_backward_bytes) +
                    " bytes an element of a routed row's expert width)"
              : "") +
         (m.rope_mscale != 1 && set.framework.unfused_rope_bytes > 0
              ? ", RoPE unfused where YaRN scales it (" + four_digits(set.framework.unfused_rope_bytes) +
                    " bytes more an element of the queries and keys)"
              : "") +
         ") at " + four_digits(hw.hbm_gb_s) + " GB/s" +
         (set.framework.wgrad_accumulate_bytes > 0
              ? "; each local expert's weight gradient at the longer of its product and its accumulation into the "
                "gradient buffer (" +
                    four_digits(set.framework.wgrad_accumulate_bytes) +
                    " bytes a weight at the HBM rate, per micro-batch and chunk)"
              : "") +
         "; recomputation adds a forward with its dispatch and combine; MTP layers count as MoE layers" +
         (set.fp8 ? std::string("; in FP8") +
                        (set.precision == "fp8_blockwise" ? " (block-scaled)"
                         : set.precision == "mxfp8"       ? " (MXFP8)"
                                                          : "") +
                        " the linears' GEMMs (dense and grouped; not the router's, the attention core's or the "
                        "output layer's) at the preset's FP8 over bf16 ratio at their rows (" +
                        four_digits(fp8_speedup(hw, 512, set.precision)) + "x at 512 rows, " +
                        four_digits(fp8_speedup(hw, 8192, set.precision)) +
                        "x at 8192), their inputs and outputs' gradients cast at the HBM rate (6 bytes an element)"
                  : "");
}

// Seconds at the HBM rate for what the framework's eager ops move for a model's particulars
// (framework.h): its clamped GLU over the stage's routed rows and its unfused RoPE over a TP rank's
// queries and keys, both directions (what the clamp keeps for backward: profile_megatron.cpp).
double eager_model_t(const ModelConfig& m, const FrameworkSetting& fw, const Stage& st, double rows, double g,
                     double rank_tokens, double hbm) {
  if (hbm <= 0) return 0;
  const double clamp =
      m.glu_limit > 0 ? st.moe * rows * g * (fw.glu_clamp_forward_bytes + fw.glu_clamp_backward_bytes) : 0;
  const double qk = m.attention == "mla" ? double(m.heads + 1) * double(m.rope_head_dim)
                                         : double(m.heads + m.kv_heads) * double(m.head_dim);
  const double rope =
      m.rope_mscale != 1 && m.attention != "none" ? st.layers * rank_tokens * qk * fw.unfused_rope_bytes : 0;
  return (clamp + rope) / hbm;
}

}  // namespace

Compute compute_of(const ModelConfig& m, const Hardware& hw, const Layout& l, const Stage& st,
                   const StrategyShape& s, const ProjectSetting& set, double received) {
  const double h = double(m.hidden), tp = double(l.tp);
  // The routed experts as this GPU runs them: under expert TP its share of each FFN over the rows
  // its ETP group gathers (layout.h).
  const ModelConfig share = expert_share(m, l);
  const double g = double(share.ffn_hidden), rows = expert_rows_on_gpu(l, received);
  const double tokens = double(l.micro_batch) * double(m.seq) / double(l.cp);
  const LayerFlops lf = layer_flops(m);
  // The dense GEMMs at their shapes: each a micro-batch's tokens on the CP rank as rows (sequence
  // parallelism gathers them for TP's GEMMs), TP's share of its outputs or inputs; forward, the data
  // gradient (rows x inputs over the outputs) and the weight gradient (inputs x outputs over the rows).
  const LayerGemms lg = layer_gemms(m);
  // In FP8 the linears' GEMMs (Transformer Engine's modules) run at the preset's FP8 ratio at each
  // GEMM's rows; the router's and the output layer's (Megatron's own linears) stay bf16.
  auto rate = [&](bool linear, double rows, double n, double k) {
    return gemm_rate(hw, rows, n, k) * fp8_speedup(hw, rows, linear ? set.precision : "bf16");
  };
  auto gemms_t = [&](const std::vector<DenseGemm>& gs, bool forward_only = false, bool linear = true) {
    double t = 0;
    for (const DenseGemm& g : gs) {
      const double n = g.split == TpSplit::Columns ? g.n / tp : g.n, k = g.split == TpSplit::Rows ? g.k / tp : g.k;
      const double f = 2 * tokens * n * k;
      t += f / rate(linear, tokens, n, k);
      if (!forward_only) t += f / rate(linear, tokens, k, n) + f / rate(linear, k, n, tokens);
    }
    return t;
  };
  const double dense_t = st.layers * gemms_t(lg.attention) + st.dense * gemms_t(lg.dense_ffn) +
                         st.moe * (gemms_t(lg.shared) + gemms_t(lg.router, false, false)) +
                         st.heads * gemms_t(lg.lm_head, false, false) + st.mtp * gemms_t(lg.mtp_proj);
  const double core_flops = 3 * tokens / tp * st.layers * lf.attention_core;
  const double expert_flops = 3 * st.moe * expert_forward_flops(rows, h, g);
  const double local = local_experts(m, l), rows_per_expert = rows / local;
  const double core_t = core_flops / core_attention_rate(m, hw, set);
  auto expert_rate = [&](double rows) {
    return expert_gemm_rate(hw, rows, h, g, local) * fp8_speedup(hw, rows, set.precision);
  };
  const double expert_t = expert_flops / expert_rate(expert_gemm_rows(m, l, s, received));
  // Memory-bound kernels at the HBM rate: what the stage's layers move per token, the routed rows
  // on the hottest rank, and the loss (core/model/flops.h), forward and the backward's twice that.
  LayerBytes mb = memory_bound_bytes(m, set.element_bytes);
  mb.routed_row = memory_bound_bytes(share, set.element_bytes).routed_row;
  // A routed row's memory-bound bytes, with the dispatcher's sorts by local expert where it runs them.
  const bool sorts = sorts_rows(set) && m.experts > l.ep;
  // And where the framework runs the routing's glue eager, what its ops move beyond the fused path.
  const FrameworkSetting& fw = set.framework;
  const double eager_h = set.dispatcher == Dispatcher::DeepEp ? fw.deepep_routed_row_h_bytes : fw.routed_row_h_bytes;
  const double routed_row =
      mb.routed_row + (sorts ? 2 * 2 * h * set.element_bytes : 0) + eager_h * h + fw.routed_row_f_bytes * g;
  const double token_bytes = st.layers * mb.attention + st.dense * mb.dense_ffn + st.moe * mb.moe_token + st.heads * mb.head;
  const double hbm = hw.hbm_gb_s * 1e9;
  // Expert biases applied outside the GEMMs: what the framework's code moves, both directions (a
  // recomputed forward is taken as a third of it, as for the other kernels, though its forward is half).
  const FrameworkSetting::BiasBytes& bias = expert_bias_of(set);
  const double bias_row = m.expert_bias ? bias.h * h + bias.f * g : 0;
  // FP8's casts, memory-bound: each linear's input in forward and its output's gradient in backward,
  // a TP rank's share of the tokens (cast before sequence parallelism's gathers), an amax pass, a
  // read and the row-wise and column-wise FP8 writes: 6 bytes an element. A routed row's: fc1's
  // input and fc2's, and their outputs' gradients (h + 2F + F + h). Weights are cast once a step.
  auto cast_width = [&](const std::vector<DenseGemm>& gs) {
    double w = 0;
    for (const DenseGemm& g : gs) w += g.n + g.k;
    return w;
  };
  const double kCast = 6;
  const double cast_token = set.fp8
                                ? kCast * (st.layers * cast_width(lg.attention) + st.dense * cast_width(lg.dense_ffn) +
                                           st.moe * cast_width(lg.shared) + st.mtp * cast_width(lg.mtp_proj))
                                : 0;
  const double cast_row = set.fp8 ? kCast * (2 * h + 3 * g) : 0;
  const double routed_t = hw.hbm_gb_s > 0 ? st.moe * (3 * routed_row + bias_row + cast_row) * rows / hbm : 0;
  const double memory_t = hw.hbm_gb_s > 0 ? (3 * token_bytes + cast_token) * tokens / tp / hbm + routed_t : 0;
  const double eager_t = eager_model_t(m, fw, st, rows, g, tokens / tp, hbm);
  // Each local expert's weight-gradient GEMM, per micro-batch and per chunk, reads and writes its
  // gradient buffer (framework.wgrad_accumulate_bytes a weight) however few its rows: it takes the
  // longer of its product at the curve's rate and that traffic at the HBM rate. (The H200 probe's
  // wgrad_acc, the product and then the add, runs slower still: an upper bound.)
  const double traffic = st.moe * local_experts(m, l) * accumulate_seconds(hw, h, g, fw.wgrad_accumulate_bytes);
  auto accumulate_t = [&](double runs, double rows) {
    return traffic > 0 ? std::max(0.0, runs * traffic - expert_flops / 3 / expert_rate(rows)) : 0.0;
  };
  const double accumulate = accumulate_t(moe_runs(s), expert_gemm_rows(m, l, s, received));
  Compute c;
  c.accumulate = accumulate;
  c.total = dense_t + core_t + expert_t + memory_t + eager_t + accumulate;
  c.dense = dense_t;
  c.chunk = expert_t - expert_flops / expert_rate(rows_per_expert) + accumulate - accumulate_t(1, rows_per_expert);
  c.experts = expert_t + routed_t;
  const double clamp_again = m.glu_limit > 0 ? fw.glu_clamp_forward_bytes : 0;
  if (hw.hbm_gb_s > 0) c.act_hbm = st.moe * rows * (set.element_bytes * 3 + clamp_again) * g / hbm;
  // What the framework's --recompute-modules run again for backward (core/project/profile_megatron.cpp
  // says what each lets go), and their launches: each unfused norm's forward, which reads and
  // writes h a token; MLA's up-projections' GEMMs (its fused RoPE, two kernels, not priced); the
  // dense MLPs' GEMMs with their fused norm and SwiGLU's product; the attention core's forward, a
  // third of its forward and backward.
  const RecomputedModules again = recomputed_under(set.framework.recomputed, s);
  const double per_byte = hw.hbm_gb_s > 0 ? tokens / tp / hbm : 0, kB = set.element_bytes;
  if (again.layernorm) {
    const double norms = st.moe * megatron_unfused_norms(m, true) + st.dense * megatron_unfused_norms(m, false);
    c.modules_again += norms * 2 * h * kB * per_byte, c.modules_launches += norms;
  }
  if (again.mla_up_proj && m.attention == "mla")
    c.modules_again += st.layers * gemms_t(lg.mla_up, true), c.modules_launches += st.layers * 4;
  if (again.mlp) {
    const double Fd = double(m.dense_ffn_hidden);
    c.modules_again += st.dense * (gemms_t(lg.dense_ffn, true) + (2 * h + 3 * Fd) * kB * per_byte);
    c.modules_launches += st.dense * std::max(0.0, set.framework.forward.dense_ffn - 1);  // but its bias-dropout-add
  }
  if (again.core_attn && m.attention != "none") c.modules_again += core_t / 3, c.modules_launches += st.layers;
  // torchtitan's op-level selective checkpointing (core/project/profile_torchtitan.cpp says what it
  // keeps): backward reruns the forward of all but every other linear and the attention core: half
  // the dense GEMMs, the routed experts whole, the memory-bound kernels; its launches again.
  if (op_level_checkpointing(set, s)) {
    c.modules_again += dense_t / 3 / 2 + (expert_t + routed_t) / 3 + (memory_t - routed_t) / 3;
    const Launches& f = set.framework.forward;
    c.modules_launches += st.layers * f.attention + st.dense * f.dense_ffn + st.moe * f.moe;
  }
  c.note = pricing_note(m, hw, set, sorts, bias_row > 0);
  return c;
}

double expert_gemm_rows(const ModelConfig& m, const Layout& l, const StrategyShape& s, double received) {
  return expert_rows_on_gpu(l, received) / local_experts(m, l) / moe_runs(s);
}

}  // namespace memfine
