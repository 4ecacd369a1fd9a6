#include "core/project/published.h"

#include <set>
#include <stdexcept>

#include "core/config/reader.h"
#include "core/strategy/registry.h"
#include "core/util/format.h"

namespace memfine {

namespace {

using json = nlohmann::json;

// The texts, read and written alike; every other key is a strategy's label.
const std::vector<std::pair<const char*, std::string Published::*>>& texts() {
  static const std::vector<std::pair<const char*, std::string Published::*>> t = {
      {"source", &Published::source},
      {"evidence", &Published::evidence},
      {"calibration", &Published::calibration},
      {"known_issue", &Published::known_issue}};
  return t;
}

bool is_text(const std::string& k) {
  for (const auto& [key, field] : texts())
    if (k == key) return true;
  return false;
}

// One strategy's measured quantities.
void read_values(const YAML::Node& n, const std::string& key, std::map<std::string, double>& q, bool& oom,
                 Problems& p) {
  if (!n.IsMap())
    return p.add(n, key, "expected a map of measured quantities (tokens_per_s_gpu, peak_gb, ..., out_of_memory)");
  MapReader qr(n, key, p);
  qr.read("out_of_memory", oom, "true or false");
  for (const char* k : {"tokens_per_s_gpu", "model_tflops_gpu", "step_s", "peak_gb", "reserved_gb", "device_gb",
                        "moe_layer_forward_ms", "moe_layer_backward_ms"}) {
    double v = -1;
    if (n[k].IsDefined()) qr.read_number(k, v, 1e-9, 1e12);
    if (v > 0) q[k] = v;
  }
  qr.check_unknown();
}

// A published label as the label its strategy has among the file's (empty, and a problem, where
// it is none of them).
std::string file_label(const std::string& label, const std::set<std::string>& labels, const YAML::Node& at,
                       Problems& p) {
  StrategySpec spec = parse_label(label).value_or(StrategySpec{label});
  std::vector<ParamProblem> problems;
  const StrategySpec resolved = resolve_strategy(spec, problems);
  if (problems.empty() && labels.count(resolved.label())) return resolved.label();
  p.add(at, "published." + label,
        "'" + label + "' is not one of the file's strategies" +
            (problems.empty() ? "" : " (" + problems.front().message + ")"));
  return "";
}

}  // namespace

Published load_published(const ProjectConfig& c) {
  Published out;
  std::vector<std::string> problems;
  Problems p{c.file, problems};
  YAML::Node n;
  try {
    n = YAML::LoadFile(c.file)["published"];
  } catch (const YAML::Exception& e) {
    throw std::invalid_argument(c.file + ": " + e.what());
  }
  if (!n.IsDefined() || n.IsNull()) return out;
  if (!n.IsMap()) {
    p.add(n, "published", "expected a map: source, and measured quantities per strategy");
  } else {
    std::set<std::string> labels;
    for (const auto& s : c.strategies) labels.insert(s.label());
    MapReader pr(n, "published", p);
    for (const auto& [key, field] : texts()) pr.read(key, out.*field, "a string");
    for (const auto& kv : n) {
      const std::string strategy = kv.first.IsScalar() ? kv.first.Scalar() : "";
      if (strategy.empty() || is_text(strategy)) continue;
      pr.child(strategy);
      std::map<std::string, double> q;
      bool oom = false;
      read_values(kv.second, "published." + strategy, q, oom, p);
      if (oom && !q.empty())
        p.add(kv.second, "published." + strategy, "a run that ran out of memory has no measured figures");
      if (const std::string label = file_label(strategy, labels, kv.first, p); !label.empty()) {
        out.values[label] = q;
        if (oom) out.out_of_memory.insert(label);
      }
    }
    pr.check_unknown();
  }
  if (!problems.empty()) {
    std::string all;
    for (const auto& x : problems) all += (all.empty() ? "" : "\n") + x;
    throw std::invalid_argument(all);
  }
  return out;
}

json published_of(const Published& p, const std::string& label) {
  auto it = p.values.find(label);
  if (it == p.values.end()) return nullptr;
  json j = {{"source", p.source}, {"values", it->second}};
  if (p.out_of_memory.count(label)) j["out_of_memory"] = true;
  for (const auto& [key, field] : texts())
    if (!(p.*field).empty()) j[key] = p.*field;
  return j;
}

}  // namespace memfine
