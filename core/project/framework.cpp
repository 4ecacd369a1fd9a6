#include "core/project/framework.h"

#include <algorithm>

#include "core/util/format.h"

namespace memfine {

namespace {

// Transformer Engine allocates a cuBLAS workspace of 32 MiB + 1 KiB on Hopper for each of its 4
// compute streams (transformer_engine/pytorch/cpp_extensions/gemm.py; common/util/multi_stream.cpp).
constexpr double kTeWorkspaces = 4 * (32.0 * 1024 * 1024 + 1024);

// How much of an all-to-all Megatron's 1F1B overlap hides at most, however long the compute beside
// it (what outlasts that compute stays exposed, step_time.cpp): Megatron Core's MoE report (arXiv
// 2603.07685v2, section 4.2.3) profiles its DeepSeek-V3 H100 benchmark (1024 H100, EP64, DeepEP on
// 20 SMs) at "a 93% overlap ratio for expert communication latency". A run's profile, not a kernel
// benchmark: the report's runs in the validation set are marked as this figure's source and not
// checked. It replaced 36.55%, a Qwen3-30B trace of a study inside the validation set, after the
// Qwen3-235B overlap runs were seen projected slow: only runs entered since judge it.
constexpr double kEpOverlapHidden = 0.93;

// The CUDA context and NCCL's buffers, outside PyTorch's allocator: NCCL issues 864 and 964 measure
// 0.5 to 1.6 GB for each communicator that carries data, and a MoE run holds several (data,
// expert, expert-data and pipeline parallel); assumed 3 GB, not measured here.
constexpr double kWorkspaceGb = 3;

// What PyTorch's caching allocator reserves beyond what it hands out, with expandable segments
// (which Megatron's MoE README sets to prevent fragmentation): assumed 5%, not measured here.
constexpr double kFragmentation = 0.05;

// What the optimizer step moves through memory per parameter, counted from each framework's code.
void optimizer_traffic(FrameworkSetting& s) {
  if (s.profile == Profile::Memfine) {
    // This suite's Adam (core/model/optimizer.cpp), unsharded, 21 element accesses a parameter: m
    // scaled (2) and added to (3), v scaled (2) and addcmul'ed (3), v / c2 (2), its sqrt (2) and
    // + eps (2), the addcdiv (4), the gradient zeroed (1); fp32 parameters on a CPU.
    s.optimizer_bytes = 21 * 4, s.optimizer_sharded = false;
    return;
  }
  if (s.fsdp) {
    // FSDP2's Adam on its shard (weights, gradients and moments in the shard's dtype): reads the
    // four, writes weights and moments, and reads the gradients again for the norm clipping.
    const double grad = s.fsdp_state_bytes / 4;
    s.optimizer_bytes = s.fsdp_state_bytes + (s.fsdp_state_bytes - grad) + grad;
    return;
  }
  // Megatron's distributed optimizer (megatron/core/optimizer/distrib_optimizer.py with TE's or
  // apex's FusedAdam): the fused kernel reads the fp32 master weight, the gradient and both moments
  // and writes the three back; the master weights are copied into the bf16 model weights
  // (_copy_main_params_to_model_params: 4 read, 2 written); clip_grads.py's multi_tensor_l2norm
  // reads the gradients once. The whole gradient buffer is zeroed every step (zero_grad_buffer).
  s.optimizer_bytes = (4 + s.grad_bytes + 2 * s.moment_bytes) + (4 + 2 * s.moment_bytes) + 6 + s.grad_bytes;
  s.grad_zero_bytes = s.grad_bytes;
}

// What one layer launches from the host in Megatron-Core with Transformer Engine (BF16, TP 1,
// unfused router and permutation), counted from its code (Megatron-LM d98e8a64: transformer_layer.py,
// attention.py, moe/router.py, moe_utils.py, token_dispatcher.py, experts.py), not profiled, so
// good to about a third:
// - attention: the norm fused into the QKV GEMM (2), rotary on q and k (2), the fused attention
//   (1), the output projection (1), bias-dropout-add (1);
// - dense FFN: the norm and FC1 (2), SwiGLU (1), FC2 (1), bias-dropout-add (1);
// - MoE: the norm (1); the router's fp32 GEMM and cast (2), its top-k (softmax, top-k, normalise,
//   the dense probabilities and routing map scattered: 7) and the load-balancing loss (9); the
//   dispatcher's preprocess (counts, their all-gather and the copy to the host that synchronises:
//   8); then the permutation (10), the dispatch's two all-to-alls (2) and the sort by local expert
//   (2); the grouped experts (FC1, SwiGLU with the probabilities, FC2: 4); the unsort (2), the
//   combine (1), the unpermutation (3) and the residual (1);
// - backward: about twice the forward's kernels (a data and a weight gradient per GEMM; the
//   elementwise kernels' gradients), not enumerated op by op.
// FSDP2 with TE (NeMo AutoModel) and torchtitan run their own MoE code; not counted here: Megatron's
// stand in.
// What CUDA graphs replay of those, by Megatron-Core's cuda_graph_modules (transformer_config.py):
// attn the attention block, mlp a dense FFN, moe the MoE block whole (drop-and-pad alone: no host
// synchronisation), moe_router its norm and router (1 + 2 + 7 + 9), moe_preprocess the dispatcher's
// preprocess (8); full all of them. A graph's own launch is not counted.
void launches(FrameworkSetting& s, const std::vector<std::string>& graphs) {
  s.cuda_graphs = graphs.empty() ? "none" : graphs_text(graphs);
  if (s.profile == Profile::Memfine) return;  // this suite's layer: measured, launches and all
  s.forward = {7, 5, 52, 14};
  s.backward = {2 * s.forward.attention, 2 * s.forward.dense_ffn, 2 * s.forward.moe, 0};
  const auto has = [&](const char* m) {
    return s.cuda_graphs == "full" || std::find(graphs.begin(), graphs.end(), m) != graphs.end();
  };
  Launches& c = s.captured;
  if (has("attn")) c.attention = s.forward.attention;
  if (has("mlp")) c.dense_ffn = s.forward.dense_ffn;
  if (has("moe"))
    c.moe = s.forward.moe, c.moe_after_sync = s.forward.moe_after_sync;
  else
    c.moe = (has("moe_router") ? 1 + 2 + 7 + 9 : 0) + (has("moe_preprocess") ? 8 : 0);
}

// Expert biases outside the grouped GEMMs: bytes per element, forward and backward. Megatron-Core
// (moe/experts.py TEGroupedMLP._apply_bias, since a329dd6 "Enable bias in expert mlp"): FC1's bias
// is fused into the activation kernel (weighted_bias_quick_geglu_impl); FC2's is added per expert as
// t + b * p in bf16 (the router's probabilities take its logits' dtype, bf16 unless moe_router_dtype
// says otherwise) and the pieces concatenated: b * p written (2), the add (6), the concatenation
// (4); backward, b's and the probability's gradients (each a product written and read back and the
// operand read: 6 and 6); the add and the concatenation pass theirs through. NeMo AutoModel's
// GPT-OSS experts through DeepEP (components/moe/layers.py GroupedExpertsDeepEP._apply_bias at its
// performance summary's version, 89e3a9fd; the clamped GEGLU is one torch.compile'd kernel) add
// both biases per expert and concatenate the pieces. FC2's, t + b * p with DeepEP's fp32
// probabilities, per element of h: b * p written in fp32 (4), the add (2 + 4 read, 4 written), the
// concatenation (8) and the cast back to bf16 (6); backward, the cast's gradient (6), t's cast back
// to bf16 (6), b's and p's gradients (a product written and read back and the operand read: 12 and
// 12) and the split's gradients concatenated (4). FC1's, t + b in bf16, per element of its 2F-wide
// output: the add and the concatenation (4 and 4); backward, b's gradient read (2) and the split's
// gradients concatenated (4). Without DeepEP its experts run compiled with their biases.
void expert_bias_traffic(FrameworkSetting& s) {
  if (s.profile == Profile::MegatronTe) s.expert_bias = s.deepep_expert_bias = {2 + 6 + 4 + 6 + 6, 0};
  if (s.profile == Profile::FsdpTe) s.deepep_expert_bias = {4 + 10 + 8 + 6 + 6 + 6 + 12 + 12 + 4, 2 * (4 + 4 + 2 + 4)};
}

// A model's particulars that Megatron-Core runs in eager ops (Megatron-LM d98e8a64), passes over
// memory per element (2 bytes each) beyond what the fused path makes:
// - a clamped GLU (fusions/fused_bias_geglu.py weighted_bias_quick_geglu_impl, the path
//   TEGroupedMLP takes without use_transformer_engine_op_fuser): FC1's output's two halves clamped
//   (each read and written) and concatenated again (read and written), 8 per element of the expert's
//   width forward; backward, each clamp's gradient (the gradient and its input read, one written)
//   and the halves' gradients concatenated, 6 + 4.
// - RoPE where YaRN's mscale is not 1 (models/common/embeddings/rope_utils.py apply_rotary_pos_emb
//   falls back from TE's fused RoPE), per element of the queries and keys: t * cos (2), the half
//   rotation's negation and concatenation (3), * sin (2), the sum (3) and a concatenation with the
//   unrotated part (2), against the fused kernel's read and write: 10 more forward; backward, the
//   two products' gradients (2 + 2), the rotation's (3) and their sum (3) against 2: 8 more.
// The launches of either's kernels are not counted.
void eager_model_traffic(FrameworkSetting& s) {
  if (s.profile != Profile::MegatronTe) return;
  s.glu_clamp_forward_bytes = 2 * 8, s.glu_clamp_backward_bytes = 2 * (6 + 4);
  s.unfused_rope_bytes = 2 * (10 + 8);
}

// torchtitan's routed rows run eager PyTorch around the grouped GEMMs (models/moe/moe.py MoE.forward,
// models/moe/utils.py _permute and _unpermute, at 36a4b6942), each op a pass over memory, a forward's
// bytes per routed row: the tokens gathered by idx // k (read and write, 4 h), the zero row stacked
// on (4 h) and the rows permuted by expert (4 h); SiLU (4 F) and its product with h3 (6 F); the
// rows unpermuted (4 h), a zeroed buffer (2 h) filled by index (4 h), cast to fp32 (6 h) and read by
// the bmm that weighs them (4 h): 32 h + 10 F, beside the fused path's 8 h + 6 F (memory_bound_bytes).
// Through DeepEP (distributed/deepep/deepep.py): the received rows permuted by index_select (4 h),
// SiLU and the product (10 F), the outputs weighed by their bf16 scores (4 h) and scatter-added back
// (4 h): 12 h + 10 F.
void eager_routing_traffic(FrameworkSetting& s) {
  if (s.profile != Profile::Torchtitan) return;
  s.routed_row_h_bytes = 32 - 8, s.deepep_routed_row_h_bytes = 12 - 8, s.routed_row_f_bytes = 10 - 6;
}

// The dispatchers' SMs: Megatron-Core's defaults (transformer_config.py moe_deepep_num_sms 20,
// moe_hybridep_num_sms 24); AutoModel's DeepEP takes DeepEP's own default of 20 (Buffer.num_sms).
void dispatcher_sms(FrameworkSetting& s) {
  if (s.profile == Profile::Memfine) return;
  s.sms_of = {{Dispatcher::DeepEp, 20}, {Dispatcher::HybridEp, 24}};
}

}  // namespace

FrameworkSetting framework_setting(const ProjectConfig& c) {
  const FrameworkConfig& f = c.framework;
  FrameworkSetting s;
  s.profile = f.name;
  const bool titan = f.name == Framework::Torchtitan;
  // Megatron's vocab-parallel cross-entropy (and TE's fused one from 2.18) and AutoModel's
  // MaskedCrossEntropy (fp32_upcast) hold the bf16 logits and their fp32 softmax at the loss's peak,
  // as this suite's loss does; torchtitan's cross-entropy runs on an fp32 copy (components/loss.py),
  // which torch.compile fuses into the loss: compiled, it keeps its bf16 input and makes its gradient
  // (Dao-AILab/quack issue 48: "~d_input for fw+bw").
  const Loss titan_loss = f.compile_loss ? Loss::VocabBf16 : Loss::VocabFp32Upcast;
  s.loss = f.loss == Loss::Auto ? (titan ? titan_loss : Loss::VocabFp32) : f.loss;
  s.fsdp = c.sharding == "auto" ? f.name == Framework::FsdpTe || titan : c.sharding == "fsdp";
  // NeMo AutoModel keeps every layer's gathered weights until backward (parallelizer.py apply_fsdp:
  // reshard_after_forward=False); torchtitan lets them go but under pipeline parallelism (below).
  s.reshard = f.reshard == "auto" ? f.name != Framework::FsdpTe : f.reshard == "true";
  // torchtitan's "default" resharding is `not pp_enabled` (models/llama4/infra/parallelize.py
  // apply_fsdp, at 36a4b6942): under pipeline parallelism PyTorch's pipelining stage keeps the stage
  // gathered after backward too and accumulates its gradients unsharded in the reduce dtype, fp32
  // (MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)), whatever the resharding says.
  // NeMo AutoModel runs the same pipelining (components/distributed/pipelining/functional.py, its
  // fsdp_mixin.py deferring the gradients' sync and resharding to the last micro-batch) with
  // reduce_dtype fp32 (config.py), at Automodel 36044ad3d1; its routed experts leave FSDP where EP
  // alone shards them (moe/parallelizer.py: ignored_params), torchtitan's stay in it (efsdp).
  s.pipelined_unsharded_grad_bytes = titan || f.name == Framework::FsdpTe ? 4 : 0;
  s.unsharded_experts_outside_fsdp = f.name == Framework::FsdpTe;
  s.selective_op = f.selective_op;
  s.selective_op_all_to_all = f.selective_op_all_to_all;
  s.flex_attention = f.flex_attention;
  // torchtitan's DeepSeek-V3 flavours set use_flex_attn (models/deepseek_v3/__init__.py, since PR 1610).
  s.mla_flex_by_default = s.profile == Profile::Torchtitan;
  // PyTorch FSDP in mixed precision keeps fp32 weights, gradients and Adam moments (16 bytes a
  // parameter's shard); NeMo AutoModel loads its models in bf16 (its recipes' torch_dtype), so its
  // FSDP2 shards hold bf16 weights and gradients and Adam its moments in the weights' dtype (8).
  // torchtitan builds its models in fp32 (training.dtype's default) and FSDP2 keeps the shards in it.
  s.fsdp_state_bytes = f.name == Framework::FsdpTe ? 8 : 16;
  s.grad_bytes = f.grad_dtype == "bf16" ? 2 : 4;
  // Megatron-Core's TEGroupedLinear accumulates each weight gradient into main_grad, the GEMM reading
  // and writing it (fuse_wgrad_accumulation, on unless --no-gradient-accumulation-fusion); the other
  // profiles' accumulation is not counted.
  s.wgrad_accumulate_bytes = s.profile == Profile::MegatronTe ? 2 * s.grad_bytes : 0;
  s.moment_bytes = f.moment_dtype == "bf16" ? 2 : 4;
  s.allocated_extra = s.profile == Profile::Memfine || titan ? 0 : kTeWorkspaces;  // torchtitan runs no TE
  s.workspace = (f.workspace_gb >= 0 ? f.workspace_gb : kWorkspaceGb) * 1e9;
  s.fragmentation = f.fragmentation >= 0 ? f.fragmentation : kFragmentation;
  s.margin = f.margin;
  s.ep_overlap = f.ep_overlap;
  s.ep_overlap_hidden = f.ep_overlap_hidden >= 0 ? f.ep_overlap_hidden : kEpOverlapHidden;
  s.tp_comm_overlap = f.tp_comm_overlap;
  s.recomputed = recomputed_modules(f.recompute_modules);
  // Megatron overlaps the interleaved schedule's pipeline sends and receives with the forward and
  // backward chunks (--no-overlap-p2p-communication turns it off; arguments.py keeps it on only with
  // virtual stages, Megatron-LM d98e8a64). AutoModel's torch.distributed.pipelining: not counted.
  s.p2p_overlap_interleaved = s.profile == Profile::MegatronTe;
  // MoEAlltoAllTokenDispatcher (Megatron-LM d98e8a64 moe/token_dispatcher.py): dispatch_postprocess
  // sorts the received rows by local expert and combine_preprocess restores their order
  // (sort_chunks_by_idxs) when num_local_experts > 1. The flex dispatchers (DeepEP, HybridEP)
  // permute once, as every profile's routed row already counts; AutoModel's code is not counted.
  s.alltoall_sorts_rows = s.profile == Profile::MegatronTe;
  // Megatron-Core's attention is Transformer Engine's, which runs cuDNN's fused attention for
  // learnable sinks (hardware.sink_attention_head_dim_curve names the code). NeMo AutoModel's GPT-OSS
  // benchmarks run FlexAttention (its performance summary: "TE + DeepEP + FlexAttention"), for which
  // no kernel-level figure is at hand: the head-dim curve stands in.
  s.sinks_on_sink_curve = s.profile == Profile::MegatronTe;
  // Megatron-Core runs TP above the kv heads since f7dfb99 (2025-12-07, attention.py
  // get_query_key_value_tensors): TransformerConfig asks TP to divide them or be their multiple.
  s.tp_beyond_kv_heads = s.profile == Profile::MegatronTe;
  optimizer_traffic(s);
  expert_bias_traffic(s);
  eager_model_traffic(s);
  eager_routing_traffic(s);
  launches(s, f.cuda_graphs);
  dispatcher_sms(s);
  return s;
}

namespace {

std::string modules_text(const RecomputedModules& r) {
  std::string out;
  for (const auto& [name, flag] : recompute_module_table())
    if (r.*flag) out += (out.empty() ? "[" : ", ") + name;
  return out + "]";
}

}  // namespace

std::vector<std::string> framework_assumptions(const FrameworkSetting& f) {
  return {"rests on: the " + name_of(f.profile) + " profile (what each layer keeps; core/project/profile_*.cpp name the code), "
              "the loss (" + name_of(f.loss) + "), " + four_digits(f.workspace / 1e9) +
              " GB outside the allocator (CUDA context, NCCL) and " + four_digits(100 * f.fragmentation) +
              "% reserved beyond allocated, the all-to-all " +
              (f.ep_overlap ? "overlapped (at most " + four_digits(100 * f.ep_overlap_hidden) + "% of it hidden)"
                            : "not overlapped") +
              ", TP's collectives " + (f.tp_comm_overlap ? "behind the GEMMs" : "exposed") +
              (f.recomputed.any() ? ", Megatron's recompute_modules " + modules_text(f.recomputed) +
                                        " beside the strategy (framework.recompute_modules)"
                                  : "") +
              "; a layout within " + four_digits(100 * f.margin) +
              "% of its peak of the limit is borderline (framework.margin)"};
}

}  // namespace memfine
