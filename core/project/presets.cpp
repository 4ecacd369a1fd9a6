#include "core/project/presets.h"

#include <cmath>
#include <fstream>

namespace memfine {

namespace {
// The comment on a preset's first line (its source).
std::map<std::string, std::string> sources(const std::string& path) {
  std::map<std::string, std::string> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == ' ' || line[0] == '#') continue;
    const auto colon = line.find(':'), hash = line.find('#');
    if (colon == std::string::npos) continue;
    out[line.substr(0, colon)] = hash == std::string::npos ? "" : line.substr(line.find_first_not_of(" #", hash));
  }
  return out;
}

template <class T, class F>
std::map<std::string, T> read_all(const std::string& path, std::vector<std::string>& problems, F read_one) {
  std::map<std::string, T> out;
  Problems p{path, problems};
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    problems.push_back(path + ":" + std::to_string(e.mark.line + 1) + ": " + e.msg);
    return out;
  }
  if (!root.IsMap()) {
    problems.push_back(path + ": expected a map of presets by name");
    return out;
  }
  const auto src = sources(path);
  for (const auto& kv : root) {
    const std::string name = kv.first.as<std::string>();
    T t = read_one(kv.second, name, p);
    if (auto it = src.find(name); it != src.end()) t.source = it->second;
    out[name] = t;
  }
  return out;
}
}  // namespace

ProjectModel read_model(const YAML::Node& n, const std::string& name, Problems& p) {
  ProjectModel m;
  m.name = name;
  if (!n.IsMap()) {
    p.add(n, name, "expected a map of model keys");
    return m;
  }
  MapReader r(n, name, p);
  const int64_t big = int64_t(1) << 40;
  // Only what is written (a missing key is said once, below, not as out of range).
  auto read_int = [&](const char* k, int64_t& dst, int64_t lo, int64_t hi) {
    if (n[k].IsDefined()) r.read_int(k, dst, lo, hi);
  };
  read_int("layers", m.layers, 1, 1 << 20);
  read_int("dense_layers", m.dense_layers, 0, 1 << 20);
  read_int("hidden", m.hidden, 1, 1 << 24);
  read_int("heads", m.heads, 1, 1 << 16);
  read_int("kv_heads", m.kv_heads, 1, 1 << 16);
  read_int("head_dim", m.head_dim, 1, 1 << 16);
  read_int("v_head_dim", m.v_head_dim, 0, 1 << 16);
  read_int("rope_head_dim", m.rope_head_dim, 0, 1 << 16);
  read_int("q_lora_rank", m.q_lora_rank, 0, 1 << 24);
  read_int("kv_lora_rank", m.kv_lora_rank, 0, 1 << 24);
  read_int("ffn_hidden", m.ffn_hidden, 1, 1 << 24);
  read_int("dense_ffn_hidden", m.dense_ffn_hidden, 0, 1 << 24);
  read_int("experts", m.experts, 1, 1 << 20);
  read_int("shared_experts", m.shared_experts, 0, 1 << 10);
  read_int("topk", m.topk, 1, 1 << 10);
  read_int("vocab", m.vocab, 0, big);
  read_int("seq", m.seq, 1, big);
  read_int("mtp_layers", m.mtp_layers, 0, 1 << 10);
  r.read_choice("attention", m.attention, {"gqa", "mla"});
  r.check_unknown();
  for (const char* k : {"layers", "hidden", "heads", "kv_heads", "head_dim", "ffn_hidden", "experts", "topk", "seq"})
    if (!n[k].IsDefined()) p.add(n, r.key(k), "missing");
  if (m.dense_layers >= m.layers && m.layers > 0)
    p.add(n["dense_layers"], r.key("dense_layers"), "must be below layers");
  if (m.topk > m.experts && m.experts > 0) p.add(n["topk"], r.key("topk"), "exceeds experts");
  if (m.dense_layers > 0 && m.dense_ffn_hidden == 0) p.add(n, r.key("dense_ffn_hidden"), "missing (dense_layers > 0)");
  if (m.heads % m.kv_heads != 0 && m.kv_heads > 0) p.add(n["kv_heads"], r.key("kv_heads"), "must divide heads");
  return m;
}

Hardware read_hardware(const YAML::Node& n, const std::string& name, Problems& p) {
  Hardware h;
  h.name = name;
  if (!n.IsMap()) {
    p.add(n, name, "expected a map of hardware keys");
    return h;
  }
  MapReader r(n, name, p);
  r.read_number("memory_gb", h.memory_gb, 1e-3, 1e6);
  r.read_int("gpus_per_node", h.gpus_per_node, 1, 1 << 16);
  r.read_number("bf16_dense_tflops", h.bf16_dense_tflops, 0, 1e6);
  r.read_number("gemm_tflops", h.gemm_tflops, 0, 1e6);
  r.read_number("attention_tflops", h.attention_tflops, 0, 1e6);
  r.read_number("grouped_gemm_tflops", h.grouped_gemm_tflops, 0, 1e6);
  r.read_number("grouped_gemm_small_tflops", h.grouped_gemm_small_tflops, 0, 1e6);
  r.read_number("grouped_gemm_knee_rows", h.grouped_gemm_knee_rows, 1, 1e9);
  r.read_number("nvlink_gb_s", h.nvlink_gb_s, 0, 1e6);
  r.read_number("network_gb_s", h.network_gb_s, 0, 1e6);
  r.read_number("nvlink_latency_us", h.nvlink_latency_us, 0, 1e6);
  r.read_number("network_latency_us", h.network_latency_us, 0, 1e6);
  r.read_number("host_to_device_gb_s", h.host_to_device_gb_s, 0, 1e6);
  r.read_number("device_to_host_gb_s", h.device_to_host_gb_s, 0, 1e6);
  r.read_number("hbm_gb_s", h.hbm_gb_s, 0, 1e7);
  if (YAML::Node c = r.child("grouped_gemm_curve"); c.IsDefined()) {
    bool ok = c.IsSequence() && c.size() > 0;
    for (size_t i = 0; ok && i < c.size(); ++i) {
      ok = c[i].IsSequence() && c[i].size() == 2;
      double rows = 0, tflops = 0;
      try {
        if (ok) rows = c[i][0].as<double>(), tflops = c[i][1].as<double>();
      } catch (const YAML::Exception&) {
        ok = false;
      }
      ok = ok && std::isfinite(rows) && std::isfinite(tflops) && rows > 0 && tflops > 0 &&
           (h.grouped_gemm_curve.empty() || rows > h.grouped_gemm_curve.back().first);
      if (ok) h.grouped_gemm_curve.push_back({rows, tflops});
    }
    if (!ok) {
      p.add(c, r.key("grouped_gemm_curve"), "expected a list of [rows, TFLOP/s] pairs, rows rising, both above 0");
      h.grouped_gemm_curve.clear();
    }
  }
  r.read_number("all_to_all_nvlink_gb_s", h.all_to_all_nvlink_gb_s, 0, 1e6);
  r.read_number("all_to_all_network_gb_s", h.all_to_all_network_gb_s, 0, 1e6);
  r.check_unknown();
  if (!n["memory_gb"].IsDefined()) p.add(n, r.key("memory_gb"), "missing");
  return h;
}

std::map<std::string, ProjectModel> read_models(const std::string& path, std::vector<std::string>& problems) {
  return read_all<ProjectModel>(
      path, problems, [](const YAML::Node& n, const std::string& name, Problems& p) { return read_model(n, name, p); });
}

std::map<std::string, Hardware> read_hardware(const std::string& path, std::vector<std::string>& problems) {
  return read_all<Hardware>(path, problems, [](const YAML::Node& n, const std::string& name, Problems& p) {
    return read_hardware(n, name, p);
  });
}

}  // namespace memfine
