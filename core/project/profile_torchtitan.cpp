// torchtitan's MoE models (models/deepseek_v3, models/qwen3 and the shared models/moe) under FSDP2,
// eager, by its expert-parallel path (all_to_all_single, or DeepEP's buffer), the router's scores
// applied after the experts as every shipped flavour does: what autograd keeps, read from the code at
// torchtitan 36a4b6942 (2025-12-17; files below under torchtitan/), and from PyTorch where its
// kernels decide. Its per-op selective checkpointing keeps a list of ops' outputs instead
// (activation_checkpoint.py).
#include <vector>

#include "core/project/profile.h"
#include "core/project/profile_parts.h"

namespace memfine {

namespace {

// The linears of a layer's attention in the order its forward runs them, by output width, elements
// a token (deepseek_v3/model/model.py Attention.forward; qwen3/model/model.py Attention.forward).
std::vector<double> attention_linears(const ModelConfig& m) {
  const double h = double(m.hidden), H = double(m.heads), G = double(m.kv_heads), d = double(m.head_dim);
  if (m.attention == "none") return {};
  if (m.attention == "mla") {
    const double dr = double(m.rope_head_dim), dn = d - dr, dv = double(m.v_dim());
    const double rq = double(m.q_lora_rank), rkv = double(m.kv_lora_rank);
    std::vector<double> out;
    if (rq > 0) out.push_back(rq);  // wq_a, then wq_b
    out.insert(out.end(), {H * d, rkv + dr, H * (dn + dv), h});
    return out;
  }
  return {H * d, G * d, G * d, h};
}

// Per token of a layer, what its attention keeps with nothing recomputed. Every norm is
// torch.nn.RMSNorm, whose fused kernel saves its input and an fp32 rstd a row, not its output,
// which the next linear saves as its input. Rotary multiplies by constant buffers and keeps nothing
// a token. SDPA (cuDNN, flash, efficient) and FlexAttention save q, k, v, the output and an fp32
// logsumexp a head.
// - MLA: the input norm's input and output; the compressed query's norm (q_lora > 0) the same; the
//   compressed key-value whole (its norm's input is a view of it) and its norm's output; q and k
//   after RoPE, k expanded over the heads; v, a view of wkv_b's output, keeping all of it; the
//   core's output (wo's input).
// - GQA: the input norm's input and output; with qk-norm (Qwen3) the norms' inputs and rstd; q, and
//   k and v repeated over the query heads (repeat_kv copies them); the core's output.
double attention_kept(const ModelConfig& m, double kB) {
  const double h = double(m.hidden), H = double(m.heads), G = double(m.kv_heads), d = double(m.head_dim);
  if (m.attention == "none") return 0;
  const double norm = 2 * kB * h + kFp32;
  if (m.attention == "mla") {
    const double dr = double(m.rope_head_dim), dn = d - dr, dv = double(m.v_dim());
    const double rq = double(m.q_lora_rank), rkv = double(m.kv_lora_rank);
    const double q_norm = rq > 0 ? 2 * kB * rq + kFp32 : 0;
    return norm + q_norm + kB * (rkv + dr) + kFp32 + kB * rkv + kB * 2 * H * d + kB * H * (dn + dv) + kB * H * dv +
           kFp32 * H;
  }
  const double qk_norm = m.qk_norm ? kB * (H + G) * d + kFp32 * (H + G) : 0;
  return norm + qk_norm + kB * 4 * H * d + kFp32 * H;
}

// The per-op policy (activation_checkpoint.py _get_custom_policy with deepseek_v3/infra/
// parallelize.py's list): every other aten.mm's output is saved, the first of a layer's saved, the
// router's gate never counted; the attention kernel's outputs (output, logsumexp) and the
// all-to-alls' outputs saved; everything else, the grouped GEMMs included, recomputed. Qwen3's list
// (qwen3/infra/parallelize.py) leaves the all-to-alls out: not told apart here.
double saved_linears(const std::vector<double>& outputs, double kB) {
  double kept = 0;
  for (size_t i = 0; i < outputs.size(); i += 2) kept += kB * outputs[i];
  return kept;
}

}  // namespace

LayerWidths torchtitan_widths(const ModelConfig& m, const StrategyShape& s, double kB, const ProfileOptions& o) {
  const bool deepep = o.deepep;
  const double h = double(m.hidden), F = double(m.ffn_hidden), E = double(m.experts), k = double(m.topk);
  const double Fs = F * double(m.shared_experts), Fd = double(m.dense_ffn_hidden);
  const double attn = attention_kept(m, kB);
  const double ffn_norm = 2 * kB * h + kFp32;  // the MoE's or the FFN's norm: input, rstd, output
  ProfileParts p;
  p.outside = attn + ffn_norm;
  // Inside the MoE block, per token (models/moe/moe.py): the router's scores, fp32 (softmax or
  // sigmoid of scores.to(float32)); per each of its k assignments the top-k index (int64) and the
  // gathered score (fp32), the reorderer's stable argsort and the token index idx // k (int64 each),
  // and an fp32 copy of the expert's output, which the bmm that weighs the outputs by their scores
  // saves; the shared experts' eager MLP (w1's output, SiLU's, w3's and their product).
  // Through DeepEP (distributed/deepep/deepep.py, expert_parallel.py DeepEPExpertParallel) the scores
  // weigh the rows on the expert's side, in bf16: a token keeps its top-k index alone.
  p.block = kFp32 * E + (deepep ? k * kInt64 : k * (kFp32 * h + 3 * kInt64 + kFp32)) + kB * 4 * Fs;
  // Per received row (models/moe/utils.py _permute, moe.py GroupedExperts): the permuted input,
  // which torch._grouped_mm saves for w1 and w3, SiLU's input h1, its output, h3 and their product
  // (w2's input), and the int32 permutation index. Rows are padded to 8 an expert: not priced.
  RowWidth row;
  switch (s.experts) {
    case ExpertStorage::ActRecomputed:
      row = {kB * (h + 2 * F), "h + 2F"};
      break;
    case ExpertStorage::BufferFree:
      row = {kB * (h + (s.keep_act ? 3 : 2) * F), s.keep_act ? "h + 3F" : "h + 2F"};
      break;
    default:
      row = {kB * (h + 4 * F), "h + 4F"};
  }
  // Through DeepEP: no padding; beside the expert's set, its bf16 output and score (the product that
  // weighs it saves both), the int64 index the combine's scatter_add saves and the two int64 of the
  // index_put that builds the routing map.
  p.row = row.bytes + (deepep ? kB * (h + 1) + 3 * kInt64 : kInt32);
  p.arrived = kB * h;
  p.layer_input = kB * h;  // full checkpointing (ptd_checkpoint_wrapper) keeps the block's input
  p.dense = attn + ffn_norm + kB * 4 * Fd;
  LayerWidths w = assemble(p, s);
  w.row_text = deepep ? row.text + " + h bf16 (its output) + int64 indices (DeepEP's path)"
                      : row.text + " bf16 + an int32 index; a sent row's fp32 output copy, its indices and score";
  if (o.selective_op && !s.recompute_layer && s.moe == MoeMode::Stored && s.chunks <= 1) {
    // Op-level selective checkpointing: each layer keeps its input, the saved linears' outputs, the
    // attention's output and logsumexp; each routed row its dispatch's output, and each sent one its
    // combine's output (both since torchtitan's PR 1672, which put all_to_all_single on the list:
    // before it, llama3's list kept neither). The rest is rebuilt for the layer's backward.
    std::vector<double> moe_mm = attention_linears(m), dense_mm = attention_linears(m);
    if (Fs > 0) moe_mm.insert(moe_mm.end(), {Fs, Fs, h});  // w1, w3, w2 in the order forward runs them
    dense_mm.insert(dense_mm.end(), {Fd, Fd, h});
    const double H = double(m.heads), out = m.attention == "none" ? 0 : kB * H * double(m.v_dim()) + kFp32 * H;
    // The combine returns each token once through DeepEP, a row per assignment through all_to_all_single.
    // At EP 1 no all-to-all runs (no ExpertParallel wraps the experts): the list keeps none.
    const double a2a = o.selective_op_all_to_all && o.all_to_all ? 1 : 0;
    const double combined = a2a * (deepep ? kB * h : k * kB * h);
    const double moe_token = kB * h + saved_linears(moe_mm, kB) + out + combined, moe_row = a2a * kB * h;
    const double dense_token = kB * h + saved_linears(dense_mm, kB) + out;
    w.token = moe_token, w.token_again = p.outside + p.block - moe_token;
    w.row = moe_row, w.row_again = p.row - moe_row;
    w.dense = dense_token, w.dense_again = p.dense - dense_token;
    w.row_text = !o.all_to_all ? "0 bytes (op-level checkpointing at EP 1: no all-to-all to keep)"
                 : o.selective_op_all_to_all
                     ? "h bf16 (the dispatch's output; op-level checkpointing)"
                     : "0 bytes (op-level checkpointing before torchtitan kept the all-to-alls)";
  }
  add_offload(m, s, kB, 2 * F, w);
  return w;
}

}  // namespace memfine
