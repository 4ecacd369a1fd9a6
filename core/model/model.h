// The model: a small DeepSeek-style decoder stack as seen by one expert-parallel rank. Each layer
// is RMSNorm -> causal grouped-query attention -> residual -> RMSNorm -> MoE (route, dispatch,
// experts, combine; see core/moe/stages.h) plus an optional shared expert -> residual.
#pragma once
#include <ATen/ATen.h>
#include <c10/util/FunctionRef.h>

#include <vector>

#include "core/config/config.h"
#include "core/util/tensors.h"

namespace memfine {

struct LayerWeights {
  at::Tensor norm1, wq, wk, wv, wo;  // attention (undefined when attention is "none")
  at::Tensor norm2, router;          // router: [hidden, experts] over all experts
  // This rank's routed experts, one tensor each (as Megatron-Core's SequentialMLP), so each
  // expert's gradient accumulates in place: [h, 2g] (gate and up) and [g, h]. Each list lies in one
  // storage (pack_experts), which grouped GEMMs read as [experts, in, out] (core/moe/grouped.h).
  std::vector<at::Tensor> w_in, w_out;
  at::Tensor shared_in, shared_out;  // shared expert (undefined when shared_experts is 0)
  // [experts] added to the router's probabilities for the top-k choice only (DeepSeek-V3's
  // auxiliary-loss-free balancing, train.bias_update); not a parameter; undefined when off.
  at::Tensor expert_bias;
  // Everything but the routed experts: what expert-parallel ranks all hold a copy of.
  std::vector<at::Tensor> replicated() const;
  std::vector<at::Tensor> parameters() const;  // replicated(), then w_in, then w_out
};

struct Model {
  ModelConfig cfg;
  int64_t ep = 1, rank = 0;
  std::vector<LayerWeights> layers;
  at::Tensor final_norm;
  at::Tensor embed;  // [vocab, hidden] when cfg.vocab > 0: token embedding, and the output head (tied)
  int64_t local_experts() const { return cfg.experts / ep; }
  int64_t first_expert() const { return rank * local_experts(); }
  std::vector<at::Tensor> parameters() const;
  // The same weights in memory of its own (leaves, without gradients).
  Model clone() const;
};

at::TensorOptions options_of(const ExperimentConfig& c);

// Parameters drawn from `seed` so that a global expert's weights are the same whichever rank
// holds it (an emulated rank and a real one then compute the same thing). Parameters require grad.
Model make_model(const ExperimentConfig& c, int64_t rank);

// Stages outside the MoE. `x` holds a rank's tokens as rows: [micro_batch * seq, hidden].
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight);
// `sdpa`: LibTorch 2.x's fused scaled_dot_product_attention instead of the eager scores (a
// LibTorch without it refuses it; validation says so first).
at::Tensor attention(const at::Tensor& x, const LayerWeights& w, const ModelConfig& m, bool sdpa = false);
// Whether this build's LibTorch has that kernel (2.x).
bool fused_attention_available();
// Moves a layer's expert weights (each [in, out], same shape, dtype and device) into one storage,
// in order, keeping each tensor (its identity, gradient and autograd leaf) as it is; no-op where
// they already are.
void pack_experts(const std::vector<at::Tensor>& w);

at::Tensor swiglu(const at::Tensor& x, const at::Tensor& w_in, const at::Tensor& w_out);
// The same with another product for both projections (grouped experts' GEMMs: core/moe/grouped.h).
using Product = c10::function_ref<at::Tensor(const at::Tensor&, const at::Tensor&)>;
at::Tensor swiglu_with(const at::Tensor& x, const at::Tensor& w_in, const at::Tensor& w_out, Product product);
// Route: router softmax over all experts. The probabilities are read at `expert_ids` when the
// workload chose the experts, or at the router's own top-k when `expert_ids` is undefined.
struct Routed {
  at::Tensor probs;       // [tokens, topk], differentiable
  at::Tensor expert_ids;  // [tokens, topk], int64
  at::Tensor aux_loss;    // Switch's load-balancing loss times its coefficient (scalar); 0 when off
};
// `aux_coef` > 0 adds Switch Transformer's load-balancing loss (Fedus et al. 2021, Eq. 4-6, over
// top-k assignments): coef * experts * sum_e f_e * P_e, f_e the share of the assignments that
// expert e got, P_e the mean router probability of e (only P carries a gradient).
Routed route(const at::Tensor& x_norm, const LayerWeights& w, const at::Tensor& expert_ids, int64_t topk,
             double aux_coef = 0);

// The language model's ends (cfg.vocab > 0): token rows in, next-token cross-entropy out, through
// the one embedding matrix (tied head: logits = final RMSNorm(h) . embed^T).
at::Tensor embed_tokens(const Model& m, const at::Tensor& tokens);
at::Tensor next_token_loss(const Model& m, const at::Tensor& h, const at::Tensor& next_tokens);

// Static bytes known before anything is built: parameters, gradients and Adam's two moments,
// plus the input and target (the routing tables add a little on top). Validation uses it.
int64_t static_bytes_lower_bound(const ExperimentConfig& c);

// Number of elements of every parameter of the rank's model, from shapes alone (no allocation).
int64_t parameter_count(const ModelConfig& m, int64_t ep);

// DeepSeek-V3's auxiliary-loss-free balancing, after a step: each layer's expert bias moves by
// `rate` towards balance, up for an expert that got fewer than the mean of `counts` (its
// assignments per expert), down for one that got more.
void update_expert_bias(Model& model, const std::vector<at::Tensor>& counts, double rate);

}  // namespace memfine
