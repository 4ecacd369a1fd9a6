// What makes a parallel layout impossible, the layouts a search tries, and what the cluster and
// the run add to every layout of a projection (`memfine project`).
#pragma once
#include <string>
#include <vector>

#include "core/project/config.h"
#include "core/project/framework.h"
#include "core/project/goodput.h"
#include "core/project/parallel.h"

namespace memfine {

// Why a layout cannot run the model on the hardware ("" when it can): TP within a node and dividing
// the heads and the kv heads (or, where `tp_beyond_kv_heads`, a multiple of them), EP dividing the
// experts, ETP within a node and dividing the experts' FFN, EP x ETP
// dividing DP x CP x TP, PP x VPP at most the layers, the batch and
// the sequence divided, the file's pipeline layout (core/project/pipeline.h) fitting PP x VPP.
std::string layout_problem(const ModelConfig& m, const Hardware& hw, const Layout& l,
                           const std::string& pipeline_layout = "", bool tp_beyond_kv_heads = false);

// Expert TP (Layout::etp): each GPU of an ETP group runs the routed rows its expert-parallel rank
// receives, gathered over the group (`received` x etp, Megatron's dispatcher gathers them after the
// all-to-all), through its 1/etp share of each expert's FFN (the model expert_share gives).
inline double expert_rows_on_gpu(const Layout& l, double received) { return received * double(l.etp); }
// The experts an expert-parallel rank holds.
inline double local_experts(const ModelConfig& m, const Layout& l) { return double(m.experts) / double(l.ep); }
// The ranks an expert's shard of gradients and optimizer state is shared over (expert data
// parallelism): the GPUs outside the pipeline over its EP x ETP group.
inline double expert_data_parallel(const Layout& l) { return double(l.dp * l.cp * l.tp) / double(l.ep * l.etp); }
ModelConfig expert_share(const ModelConfig& m, const Layout& l);

// TP above the kv heads (grouped-query attention, FrameworkSetting::tp_beyond_kv_heads): each GPU
// gathers the QKV projection's output over TP and keeps one kv head, its query group's.
inline bool kv_heads_gathered(const ModelConfig& m, const Layout& l) {
  return m.attention != "mla" && m.kv_heads < l.tp;
}
// The model as a GPU's kept activations see it: one kv head a GPU where they are gathered.
ModelConfig kv_share(const ModelConfig& m, const Layout& l);

// Micro-batches per step and data-parallel rank.
int64_t micro_batches(const Layout& l);

// Every layout of the search space that the GPU count allows (TP x PP x CP dividing it), possible
// or not.
std::vector<Layout> layouts(const SearchSpace& s, int64_t gpus, int64_t global_batch);

// What the cluster and the run add to a layout.
struct ProjectSetting {
  double usable_memory = 1;  // share of a GPU's memory the job may use
  double overload = 1;         // s' on the hottest expert-parallel rank over its balanced share (its worst layer)
  double time_overload = 1;    // and over the layers on average: what the step waits for
  double held_overload = 1;    // and what the rank that keeps the most holds over its layers (core/project/project.h)
  Reliability reliability;
  double restart_h = 10.0 / 60;         // a restart's cost
  double checkpoint_gb_s_per_node = 5;  // what each node writes its share of the state at
  Dispatcher dispatcher = Dispatcher::AllToAll;
  bool consecutive_experts = false;     // a token's top-k are consecutive experts (expert_choice)
  std::string pipeline_layout;          // Megatron's layout string; "": even (core/project/pipeline.h)
  FrameworkSetting framework;
  ProjectionErrors errors;   // the answers' ranges and the speed's calibration
  double element_bytes = 2;  // an activation's element: bf16 (the default) or float32's 4
  // The linear layers in FP8 (Transformer Engine's recipes, Megatron's --fp8-format): their GEMMs at
  // the preset's FP8 rate, their inputs cast and kept for backward in FP8, their weights' FP8 copies.
  bool fp8 = false;
  // The file's precision: bf16, fp8 (per-tensor), fp8_blockwise (DeepSeek's block scaling,
  // --fp8-recipe blockwise) or mxfp8 (--fp8-recipe mxfp8): its GEMMs at the preset's ratio for it.
  std::string precision = "bf16";
  // Bytes an FP8 copy holds an element: 1, and MXFP8's one-byte scale a 32-element block.
  double fp8_bytes() const { return precision == "mxfp8" ? 1 + 1.0 / 32 : 1; }
};

}  // namespace memfine
