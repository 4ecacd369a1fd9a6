#include "core/project/memory.h"

#include <algorithm>
#include <cmath>

#include "core/model/flops.h"
#include "core/util/format.h"
#include "core/project/profile.h"
#include "core/project/pipeline.h"

namespace memfine {

StageMemory::StageMemory(const ModelConfig& m, const Layout& l, const ProjectSetting& set, double received, double held)
    : m_(m), l_(l), set_(set), received_(expert_rows_on_gpu(l, received)), held_(expert_rows_on_gpu(l, held)) {
  // The routed experts' weights and rows as a GPU holds them: under expert TP its FFN share and
  // the rows its ETP group gathers (layout.h).
  const double h = double(m.hidden), g = double(expert_share(m, l).ffn_hidden), E = double(m.experts);
  const double V = double(m.vocab);
  const double tp = double(l.tp);
  tokens_ = double(l.micro_batch) * double(m.seq) / double(l.cp);  // a micro-batch's tokens on a CP rank
  tokens_gpu_ = tokens_ / tp;                                      // sequence parallel inside TP
  const int64_t micro = micro_batches(l);                          // micro-batches per step and DP rank
  const int64_t per_flush = micro / l.grad_accumulation;           // per pipeline schedule
  // Micro-batches whose activations a rank keeps at once, in whole-rank units: its warmup's and the
  // one in its first backward (core/project/pipeline.h), virtual-stage micro-batches of 1 / VPP of its
  // layers each interleaved (the all-to-all overlap's extra forward among them; Megatron runs that
  // overlap only interleaved); fewer if the schedule has fewer.
  auto inflight_at = [&](int64_t rank) {
    const bool overlap = set.framework.ep_overlap && l.vpp > 1;
    const double warm = double(warmup_passes(l, rank, overlap) + 1) / double(l.vpp);
    return std::min(warm, double(per_flush));
  };
  // Parameters (bf16 weights of every kind) per layer on one GPU.
  const double attn_params = attention_proj_flops(m) / 2 / tp;
  const double dense_layer_params = attn_params + 3 * h * double(m.dense_ffn_hidden) / tp;
  const double moe_layer_params = attn_params + h * E + 3 * h * double(m.ffn_hidden) * double(m.shared_experts) / tp;
  layer_expert_params_ = local_experts(m, l) * 3 * h * g;
  layer_params_ = moe_layer_params + layer_expert_params_;
  const double table = V * h / tp;           // the embedding, or the output head
  const double mtp_params = 2 * h * h / tp;  // an MTP module's projection beside its MoE layer
  dp_shard_ = double(l.dp * l.cp), expert_dp_ = expert_data_parallel(l);
  // One micro-batch's loss at its peak (its logits; the framework's loss says how wide), with each
  // MTP module's beside the model's.
  const double logits = tokens_ / tp * loss_bytes_per_token(m, set.framework.loss, set.element_bytes);
  // Every rank (core/project/pipeline.h): an MTP module away from the embedding's rank keeps its
  // own copy of it.
  const std::vector<RankShape> ranks = rank_shapes(m, l, set.pipeline_layout);
  for (size_t r = 0; r < ranks.size(); ++r) {
    const RankShape& k = ranks[r];
    const double moe = double(k.moe + k.mtp);
    const double tables = (k.embedding ? table : 0) + (k.loss ? table : 0) + (k.embedding ? 0 : double(k.mtp) * table);
    const double params =
        double(k.dense) * dense_layer_params + moe * moe_layer_params + tables + double(k.mtp) * mtp_params;
    stages_.push_back({double(k.dense), moe, params, moe * layer_expert_params_, inflight_at(int64_t(r)),
                       k.loss ? logits * double(1 + m.mtp_layers) : 0,
                       params - tables - moe * h * E});  // the linears': not the tables, not the routers
  }
}

// Megatron's distributed optimizer keeps bf16 weights and the gradient buffer (fp32, or bf16) whole
// and shards the fp32 master weights and Adam's moments (fp32, or bf16 with the precision-aware
// optimizer): theoretical_memory_usage.py's 6 + 12 / d bytes a parameter by default;
// FSDP shards the weights, gradients and moments (the framework's bytes a parameter) and gathers
// the bf16 weights of the layer running and the one prefetched, or, not resharding after forward, of
// every layer on the stage until its backward; under PyTorch's pipelining, where the framework says
// so, the stage stays gathered and its gradients accumulate unsharded. The framework's own
// allocations (TE's cuBLAS workspaces) besides.
double StageMemory::static_of(const Stage& st) const {
  const FrameworkSetting& f = set_.framework;
  // In FP8 each linear's weight has FP8 copies, row-wise and column-wise (Hopper's GEMMs take no
  // transposed FP8 operand; MXFP8 scales each orientation's blocks apart), cached from a step's first
  // micro-batch on (TE's is_first_microbatch).
  const double fp8_weights = set_.fp8 ? 2 * set_.fp8_bytes() * (st.linear_params + st.expert_params) : 0;
  if (f.fsdp) {
    // The parameters FSDP manages: all but the routed experts where they sit outside it.
    const double managed = st.params + (experts_in_fsdp() ? st.expert_params : 0);
    const double layer = layer_params_ - (experts_in_fsdp() ? 0 : layer_expert_params_);
    const double gathered = pipelined_unsharded() ? (2 + f.pipelined_unsharded_grad_bytes) * managed
                            : f.reshard ? 2 * 2 * layer
                                        : 2 * managed;
    return (st.params / dp_shard_ + st.expert_params / expert_dp_) * f.fsdp_state_bytes + gathered + f.allocated_extra +
           fp8_weights;
  }
  const double whole = 2 + f.grad_bytes, sharded = 4 + 2 * f.moment_bytes;
  return st.params * (whole + sharded / dp_shard_) + st.expert_params * (whole + sharded / expert_dp_) +
         f.allocated_extra + fp8_weights;
}

bool StageMemory::pipelined_unsharded() const {
  return l_.pp > 1 && set_.framework.pipelined_unsharded_grad_bytes > 0;
}

bool StageMemory::experts_in_fsdp() const {
  return !(set_.framework.unsharded_experts_outside_fsdp && expert_dp_ <= 1);
}

double StageMemory::lazy_of(const Stage& st) const {
  const FrameworkSetting& f = set_.framework;
  // FSDP's shard holds fp32 moments (8 of its fsdp_state_bytes); the distributed optimizer's, two
  // of moment_bytes.
  const double moments = f.fsdp ? std::min(8.0, f.fsdp_state_bytes) : 2 * f.moment_bytes;
  return moments * (st.params / dp_shard_ + st.expert_params / expert_dp_);
}

LayerWidths StageMemory::widths(const StrategyShape& s) const {
  const FrameworkSetting& f = set_.framework;
  const ProfileOptions o{f.recomputed,
                         set_.fp8 ? set_.fp8_bytes() : 0,
                         f.selective_op,
                         f.selective_op_all_to_all,
                         set_.dispatcher == Dispatcher::DeepEp,
                         l_.ep > 1};
  // Where TP gathers the kv heads, each GPU keeps its query group's kv head for its share of them.
  LayerWidths w = layer_widths(f.profile, kv_share(m_, l_), s, set_.element_bytes, o);
  if (l_.etp > 1) {
    // A routed row's terms at the GPU's share of each expert's FFN.
    const LayerWidths e = layer_widths(f.profile, expert_share(m_, l_), s, set_.element_bytes, o);
    w.row = e.row, w.row_again = e.row_again, w.offload_row = e.offload_row, w.row_text = e.row_text;
  }
  return w;
}

double StageMemory::activations(const Stage& st, const StrategyShape& s) const {
  const LayerWidths w = widths(s);
  // Kept until backward, and the largest of what one layer's backward holds again, per layer kind.
  const double moe_kept = tokens_gpu_ * w.token + held_ * w.row, dense_kept = tokens_gpu_ * w.dense;
  const double moe_again = tokens_gpu_ * w.token_again + received_ * w.row_again;
  const double transient =
      std::max(st.dense > 0 ? tokens_gpu_ * w.dense_again : 0.0, st.moe > 0 ? moe_again : 0.0);
  double kept = st.inflight * (st.dense * dense_kept + st.moe * moe_kept);
  if (s.stash.any()) {
    // Paged Stash: the routed rows' saved tensors live in the pool's pages, sized from the mean rows
    // a rank receives, whatever the hottest receives; where it reruns, the pool is held beside the
    // plain computation.
    const double mean = expert_rows_on_gpu(l_, tokens_gpu_ * double(m_.topk));
    const double page = double(s.stash.page_rows);  // the pool is whole pages, as the stash makes it
    const double pool = std::ceil(s.stash.device_factor * mean * st.inflight * st.moe / page) * page * w.row;
    if (!stash_reruns(s.stash, received_, mean)) kept -= st.inflight * st.moe * held_ * w.row;
    kept += pool;
  }
  if (!s.offload.any()) return kept + transient + st.logits;
  // Offloading: every layer's modules leave for the host but the layer running and those prefetched.
  // Encoding: they stay as codes, all but the running layer's, decoded.
  const double moved = offloaded(st, s);
  const double moe_off = tokens_gpu_ * w.offload_token + received_ * w.offload_row;
  const double away = 1 - s.offload.kept_fraction(set_.element_bytes);
  return kept - away * (moved - std::min(moved, double(1 + s.offload.prefetch) * moe_off)) + transient + st.logits;
}

double StageMemory::offloaded(const Stage& st, const StrategyShape& s) const {
  if (!s.offload.any()) return 0;
  const LayerWidths w = widths(s);
  const double dense = tokens_gpu_ * w.offload_token;
  const double moe = dense + held_ * w.offload_row;
  // The last `margin` layers keep theirs.
  const double kept = std::min(st.dense + st.moe, double(s.offload.margin));
  const double moe_moved = std::max(0.0, st.moe - kept),
               dense_moved = std::max(0.0, st.dense - (kept - (st.moe - moe_moved)));
  return st.inflight * moe_moved * moe + st.inflight * dense_moved * dense;
}

StageMemory::Peak StageMemory::peak(const StrategyShape& s) const {
  Peak best;
  double first = 0;
  for (size_t i = 0; i < stages_.size(); ++i) {
    const double st = static_of(stages_[i]), act = activations(stages_[i], s), b = st + act;
    first = std::max(first, b - lazy_of(stages_[i]));
    if (i == 0 || b > best.bytes) {
      best.bytes = b, best.static_bytes = st, best.lazy_bytes = lazy_of(stages_[i]);
      const double moved = offloaded(stages_[i], s);
      best.host_bytes = moved * s.offload.host_fraction(set_.element_bytes);
      best.encoded_bytes = s.offload.encodes() ? moved : 0;
      best.layers_in_flight = stages_[i].inflight * (stages_[i].dense + stages_[i].moe);
      best.stage = stages_.size() == 1   ? "only"
                   : i == 0               ? "first"
                   : i + 1 == stages_.size() ? "last"
                                          : "rank " + std::to_string(i);
    }
  }
  const FrameworkSetting& f = set_.framework;
  best.reserved = best.bytes * (1 + f.fragmentation);
  best.need = best.reserved + f.workspace;
  best.first_step_need = first * (1 + f.fragmentation) + f.workspace;
  return best;
}

std::vector<std::string> StageMemory::assumptions(const StrategyShape& s) const {
  // A GPU's rows, balanced (gathered over its ETP group).
  const double balanced = std::max(1.0, expert_rows_on_gpu(l_, tokens_gpu_ * double(m_.topk)));
  const std::string expert_dp = l_.etp > 1 ? "DP x CP x TP / (EP x ETP)" : "DP x CP x TP / EP";
  std::vector<std::string> out;
  const FrameworkSetting& f = set_.framework;
  out.push_back(
      std::string(f.fsdp
                      ? "static: FSDP: weights, gradients and Adam moments (" + four_digits(f.fsdp_state_bytes) +
                            " bytes a parameter) sharded over DP x CP (experts: " + expert_dp + "), " +
                            std::string(pipelined_unsharded()
                                            ? "under PyTorch's pipelining the stage's weights gathered and its "
                                              "gradients accumulated unsharded (" +
                                                  four_digits(f.pipelined_unsharded_grad_bytes) + " bytes a parameter)"
                                        : f.reshard ? "two layers' weights gathered"
                                                    : "every layer's weights gathered until backward") +
                            (!experts_in_fsdp() ? ", the routed experts (sharded by EP alone) outside FSDP" : "")
                      : "static: bf16 weights and " + std::string(f.grad_bytes == 2 ? "bf16" : "fp32") +
                            " gradients whole, fp32 master weights and " + (f.moment_bytes == 2 ? "bf16" : "fp32") +
                            " Adam moments sharded over DP x CP (experts: over " + expert_dp +
                            ") by the distributed optimizer") +
      "; the hottest pipeline rank (the first: embedding, most micro-batches in flight; the output "
      "layer's: head, loss; MTP's)" +
      (set_.fp8 ? "; in FP8 each linear's weight's FP8 copies, row-wise and column-wise (" +
                      four_digits(2 * set_.fp8_bytes()) + " bytes a parameter)"
                : ""));
  out.push_back("activations (" + name_of(f.profile) + "'s profile): per layer what it keeps per token of the TP x CP share, plus " +
                widths(s).row_text + " per received row, x the micro-batches the schedule keeps in flight on the rank; "
                "the rows kept at " + four_digits(held_ / balanced) +
                "x the balanced share (the rank that keeps the most, over its layers), one layer's backward at " +
                four_digits(received_ / balanced) + "x (the worst layer's hottest rank); "
                "the loss " + name_of(f.loss));
  if (l_.etp > 1)
    out.push_back("expert TP " + std::to_string(l_.etp) + ": each expert's FFN split over " + std::to_string(l_.etp) +
                  " neighbouring GPUs (1/" + std::to_string(l_.etp) +
                  " of its weights on each), each running the routed rows its expert-parallel rank receives, "
                  "gathered over them (Megatron's dispatcher: an all-gather after the all-to-all, a reduce-scatter "
                  "before the combine's)");
  return out;
}

}  // namespace memfine
