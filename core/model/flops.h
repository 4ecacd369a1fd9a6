// One FLOP formula for the suite (a multiply-add counts 2). Backward costs twice the forward, so a
// training step is 3x the forward; recomputation is not counted (model FLOPs, as in MFU). The
// benchmark's rank (step_flops) and a whole model per token (token_flops, for projections) count
// alike: the experts by the one expert formula, attention's projections and core by its kind.
#pragma once
#include <cstdint>
#include <vector>

#include "core/config/config.h"

namespace memfine {

// SwiGLU expert forward on T routed token-expert rows: 6 * T * h * g.
inline double expert_forward_flops(double rows, double hidden, double ffn) { return 6.0 * rows * hidden * ffn; }

struct StepFlops {
  double attention = 0, router = 0, experts = 0, shared = 0;
  double total() const { return attention + router + experts + shared; }
};

// A training step (forward + backward) of the rank's layers; `received_rows` is s' summed over layers.
StepFlops step_flops(const ModelConfig& m, int64_t received_rows);

// ---- A whole model per token (projections)

struct TokenFlops {
  double attention_proj = 0;  // q, k, v (MLA: with its low-rank down and up projections) and o
  double attention_core = 0;  // QK^T and PV over the causal half of the sequence
  double dense_ffn = 0;       // the leading dense layers' SwiGLU
  double router = 0;
  double experts = 0;  // the routed experts (topk per token), balanced
  double shared = 0;   // the shared experts
  double lm_head = 0;
  double mtp = 0;  // DeepSeek's multi-token prediction: per module a MoE layer, its projection, the head
  double forward() const {
    return attention_proj + attention_core + dense_ffn + router + experts + shared + lm_head + mtp;
  }
  double training() const { return 3 * forward(); }
};

// What memory-bound kernels move in one layer's forward, bytes per token or per routed row
// (activations of `element_bytes`; the loss's softmax in fp32):
// a read and a write of each operand of the norms (two per layer, MLA's latent norms, and the
// per-head norms of queries and keys where the model has them: their launches are not counted),
// the two residual adds, the rotary embedding, the router's softmax, the permute into expert order
// and back (a row read and written each way), SwiGLU's product (a and b read, the product written),
// and the loss's logits (written in bf16, softmax read and written in fp32). Backward moves about
// twice the forward's (gradients read and written beside the saved inputs).
struct LayerBytes {
  double attention = 0;   // per token, every layer: norms, residuals, rotary, MLA's latent or q/k norms
  double dense_ffn = 0;   // per token, a dense layer's SwiGLU product
  double moe_token = 0;   // per token, a MoE layer: router softmax, shared experts' SwiGLU product
  double routed_row = 0;  // per routed row: permute, unpermute, SwiGLU product
  double head = 0;        // per token, once: the loss
};
LayerBytes memory_bound_bytes(const ModelConfig& m, double element_bytes = 2);

// One layer's (or module's) forward per token, by part: what a pipeline stage holding some of
// them sums (core/project/step_time.cpp); token_flops() is the whole model's sum of the same.
struct LayerFlops {
  double attention_proj = 0, attention_core = 0;  // every decoder layer and MTP module
  double dense_ffn = 0;                           // a leading dense layer's SwiGLU
  double router = 0, experts = 0, shared = 0;     // a MoE layer (and an MTP module's)
  double lm_head = 0;                             // the output layer, once per prediction
  double mtp_proj = 0;                            // an MTP module's projection of [h | embedding]
};
LayerFlops layer_flops(const ModelConfig& m);

// The dense GEMMs behind LayerFlops' parts, each by its shape for one token row: n outputs from k
// inputs (2 n k FLOPs a token forward) and what tensor parallelism splits (Megatron's column-parallel
// layers their outputs, row-parallel ones their inputs; the router is not split). Their 2 n k sum to
// the parts' FLOPs: GQA's fused qkv and o; MLA's down and up projections and o (its down projections
// counted split, as the parts count them); SwiGLU's fc1 (gate and up) and fc2.
enum class TpSplit { Columns, Rows, None };
struct DenseGemm {
  double n = 0, k = 0;
  TpSplit split = TpSplit::Columns;
};
struct LayerGemms {
  std::vector<DenseGemm> attention, dense_ffn, router, shared, lm_head, mtp_proj;
  // Of MLA's attention GEMMs, those from the compressed query and key-value up to the heads (the
  // query's own projection where it has no low-rank one): what Megatron's mla_up_proj recomputes.
  std::vector<DenseGemm> mla_up;
};
LayerGemms layer_gemms(const ModelConfig& m);

// The whole model's, per token of a `seq`-long sequence.
TokenFlops token_flops(const ModelConfig& m);
// One layer's attention (projections, core) per token; the core causal: half the square (a windowed
// layer's: its window).
double attention_proj_flops(const ModelConfig& m);
double attention_core_flops(const ModelConfig& m);
// The parameters a token's matmuls read (2 FLOPs each): the "active" count a model card gives,
// less the embedding table.
double active_matmul_parameters(const ModelConfig& m);
// Every parameter of the model (all experts, the embedding and the head, MTP modules): what a
// checkpoint holds.
double total_parameters(const ModelConfig& m);

}  // namespace memfine
