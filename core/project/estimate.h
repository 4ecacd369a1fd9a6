// One layout x memory strategy of a whole model on a cluster, projected (`memfine project`): the
// hottest GPU's memory, the step time in parts, throughput and goodput. Each part is a small model
// whose assumptions are printed with the numbers (Estimate::assumptions):
//  * memory: static bytes of the most loaded pipeline stage (bf16 weights, fp32 gradients, fp32
//    master weights and Adam moments sharded by the distributed optimizer) and activations per
//    layer from the paper's Eq. 2 (its s term) with the row widths this suite's implementation
//    model measured for each strategy (its s' term), times the micro-batches 1F1B keeps in flight;
//  * compute: FLOPs over a rate per operation class (dense GEMM, grouped expert GEMM as a function
//    of rows per expert, attention) from the hardware file;
//  * communication: alpha-beta per collective and link (core/project/comm.h), exposed where the
//    layout cannot hide it; the pipeline bubble (core/project/pipeline.h);
//  * goodput: ETTR at the optimal checkpoint interval (core/project/goodput.h).
#pragma once
#include <string>
#include <vector>

#include "core/project/goodput.h"
#include "core/project/presets.h"

namespace memfine {

struct Layout {
  int64_t tp = 1, pp = 1, ep = 1, dp = 1, cp = 1;  // gpus = tp * pp * dp * cp; ep divides dp * cp
  int64_t vpp = 1;                                 // virtual stages per rank (interleaved 1F1B)
  int64_t micro_batch = 1;                         // sequences per micro-batch
  int64_t grad_accumulation = 1;                   // pipeline schedules (fill and drain) per step
  int64_t global_batch = 1;                        // sequences per step
  int64_t gpus() const { return tp * pp * dp * cp; }
  std::string text() const;  // "TP2 PP8 EP32 DP16 CP1 mb1"
};

// How a layer keeps what backward needs.
enum class Keep { Stored, Full, MoeAct, MemFine, Offload, Capacity };
struct ProjectStrategy {
  std::string name;  // as written: no_recompute, full_recompute, moe_act_recompute, memfine, offload, capacity
  Keep keep = Keep::Stored;
  std::vector<int64_t> bins = {1, 2, 4, 8};  // memfine: the chunk counts MACT may choose
  double capacity_factor = 1.0;              // capacity
};
// By name ("memfine" plans its chunks from the bins); throws std::invalid_argument naming the choices.
ProjectStrategy project_strategy(const std::string& name);

// What the cluster and the run add to a layout.
struct ProjectSetting {
  double usable_memory = 0.9;  // share of a GPU's memory the job may use (context, fragmentation)
  double overload = 1;         // s' on the hottest expert-parallel rank over its balanced share
  Reliability reliability;
  double restart_h = 10.0 / 60;         // a restart's cost
  double checkpoint_gb_s_per_node = 5;  // what each node writes its share of the state at
  bool node_dedup = false;              // the dispatcher sends a token once per node (DeepEP), not once per expert
  bool fsdp = false;
  double element_bytes = 2;  // an activation's element: bf16 (the default) or float32's 4  // FSDP (weights and
                             // gradients sharded too) instead of Megatron's distributed optimizer
};

struct Estimate {
  Layout layout;
  ProjectStrategy strategy;
  bool fits = false;
  std::string why;            // why it does not fit (or "")
  std::string hottest_stage;  // "first", "last" or "only": the pipeline rank whose memory is given
  double static_gb = 0, activation_gb = 0, peak_gb = 0, host_gb = 0;  // the hottest GPU
  int64_t chunks = 0;                                                 // memfine: MACT's choice
  // Seconds per step, by part.
  double compute = 0, recompute = 0, comm = 0, bubble = 0, offload_wait = 0, step = 0;
  double chunk_overhead = 0;  // MemFine's chunks: their expert GEMMs at fewer rows per expert
  double all_to_all = 0;      // of comm: the expert-parallel dispatch and combine
  double tokens_per_s_gpu = 0, model_tflops_gpu = 0;
  double balanced_tokens_per_s_gpu = 0;  // the same with balanced routing
  Goodput goodput;
  std::vector<std::string> assumptions;
};

Estimate estimate(const ProjectModel& m, const Hardware& hw, const Layout& l, const ProjectStrategy& s,
                  const ProjectSetting& set);

}  // namespace memfine
