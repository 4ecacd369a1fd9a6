// The experiment configuration: what a YAML file says, typed, with the sweep expanded. Parsing
// only: checks that need strategies, workloads or the memory model are in core/run/validate.h.
#pragma once
#include <yaml-cpp/yaml.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace memfine {

// A model's shape: what an experiment builds and runs, what the paper's equations size, and what
// `memfine project` projects on a cluster (its presets, experiments/project/models.yaml, are
// written in these keys). The whole-model keys below the line are the projections' only: the
// layers `memfine run` builds are every one a MoE layer with grouped-query attention (or none).
struct ModelConfig {
  int64_t layers = 2;
  int64_t hidden = 256;
  int64_t heads = 4;
  int64_t kv_heads = 2;
  int64_t head_dim = 64;     // MLA: the query-key width, rotary part included
  int64_t ffn_hidden = 512;  // routed expert's SwiGLU hidden size (g_e)
  int64_t experts = 8;       // routed experts in total, over all expert-parallel ranks
  int64_t topk = 2;
  int64_t seq = 256;              // tokens per sequence on one rank (s)
  int64_t micro_batch = 1;        // sequences per rank (b)
  int64_t shared_experts = 0;     // shared expert of width shared_experts * ffn_hidden, 0 = none
  std::string attention = "gqa";  // "gqa" (causal grouped-query), "mla" (projections only) or "none"
  // A language model over `vocab` token ids (0: the benchmark's stand-in, random hidden states in
  // and a regression target out): token embedding, the output head tied to it, next-token
  // cross-entropy (core/model/model.h). A projection counts its embedding and head.
  int64_t vocab = 0;
  // ---- a whole model, for projections (memfine project, predict's paper section)
  int64_t dense_layers = 0;  // leading layers with a dense SwiGLU of dense_ffn_hidden
  int64_t dense_ffn_hidden = 0;
  int64_t mtp_layers = 0;      // DeepSeek's multi-token prediction modules
  int64_t v_head_dim = 0;      // 0: head_dim
  int64_t q_lora_rank = 0;     // MLA's low-rank query projection (0: none)
  int64_t kv_lora_rank = 0;    // MLA's low-rank key-value projection
  int64_t rope_head_dim = 64;  // MLA: the shared rotary key's width
  bool qk_norm = false;        // a per-head RMSNorm of queries and keys (Qwen3): what it keeps, projections only
  int64_t sliding_window = 0;  // tokens a windowed layer's queries attend to (0: every layer attends to all)
  double sliding_share = 0;    // the share of layers windowed (gpt-oss alternates: 0.5)
  bool attention_sinks = false;  // learnable per-head softmax sinks (gpt-oss): projections only
  bool expert_bias = false;      // biases in the experts' FC1 and FC2 (gpt-oss): projections only
  double glu_limit = 0;          // the experts' GLU inputs clamped at this value (gpt-oss: 7); 0: none
  double rope_mscale = 1;        // YaRN's scale of RoPE's cos and sin (gpt-oss: 1.3466); 1: none
  int64_t tokens() const { return seq * micro_batch; }
  int64_t moe_layers() const { return layers - dense_layers; }
  int64_t v_dim() const { return v_head_dim > 0 ? v_head_dim : head_dim; }
};

struct WorkloadConfig {
  std::string kind = "balanced";  // balanced | zipf | lognormal | hot | trace
  double alpha = 1.2;             // zipf exponent
  double sigma = 1.0;             // lognormal sigma
  double hot_fraction = 0.5;      // hot: share of all assignments forced onto the hot experts
  int64_t hot_experts = 1;        // hot: how many experts are hot
  // hot: "random" draws the hot experts anywhere (per layer); "one_rank" puts them on consecutive
  // experts from one expert-parallel rank's first, the same rank in every layer, so that one rank
  // receives the whole hot share (the paper's Table 4 prices its hottest rank with every local
  // expert at Figure 2's p99).
  std::string hot_placement = "random";
  std::string trace;              // trace: CSV path (resolved against the YAML's folder)
  // How imbalance changes over training steps and depth. "none": the same routing every step.
  // "figure5": the shape of the paper's Figures 2 and 5 - calm first steps, a hot middle around
  // `peak_step` (spread `width` steps), deeper layers more imbalanced; routing redrawn each step.
  // "trace": step s replays the trace's s-th step (a trace with a step column, as `memfine train
  // --trace-out` writes); `peak_step` picks the step at which the hottest rank is chosen.
  std::string schedule = "none";
  double peak_step = 8, width = 4;
  // Imbalance strength in [0, 1] at a step and layer (1 when there is no schedule).
  double intensity(int64_t step, int64_t layer, int64_t layers) const;
};

// A strategy as the YAML names it: `memfine` or `{name: memfine, chunks: 4}`. Its parameters are
// typed by the strategy's own declaration (core/strategy/params.h), which resolves them: every
// declared parameter's value with defaults filled in, and the canonical label, the results' key,
// which is the same however the YAML writes a value (block or flow style, 1 or 1.0, a default
// written out or left out).
struct StrategySpec {
  std::string name;
  std::map<std::string, YAML::Node> written;  // as the YAML wrote them
  bool resolved = false;
  std::string role;                                  // resolved: "reference", "baseline" or "" (the registration's)
  // Resolved: every declared parameter; a strategy reads them typed (ParamsOf, core/strategy/params.h).
  nlohmann::json values = nlohmann::json::object();
  nlohmann::json shown = nlohmann::json::object();   // resolved: those the label names
  // "memfine(chunks=4)": name and the shown parameters in key order, each value in one form
  // (before resolution, the written ones, as they parse).
  std::string label() const;
};

// A parameter's value as labels write it: 4, 1.25, 1.0, true, auto, [1,2,4,8].
std::string label_value(const nlohmann::json& v);
// A written YAML value as JSON: integers, numbers, booleans and strings keep their type (a quoted
// scalar is a string); lists and maps recursively, at most 65,536 elements (std::invalid_argument:
// an alias bomb is refused, not expanded).
nlohmann::json yaml_to_json(const YAML::Node& n);
// A written value as a message shows it: a scalar as labels write it, anything else as its YAML
// (aliases kept), cut at 80 characters.
std::string shown_value(const YAML::Node& n);

// Paper-scale projection (memfine predict only): the device and where s' comes from. The model's
// shape, attention's MLA widths included, is the experiment's `model:`.
struct PaperScaleConfig {
  bool enabled = false;
  int64_t device_memory = 64000000000;  // bytes ("64 GB per GPU")
  double alpha = 1.0;                   // Eq. 3: share of device memory available; not given in the paper
  int64_t pipeline = 4;                 // p
  int64_t layers_per_stage = 0;         // 0: layers / pipeline
  double bytes_param = 2, bytes_grad = 4, bytes_optimizer = 12;  // bf16 weights; fp32 grads, master and 2 moments
  std::string received = "figure2";  // s': "figure2" (hottest layer's p99 x local experts) or a number
  std::string figure2;               // CSV of the paper's Figure 2 statistics (layer,p99,...)
  std::vector<std::pair<int64_t, double>> figure2_rows;  // its (layer, p99 tokens per expert), read and checked
  double m_g = 1;                    // stored layers' worth of activations (1 under full recomputation)
};

// `memfine train` (core/train/train.h): a language model trained on real text, one record per step.
struct TrainConfig {
  bool enabled = false;  // the YAML has a `train:` section
  int64_t steps = 100;
  double lr = 3e-3;     // peak learning rate (Adam)
  int64_t warmup = 10;  // linear warmup steps, then cosine decay to min_lr
  double min_lr = 3e-4;
  int64_t eval_every = 25;        // evaluation loss on held-out text every N steps (and at the last)
  int64_t eval_batches = 4;       // held-out batches per evaluation (fixed, the same for every run)
  int64_t checkpoint_every = 25;  // whole training state every N steps (resume continues from it)
  double aux_loss = 0.01;         // Switch Transformer's load-balancing loss coefficient; 0: off
  // DeepSeek-V3's auxiliary-loss-free balancing: a per-expert bias added to the router's scores for
  // the top-k choice only, moved by this much after each step towards balance (0.001 in the
  // DeepSeek-V3 report); 0: off.
  double bias_update = 0;
  uint64_t data_seed = 1;                            // the data order, apart from `seed` (the weights)
  std::string corpus = "/usr/share/games/fortunes";  // Debian package `fortunes` (core/workload/corpus.h)
  int64_t stats_ep = 1;  // expert-parallel ranks that s' and the overload factor are computed for
};

struct ExperimentConfig {
  std::string name;
  std::string source;  // the YAML file
  uint64_t seed = 1;
  std::string device = "cpu";
  std::string dtype = "float32";  // float32 | float64 | bfloat16
  // How the stages' dispatch and combine move rows: "aten" (index_select, cat, index_add) or "fused"
  // (the row kernels of core/moe/kernels.h). The YAML may say "auto" (fused on CUDA builds' GPUs,
  // else aten); the loaded config holds what was chosen. A ranged MoE has operators of its own.
  std::string kernels = "auto";
  // How the local experts' GEMMs run: "loop" (one per expert, as Megatron-Core's SequentialMLP) or
  // "grouped" (one per projection for all of them, as TEGroupedMLP: core/moe/grouped.h); grouped, a
  // MoE runs as ranges of few operators (core/moe/ranged.h) where it can.
  std::string expert_gemm = "grouped";
  // Grouped, where the experts' weight gradients come from: "grouped" (the grouped GEMM's; LibTorch's
  // native one makes them in a buffer of its own, then added) or "per_expert" (a GEMM per expert
  // accumulating into .grad in place, as Transformer Engine's fused accumulation does).
  std::string expert_wgrad = "grouped";
  // How grouped-query attention runs: "eager" (the scores, the mask and the softmax as ATen tensors)
  // or "sdpa" (LibTorch 2.x's scaled_dot_product_attention: a fused kernel that keeps no scores).
  std::string attention_kernel = "eager";
  int64_t threads = 0;  // 0 = all cores
  int64_t warmup = 1;
  int64_t repeats = 3;
  bool verify = false;
  // "step": each strategy's forward and backward captured once as a CUDA graph and replayed every
  // timed step (core/run/graph_step.h); "none": run eagerly.
  std::string graphs = "none";
  ModelConfig model;
  int64_t ep = 1;     // expert-parallel size emulated on this device
  int64_t rank = -1;  // emulated rank; -1 = the most loaded one
  WorkloadConfig workload;
  int64_t budget = -1;  // bytes; -1 = no budget
  std::vector<StrategySpec> strategies;
  PaperScaleConfig paper;
  TrainConfig train;
  // The step-time cost model fitted on this machine (scripts/fit-cost-model): MACT's objective:
  // time and the records' share of the matmul ceiling. Empty: none (no default: an input is named).
  std::string cost_model;
  std::map<std::string, int> lines;  // the YAML line of each key read ("model.seq", "strategies[1].chunks")
  // "FILE:LINE" of a key (or of its nearest parent that was written), for error messages.
  std::string where(const std::string& key) const;
};

struct SweepPoint {
  std::string id;  // "seq=256,workload.alpha=1.2": stable across runs; "base" without a sweep
  ExperimentConfig config;
};

// Reads and expands a YAML experiment, checking types, ranges and unknown keys. Problems are
// appended to `errors` as "FILE:LINE: key.path: what is wrong"; the returned points are only
// meaningful if none were. Callers that run or predict use load_and_validate (core/run/validate.h).
std::vector<SweepPoint> load_experiment(const std::string& path, std::vector<std::string>& errors);
// Why `path` cannot be read as a YAML file (missing, not a regular file, over 16 MiB: the OS's
// reason and the name), or "".
std::string yaml_file_problem(const std::string& path);

// The most points a sweep may expand to, and strategies a file may list (experiments/README.md).
inline constexpr size_t kMaxSweepPoints = 10000;
inline constexpr size_t kMaxStrategies = 64;

// The resolved config as the YAML would write it, every key included: JSON is YAML, so the
// record's config loads back to the same config (tests/test_cli.cpp holds it to that).
nlohmann::json config_to_json(const ExperimentConfig& c);

}  // namespace memfine
