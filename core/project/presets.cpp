// Preset files of `memfine project` (experiments/project/models.yaml, hardware.yaml): named
// models and GPUs, each with the source its comment names, read key by key with FILE:LINE problems.
#include <fstream>

#include "core/project/config.h"
#include "core/config/sections.h"

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
  if (const std::string why = yaml_file_problem(path); !why.empty()) {
    problems.push_back(why + " (a presets file: --presets DIR names the folder that holds it)");
    return out;
  }
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    problems.push_back(path + ": cannot be read (a presets file: --presets DIR names the folder that holds it)");
    return out;
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

ModelConfig read_model_preset(const YAML::Node& n, const std::string& path, Problems& p) {
  ModelConfig m;
  if (!n.IsMap()) {
    p.add(n, path, "expected a map of model keys");
    return m;
  }
  MapReader r(n, path, p);
  read_section(model_keys(), r, m);
  r.check_unknown();
  // A whole model's shape is written out: the experiment files' defaults are a benchmark's.
  for (const char* k : {"layers", "hidden", "heads", "kv_heads", "head_dim", "ffn_hidden", "experts", "topk", "seq"})
    if (!n[k].IsDefined()) p.add(n, r.key(k), "missing");
  check_model(m, r);
  return m;
}

std::map<std::string, ModelPreset> read_model_presets(const std::string& path, std::vector<std::string>& problems) {
  return read_all<ModelPreset>(path, problems, [](const YAML::Node& n, const std::string& name, Problems& p) {
    return ModelPreset{name, "", read_model_preset(n, name, p)};
  });
}

std::map<std::string, Hardware> read_hardware_presets(const std::string& path, std::vector<std::string>& problems) {
  return read_all<Hardware>(path, problems, [](const YAML::Node& n, const std::string& name, Problems& p) {
    return read_hardware(n, name, p);
  });
}

}  // namespace memfine
