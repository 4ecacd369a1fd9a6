// The hottest GPU's memory in a projection: static bytes of a pipeline stage (bf16 weights, fp32
// gradients, fp32 master weights and Adam moments sharded by the distributed optimizer, or FSDP's
// shards) and its activations under a strategy's shape, from a framework profile's widths per
// token and per routed row (core/project/profile.h) times the micro-batches the schedule keeps in
// flight. Every pipeline rank holds its part of the model (core/project/pipeline.h): the first the
// embedding and the most micro-batches in flight; the output layer's rank the head and the loss's
// logits; an MTP module's rank DeepSeek's multi-token prediction layer with its own copy of the
// embedding.
#pragma once
#include <string>
#include <vector>

#include "core/moe/shape.h"
#include "core/project/profile.h"
#include "core/project/layout.h"

namespace memfine {

// Paged Stash under the projected imbalance: the hottest rank's rows (`received`, a micro-batch's
// per layer) beyond its buffers' capacity or its pages (device and host, against the `mean` rows
// a rank receives) rerun every step.
inline bool stash_reruns(const StashSpec& s, double received, double mean) {
  return s.any() && (received > s.rank_capacity * mean || received > (s.device_factor + s.host_factor) * mean);
}

class StageMemory {
 public:
  // `received`: the rows the hottest rank's experts receive per micro-batch in the worst layer (one
  // layer's working set); `held`: per layer, in the layers the rank that keeps the most keeps.
  StageMemory(const ModelConfig& m, const Layout& l, const ProjectSetting& set, double received, double held);
  struct Peak {
    double bytes = 0, static_bytes = 0, host_bytes = 0;  // allocated: what the tensors take
    double encoded_bytes = 0;  // what encoding stores as codes (their size before it)
    double reserved = 0;                                 // what the caching allocator holds for them
    double need = 0;                                     // and with what the process holds beside
    // The first step's need: before its optimizer step creates Adam's moments (lazily, as
    // torch.optim's and the fused Adams' state is), which the steps after it hold; and those moments
    // on the rank whose later need is the peak.
    double first_step_need = 0, lazy_bytes = 0;
    double layers_in_flight = 1;  // its layers x the micro-batches it keeps in flight
    std::string stage;            // "first", "last", "only" or "rank N"
  };
  // The hottest rank's peak with a layer run as `s`; what it offloads to the host.
  Peak peak(const StrategyShape& s) const;
  // The first stage's parameters, and its routed experts', per GPU (data-parallel communication).
  double stage_params() const { return stages_.front().params; }
  double stage_expert_params() const { return stages_.front().expert_params; }
  // What it assumes, for the table's notes.
  std::vector<std::string> assumptions(const StrategyShape& s) const;

 private:
  struct Stage {
    double dense, moe, params, expert_params, inflight, logits;
    double linear_params;  // of params, the linears' (what FP8 copies): not the tables, not the routers
  };
  // Bytes a stage's layers keep from forward to backward, the largest transient of one layer's
  // backward, and what offloading moves to the host, per micro-batch in flight.
  LayerWidths widths(const StrategyShape& s) const;
  double activations(const Stage& st, const StrategyShape& s) const;
  double offloaded(const Stage& st, const StrategyShape& s) const;
  double static_of(const Stage& st) const;
  double lazy_of(const Stage& st) const;  // Adam's moments of its shard, created at the first optimizer step
  // FSDP: whether PyTorch's pipelining keeps the stage gathered with its gradients unsharded, and
  // whether the routed experts are among what FSDP manages (framework.h says when).
  bool pipelined_unsharded() const;
  bool experts_in_fsdp() const;
  ModelConfig m_;
  Layout l_;
  ProjectSetting set_;
  double received_ = 0, held_ = 0, tokens_ = 0, tokens_gpu_ = 0;
  double dp_shard_ = 1, expert_dp_ = 1, layer_params_ = 0, layer_expert_params_ = 0;
  std::vector<Stage> stages_;
};

}  // namespace memfine
