// `memfine project`'s presets: whole models (experiments/project/models.yaml) and hardware
// (experiments/project/hardware.yaml), each read key by key with FILE:LINE problems. A model is
// what a projection needs beyond one MoE layer: its dense leading layers, attention's kind
// (grouped-query or DeepSeek's multi-head latent attention), vocabulary and sequence.
#pragma once
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/config/reader.h"

namespace memfine {

struct ProjectModel {
  std::string name, source;  // the preset's name and the comment that names its source
  int64_t layers = 0, dense_layers = 0, hidden = 0, heads = 0, kv_heads = 0, head_dim = 0;
  int64_t v_head_dim = 0;                     // 0: head_dim (MLA: DeepSeek-V3's 128)
  int64_t q_lora_rank = 0, kv_lora_rank = 0;  // MLA's low-rank projections (0: none)
  int64_t rope_head_dim = 64;                 // MLA: the shared rotary key's width
  int64_t ffn_hidden = 0, dense_ffn_hidden = 0, experts = 0, shared_experts = 0, topk = 0, vocab = 0, seq = 0;
  int64_t mtp_layers = 0;  // DeepSeek's multi-token prediction modules (a MoE layer, a projection, the head again)
  std::string attention = "gqa";  // "gqa" or "mla"
  int64_t moe_layers() const { return layers - dense_layers; }
  int64_t v_dim() const { return v_head_dim > 0 ? v_head_dim : head_dim; }
};

struct Hardware {
  std::string name, source;
  double memory_gb = 0;
  int64_t gpus_per_node = 8;
  double bf16_dense_tflops = 0;              // the datasheet's peak (MFU's denominator), not a rate used
  double gemm_tflops = 0;                    // a large dense bf16 GEMM's measured rate
  double attention_tflops = 0;               // the attention kernel's measured rate
  double grouped_gemm_tflops = 0;            // grouped expert GEMMs at large rows per expert
  double grouped_gemm_small_tflops = 0;      // and at small ones
  double grouped_gemm_knee_rows = 1024;      // rows per expert where the large rate is reached
  // Or the rate measured at several rows per expert ({rows, TFLOP/s}, rows rising): it replaces the
  // two rates and the knee above, interpolated log-linearly in rows.
  std::vector<std::pair<double, double>> grouped_gemm_curve;
  double nvlink_gb_s = 0, network_gb_s = 0;  // per GPU and direction
  double nvlink_latency_us = 3, network_latency_us = 10;
  double host_to_device_gb_s = 0, device_to_host_gb_s = 0;
  double hbm_gb_s = 0;  // what memory-bound kernels (norms, SwiGLU's product, permutes, the loss) move
  // The all-to-all's measured rate per GPU and direction, inside a node and across nodes (an
  // expert-parallel dispatcher's own figure; 0: the link's rate above).
  double all_to_all_nvlink_gb_s = 0, all_to_all_network_gb_s = 0;
};

// Every preset of a file; problems as "FILE:LINE: name.key: what is wrong".
std::map<std::string, ProjectModel> read_models(const std::string& path, std::vector<std::string>& problems);
std::map<std::string, Hardware> read_hardware(const std::string& path, std::vector<std::string>& problems);
// One written out (a project file's `model:` or `hardware:` map).
ProjectModel read_model(const YAML::Node& n, const std::string& name, Problems& p);
Hardware read_hardware(const YAML::Node& n, const std::string& name, Problems& p);

}  // namespace memfine
