// The experiment configuration: what a YAML file says, validated, with the sweep expanded.
#pragma once
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace memfine {

struct ModelConfig {
  int64_t layers = 2;
  int64_t hidden = 256;
  int64_t heads = 4;
  int64_t kv_heads = 2;
  int64_t head_dim = 64;
  int64_t ffn_hidden = 512;     // routed expert's SwiGLU hidden size (g_e)
  int64_t experts = 8;          // routed experts in total, over all expert-parallel ranks
  int64_t topk = 2;
  int64_t seq = 256;            // tokens per sequence on one rank (s)
  int64_t micro_batch = 1;      // sequences per rank (b)
  int64_t shared_experts = 0;   // shared expert of width shared_experts * ffn_hidden, 0 = none
  std::string attention = "gqa";  // "gqa" (causal grouped-query) or "none" (MoE-only layers)
  int64_t tokens() const { return seq * micro_batch; }
};

struct WorkloadConfig {
  std::string kind = "balanced";  // balanced | zipf | lognormal | hot | trace
  double alpha = 1.2;             // zipf exponent
  double sigma = 1.0;             // lognormal sigma
  double hot_fraction = 0.5;      // hot: share of all assignments forced onto the hot experts
  int64_t hot_experts = 1;        // hot: how many experts are hot
  std::string trace;              // trace: CSV path (resolved against the YAML's folder)
};

// A strategy as the YAML names it: `memfine` or `{name: memfine, chunks: 4}`.
struct StrategySpec {
  std::string name;
  std::map<std::string, YAML::Node> params;
  std::string label() const;  // "memfine(chunks=4)": stable, used as the results key
  int64_t get_int(const std::string& key, int64_t fallback) const;
  double get_double(const std::string& key, double fallback) const;
  bool get_bool(const std::string& key, bool fallback) const;
  std::string get_string(const std::string& key, const std::string& fallback) const;
  std::vector<int64_t> get_int_list(const std::string& key, std::vector<int64_t> fallback) const;
};

struct ExperimentConfig {
  std::string name;
  std::string source;  // the YAML file
  uint64_t seed = 1;
  std::string device = "cpu";
  std::string dtype = "float32";  // float32 | float64 | bfloat16
  int64_t threads = 0;            // 0 = all cores
  int64_t warmup = 1;
  int64_t repeats = 3;
  bool verify = false;
  ModelConfig model;
  int64_t ep = 1;                 // expert-parallel size emulated on this device
  int64_t rank = -1;              // emulated rank; -1 = the most loaded one
  WorkloadConfig workload;
  int64_t budget = -1;            // bytes; -1 = no budget
  std::vector<StrategySpec> strategies;
};

struct SweepPoint {
  std::string id;  // "seq=256,workload.alpha=1.2": stable across runs; "base" without a sweep
  ExperimentConfig config;
};

// Reads, validates and expands a YAML experiment. Problems are appended to `errors` as
// "FILE:LINE: key.path: what is wrong"; the returned points are only meaningful if none were.
std::vector<SweepPoint> load_experiment(const std::string& path, std::vector<std::string>& errors);

// Parses "512MiB", "2GiB", "1e9" or a plain byte count; throws std::invalid_argument.
int64_t parse_bytes(const std::string& text);

}  // namespace memfine
