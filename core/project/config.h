// A project file (`memfine project`): a whole model on a cluster, what it is asked, and the presets
// it names (experiments/project/models.yaml, hardware.yaml). Parsing only, typed and range-checked
// from field tables as an experiment's keys are; what needs the strategies' registry or the
// reliability presets is checked by core/project/check.h.
#pragma once
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/config/config.h"
#include "core/config/fields.h"

namespace memfine {

// The expert-parallel all-to-all: NCCL's, DeepEP's or HybridEP's (a token once per node across nodes).
enum class Dispatcher { AllToAll, DeepEp, HybridEp, AllGather };
template <>
struct EnumNames<Dispatcher> {
  static constexpr std::pair<Dispatcher, const char*> all[] = {{Dispatcher::AllToAll, "alltoall"},
                                                               {Dispatcher::DeepEp, "deepep"},
                                                               {Dispatcher::HybridEp, "hybridep"},
                                                               {Dispatcher::AllGather, "allgather"}};
};

// Which experts a token's top-k are, for what a node-aware dispatcher sends (core/project/comm.h
// experts_reached).
enum class ExpertChoice { Random, Consecutive };
template <>
struct EnumNames<ExpertChoice> {
  static constexpr std::pair<ExpertChoice, const char*> all[] = {{ExpertChoice::Random, "random"},
                                                                 {ExpertChoice::Consecutive, "consecutive"}};
};

// The framework a projection prices, by its profile of what a layer keeps (core/project/profile.h).
enum class Framework { MegatronTe, FsdpTe, Torchtitan, Memfine };
template <>
struct EnumNames<Framework> {
  static constexpr std::pair<Framework, const char*> all[] = {{Framework::MegatronTe, "megatron_te"},
                                                              {Framework::FsdpTe, "fsdp_te"},
                                                              {Framework::Torchtitan, "torchtitan"},
                                                              {Framework::Memfine, "memfine_layer"}};
};

// What the loss holds per token at its peak (core/project/profile.h loss_bytes_per_token); Auto:
// the framework's.
enum class Loss { Auto, VocabFp32, VocabFp32Upcast, VocabBf16, Chunked };
template <>
struct EnumNames<Loss> {
  static constexpr std::pair<Loss, const char*> all[] = {{Loss::Auto, "auto"},
                                                         {Loss::VocabFp32, "vocab_fp32"},
                                                         {Loss::VocabFp32Upcast, "vocab_fp32_upcast"},
                                                         {Loss::VocabBf16, "vocab_bf16"},
                                                         {Loss::Chunked, "chunked"}};
};

// A GPU and its node: memory, the kernel-level rates FLOPs and bytes are divided by, the links.
// A dense bf16 GEMM's measured rate (TFLOP/s) over a full grid of shapes: rows m, outputs n,
// inputs k, each axis rising; rate[(i * n.size() + j) * k.size() + l] is at (m[i], n[j], k[l]).
struct GemmTable {
  std::vector<double> m, n, k, tflops;
  bool empty() const { return tflops.empty(); }
};

// A dispatcher's measured all-to-all rate per GPU and direction, inside a node and across nodes
// (GB/s, its own figure; 0: the link's rate).
struct DispatchRate {
  double nvlink_gb_s = 0, network_gb_s = 0;
};

struct Hardware {
  std::string name, source;
  double memory_gb = 0;
  int64_t gpus_per_node = 8;
  double bf16_dense_tflops = 0;          // the datasheet's peak (MFU's denominator), not a rate used
  double gemm_tflops = 0;                // a large dense bf16 GEMM's measured rate
  GemmTable gemm_table;                  // or the rate by shape: it replaces gemm_tflops
  double attention_tflops = 0;           // the attention kernel's measured rate (at head dim 128)
  // The kernel's rate at several head dims ({head dim, TFLOP/s}, rising), one sequence length: it
  // scales attention_tflops by its ratio at the model's head dim to that at 128.
  std::vector<std::pair<double, double>> attention_head_dim_curve;
  // The same benchmark's rates of the kernel Transformer Engine runs for learnable softmax sinks
  // (gpt-oss), by head dim: where a framework runs it, it replaces the head-dim curve's value at the
  // model's head dim for a model with sinks.
  std::vector<std::pair<double, double>> sink_attention_head_dim_curve;
  // PyTorch's FlexAttention (Triton kernels), forward and backward, by the query's and key's head dim
  // ({head dim, TFLOP/s} rising, the projection's FLOPs: three times a causal forward's): a run on it
  // takes this rate at its head dim (within the curve's: check.cpp), not attention_tflops.
  std::vector<std::pair<double, double>> flex_attention_head_dim_curve;
  double grouped_gemm_tflops = 0;        // grouped expert GEMMs at large rows per expert
  double grouped_gemm_small_tflops = 0;  // and at small ones
  double grouped_gemm_knee_rows = 1024;  // rows per expert where the large rate is reached
  // Or the rate measured at several rows per expert ({rows, TFLOP/s}, rows rising): it replaces the
  // two rates and the knee above, interpolated log-linearly in rows.
  std::vector<std::pair<double, double>> grouped_gemm_curve;
  // The grouped GEMM's rate by the work of a layer's call ({GFLOP of its local experts' FC1 and FC2
  // forward, TFLOP/s}, work rising): a call of less work fills the GPU less whatever its rows per
  // expert, so this caps the rate by rows (log-linear in work, flat beyond its ends). Empty: no cap.
  std::vector<std::pair<double, double>> grouped_gemm_work_curve;
  // A linear layer's GEMM in FP8 (per-tensor scaled E4M3, bf16 out) over the same GEMM in bf16, the
  // two measured at the same shapes at rising rows ({rows, ratio}): a run in FP8 divides the bf16
  // rate of each of its linears' GEMMs by it at the GEMM's rows (interpolated log-linearly, flat
  // beyond its ends). Empty: the preset cannot price FP8.
  std::vector<std::pair<double, double>> fp8_gemm_speedup_curve;
  std::vector<std::pair<double, double>> fp8_blockwise_gemm_speedup_curve;  // the same, block-scaled
  std::vector<std::pair<double, double>> mxfp8_gemm_speedup_curve;          // the same, MXFP8 (32-element blocks)
  double nvlink_gb_s = 0, network_gb_s = 0;  // per GPU and direction
  double nvlink_latency_us = 3, network_latency_us = 10;
  double host_to_device_gb_s = 0, device_to_host_gb_s = 0;
  double hbm_gb_s = 0;  // what memory-bound kernels (norms, SwiGLU's product, permutes, the loss) move
  // The host's time to launch one kernel, microseconds: from a framework's Python forward (the
  // framework's and ATen's dispatch, the CUDA library's and the launch path) and from the autograd
  // engine in backward (no Python); 0: launches are not priced.
  double host_forward_launch_us = 0, host_backward_launch_us = 0;
  double sms = 0;  // streaming multiprocessors: a dispatcher running on some slows what runs beside it
  // The preset's keys whose values are assumed, not measured: an answer on it names them.
  std::vector<std::string> assumed;
  // Each dispatcher's measured all-to-all rates, by the dispatcher (hardware_keys.cpp names their
  // keys); one absent has the links' rates.
  std::map<Dispatcher, DispatchRate> dispatch_rates;
  // The dispatcher's rate (GB/s; 0: the link's).
  double dispatcher_gb_s(Dispatcher dispatcher, bool in_node) const;
  bool has_rates() const;  // enough to time a step
};

// A named model of a presets file: its shape and the source its comment names.
struct ModelPreset {
  std::string name, source;
  ModelConfig model;
};

// The layouts a projection tries: every combination that divides the GPUs, heads, experts,
// layers and batch.
// At most this many estimates in a projection's search (layouts times strategies).
constexpr int64_t kMostProjectEstimates = 100000;

struct SearchSpace {
  std::vector<int64_t> tp = {1, 2, 4, 8}, pp = {1, 2, 4, 8, 16}, ep = {1, 8, 16, 32, 64}, etp = {1}, cp = {1},
                       micro_batch = {1}, vpp = {1}, grad_accumulation = {1};
};

// The training framework a run uses (core/project/framework.h): what its layers keep for backward
// (a profile, core/project/profile.h), its loss, what its process holds beside its tensors, how much
// the caching allocator reserves over what it hands out, and whether it overlaps the all-to-all.
// "auto" and negative numbers: the framework's own (core/project/framework.cpp names the sources).
// Megatron's --recompute-modules that no strategy is, as flags (core/project/profile_megatron.cpp
// prices what each lets go; the strategies are its moe_act, moe and full granularity).
struct RecomputedModules {
  bool layernorm = false, mla_up_proj = false, mlp = false, core_attn = false;
  bool any() const { return layernorm || mla_up_proj || mlp || core_attn; }
};
// Each module's name as Megatron spells it and its flag: the one list the key, the setting and the
// notes read.
const std::vector<std::pair<std::string, bool RecomputedModules::*>>& recompute_module_table();
// The flags of the modules `names` names (names the table has; the key refuses others).
RecomputedModules recomputed_modules(const std::vector<std::string>& names);
// framework.cuda_graphs as the sources write it: its names joined by ", " ("" where not given).
std::string graphs_text(const std::vector<std::string>& graphs);

struct FrameworkConfig {
  Framework name = Framework::MegatronTe;
  Loss loss = Loss::Auto;
  // torch.compile compiles the loss (torchtitan's [compile] components naming "loss"): under loss auto
  // it holds its bf16 input and gradient alone (vocab_bf16), not an eager fp32 upcast's
  bool compile_loss = false;
  std::string reshard = "auto";      // FSDP: gathered weights let go after forward: auto | true | false
  std::string grad_dtype = "fp32";   // the distributed optimizer's gradient buffer: fp32 | bf16
  std::string moment_dtype = "fp32";  // Adam's moments: fp32 | bf16 (the precision-aware optimizer)
  double workspace_gb = -1;          // outside the allocator: CUDA context, NCCL's buffers
  double fragmentation = -1;         // reserved over allocated, less 1
  double margin = 0.1;               // a peak this close to the limit (share of the peak) is borderline
  bool ep_overlap = false;           // the all-to-all hidden behind another micro-batch (Megatron's 1F1B overlap)
  double ep_overlap_hidden = -1;     // of an overlapped all-to-all, the most that hides; -1: the framework's
  bool tp_comm_overlap = false;      // TP's collectives behind the GEMMs (Megatron's --tp-comm-overlap)
  // megatron_te: Megatron's --recompute-modules beside the strategy (layernorm, mla_up_proj, mlp, core_attn)
  std::vector<std::string> recompute_modules;
  // torchtitan: its per-op selective activation checkpointing (activation_checkpoint.mode selective,
  // selective_ac_option op) beside a strategy that keeps its layers
  bool selective_op = false;
  // With it: the all-to-alls' outputs among what it keeps (torchtitan since its PR 1672); false, as
  // before it, they run again in backward
  bool selective_op_all_to_all = true;
  // The attention core is PyTorch's FlexAttention (torchtitan's DeepSeek-V3 since its PR 1610): at
  // the hardware preset's flex_attention_head_dim_curve
  bool flex_attention = false;
  // What CUDA graphs replay of each layer: `none`, `full`, or modules as Megatron's cuda_graph_modules
  // names them, in its order (framework_keys.cpp); empty: not given, eager
  std::vector<std::string> cuda_graphs;
};

// How sure the projection is, from its validation (errors.yaml beside the presets, written by
// scripts/projection_errors.py): each answer's range and the one calibrated constant. Not read
// (no errors.yaml): no range, no calibration.
struct ProjectionErrors {
  std::string file;                      // "" when none was read
  double level = 0.8;                    // the share of published runs a range is to hold
  double speed_low = 1, speed_high = 1;  // tokens/s a GPU: the calibrated projection x [low, high]
  // The share of a source family's runs the speed range from the other families' runs held (the test
  // a new source's runs face), over so many families; -1: the file gives none.
  double speed_held_by_family = -1;
  int64_t source_families = 0;
  // Seconds each layer takes beyond its priced parts, per micro-batch (forward and backward): the one
  // calibrated constant, added per layer pass on a pipeline rank.
  double layer_pass_s = 0;
  // The need: x [low, high], by framework profile (each prices memory apart); a profile the file
  // gives none: no range.
  struct Range {
    double low = 1, high = 1;
  };
  std::map<Framework, Range> memory;
  const Range* memory_of(Framework f) const {
    auto it = memory.find(f);
    return it == memory.end() ? nullptr : &it->second;
  }
  // What the validation saw of a model preset under a framework profile: its runs' throughput errors
  // at their first projection (projected over published, less 1, in %), and how many the range holds.
  struct Seen {
    int64_t runs = 0, too_fast = 0, held = 0;
    double low = 0, median = 0, high = 0;
  };
  std::map<std::pair<Framework, std::string>, Seen> seen;
  const Seen* seen_of(Framework f, const std::string& model) const {
    auto it = seen.find({f, model});
    return it == seen.end() ? nullptr : &it->second;
  }
  // The same by hardware preset, whatever the model and profile.
  std::map<std::string, Seen> seen_hardware;
  const Seen* seen_on(const std::string& hardware) const {
    auto it = seen_hardware.find(hardware);
    return it == seen_hardware.end() ? nullptr : &it->second;
  }
  // The same by micro-batches a step on a rank, whatever the model, profile and GPU: bins [from, to]
  // (to 0: open), each with its name as the file writes it.
  struct SeenBin {
    std::string name;
    int64_t from = 1, to = 0;
    Seen seen;
  };
  std::vector<SeenBin> seen_micro_batches;
  const SeenBin* seen_at(int64_t micro_batches) const {
    for (const auto& b : seen_micro_batches)
      if (b.from <= micro_batches && (b.to == 0 || micro_batches <= b.to)) return &b;
    return nullptr;
  }
};

// errors.yaml of `presets_dir`, appending problems as "FILE:LINE: key: what"; none there: not read.
ProjectionErrors read_projection_errors(const std::string& presets_dir, std::vector<std::string>& problems);

struct ProjectConfig {
  std::string name, file;
  std::string presets_dir;  // where `model` and `hardware` presets are looked up
  std::string model_name, model_source;
  ModelConfig model;
  Hardware hardware;
  int64_t gpus = 0;
  int64_t global_batch = 0;  // sequences per step
  WorkloadConfig imbalance;  // the routing law (kind balanced: none)
  double overload = 0;       // > 0: the hottest rank's s' over its share, given outright
  double mean_overload = 0;  // > 0: and over the layers on average (what a step waits for); else overload
  uint64_t seed = 1;
  double usable_memory = 1;  // share of a GPU's memory the job may use (the framework's terms besides)
  // Failures per node: a preset's name, or failures per 1000 node-days (`failure_rate` >= 0).
  std::string reliability = "llama3";
  double failure_rate = -1;
  double restart_min = 10;
  double checkpoint_gb_s_per_node = 5;
  std::string sharding = "auto";  // the framework's, or "distributed_optimizer", "fsdp"
  std::string dtype = "bfloat16";                  // or "float32": an activation's element
  std::string precision = "bf16";                  // or "fp8": the linear layers' GEMMs (Transformer Engine's FP8)
  Dispatcher dispatcher = Dispatcher::AllToAll;
  ExpertChoice expert_choice = ExpertChoice::Random;
  // Megatron's --pipeline-model-parallel-layout ("Et*3|(tt|)*29m|L"); "": layers split evenly in order.
  std::string pipeline_layout;
  FrameworkConfig framework;
  ProjectionErrors errors;  // of the presets' folder
  SearchSpace search;
  // Every registered strategy at its defaults when the file names none (core/project/check.h).
  std::vector<StrategySpec> strategies;
  int64_t top = 12;  // rows of the ranked table
  std::map<std::string, int> lines;  // the line of each key read, for later checks' FILE:LINE
  std::string where(const std::string& key) const;
};

// Reads a project file's keys, appending problems as "FILE:LINE: key.path: what is wrong" (throws
// std::invalid_argument only for a file that cannot be read or is not YAML).
ProjectConfig parse_project(const std::string& file, const std::string& presets_dir,
                            std::vector<std::string>& problems);
// The same; problems as "FILE:LINE: key.path: what is wrong" (std::invalid_argument
// with all of them, one per line). Presets are found in `presets_dir` (default_presets_dir).
ProjectConfig read_project(const std::string& file, const std::string& presets_dir);

// Where a project file's presets are by default: the first of its folder's project/, its folder
// and its parent folder that holds models.yaml (experiments/project_X.yaml and
// experiments/project/validation/X.yaml both find experiments/project/).
std::string default_presets_dir(const std::string& file);

// Whether a YAML file is a project file (it names a `hardware`), not an experiment.
bool is_project_file(const std::string& file);

// Every preset of a file; problems as "FILE:LINE: name.key: what is wrong".
std::map<std::string, ModelPreset> read_model_presets(const std::string& path, std::vector<std::string>& problems);
std::map<std::string, Hardware> read_hardware_presets(const std::string& path, std::vector<std::string>& problems);
// One written out (a preset, or a project file's `model:` or `hardware:` map), at key `path`; a
// preset file's may say `extends:` (the preset it starts from, merged before).
ModelConfig read_model_preset(const YAML::Node& n, const std::string& path, Problems& p, bool in_presets = false);
Hardware read_hardware(const YAML::Node& n, const std::string& path, Problems& p, bool in_presets = false);

// The key tables, for the key reference (`memfine keys project`, `memfine keys hardware`).
const Section<ProjectConfig>& project_keys();
const Section<SearchSpace>& search_keys();
const Section<Hardware>& hardware_keys();
const Section<FrameworkConfig>& framework_keys();
// A project file's key reference (its top level, `search:`, `framework:`), or with "hardware" a
// hardware preset's, as a Markdown table.
std::string project_key_reference(const std::string& which);

}  // namespace memfine
