// Preset files of `memfine project` (experiments/project/models.yaml, hardware.yaml): named
// models and GPUs, each with the source its comment names, read key by key with FILE:LINE problems.
#include <fstream>
#include <set>

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

// A preset that says `extends: NAME` is that preset's keys with its own over them (an H800 is an
// H100 with other links); chains are followed, a loop or an unknown name refused at its line.
YAML::Node extended(const YAML::Node& root, const std::string& name, Problems& p, std::set<std::string>& seen) {
  const YAML::Node own = root[name];
  if (!own.IsMap() || !own["extends"].IsDefined()) return own;
  const YAML::Node base = own["extends"];
  const std::string of = base.IsScalar() ? base.as<std::string>() : "";
  if (!seen.insert(name).second) {
    p.add(base, name + ".extends", "a loop of presets extending each other");
    return own;  // read as written: what it lacks is said at its own lines
  }
  if (of.empty() || !root[of].IsDefined() || of == name) {
    std::string known;
    for (const auto& kv : root) known += (known.empty() ? "" : ", ") + kv.first.as<std::string>();
    p.add(base, name + ".extends", "'" + YAML::Dump(base) + "' is not another preset of this file (" + known + ")");
    return own;
  }
  YAML::Node out(YAML::NodeType::Map);
  const size_t said = p.out.size();
  const YAML::Node from = extended(root, of, p, seen);
  if (p.out.size() > said) return own;  // a broken chain: read as written
  if (from.IsMap())
    for (const auto& kv : from)
      if (kv.first.as<std::string>() != "extends") out[kv.first.as<std::string>()] = kv.second;
  for (const auto& kv : own)
    if (kv.first.as<std::string>() != "extends") out[kv.first.as<std::string>()] = kv.second;
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
    std::set<std::string> seen;
    T t = read_one(extended(root, name, p, seen), name, p);
    if (auto it = src.find(name); it != src.end()) t.source = it->second;
    out[name] = t;
  }
  return out;
}

}  // namespace

ModelConfig read_model_preset(const YAML::Node& n, const std::string& path, Problems& p, bool in_presets) {
  ModelConfig m;
  if (!n.IsMap()) {
    p.add(n, path, "expected a map of model keys");
    return m;
  }
  MapReader r(n, path, p);
  if (in_presets) r.child("extends");  // merged by extended() above
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
    return ModelPreset{name, "", read_model_preset(n, name, p, true)};
  });
}

std::map<std::string, Hardware> read_hardware_presets(const std::string& path, std::vector<std::string>& problems) {
  return read_all<Hardware>(path, problems, [](const YAML::Node& n, const std::string& name, Problems& p) {
    return read_hardware(n, name, p, true);
  });
}

}  // namespace memfine
