// The configuration as JSON (what every record carries), and a strategy's label.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/config/sections.h"
#include "core/util/format.h"

namespace memfine {

using json = nlohmann::json;

namespace {

// The most elements a written value may expand to: YAML's aliases let a small file name a tree of
// billions (an alias bomb), which no setting needs.
constexpr int64_t kMaxElements = 1 << 16;

json to_json(const YAML::Node& n, int64_t& budget) {
  if (--budget < 0)
    throw std::invalid_argument("a value of more than " + std::to_string(kMaxElements) +
                                " elements (YAML aliases repeating one another?)");
  if (n.IsSequence()) {
    json a = json::array();
    for (const auto& v : n) a.push_back(to_json(v, budget));
    return a;
  }
  if (n.IsMap()) {
    json o = json::object();
    for (const auto& kv : n) o[kv.first.as<std::string>()] = to_json(kv.second, budget);
    return o;
  }
  if (!n.IsScalar()) return nullptr;
  const std::string t = n.Scalar();
  if (n.Tag() == "!") return t;  // quoted in the YAML: a string
  char* end = nullptr;
  const long long i = std::strtoll(t.c_str(), &end, 10);
  if (!t.empty() && *end == '\0') return int64_t(i);
  const double d = std::strtod(t.c_str(), &end);
  if (!t.empty() && *end == '\0') return d;
  if (t == "true" || t == "false") return t == "true";
  return t;
}

}  // namespace

json yaml_to_json(const YAML::Node& n) {
  int64_t budget = kMaxElements;
  return to_json(n, budget);
}

std::string shown_value(const YAML::Node& n) {
  if (n.IsScalar()) return printable(label_value(yaml_to_json(n)), std::string::npos);
  return printable(MapReader::dump(n), 80);  // aliases stay aliases: linear in the file
}

json config_to_json(const ExperimentConfig& c) {
  json strategies = json::array();
  for (const auto& s : c.strategies) {
    // As resolved, the parameters the label names: loading it back gives the same strategy.
    json j = {{"name", s.name}};
    if (s.resolved)
      j.update(s.shown);
    else
      for (const auto& [k, v] : s.written) j[k] = shown_value(v);
    strategies.push_back(j);
  }
  json out = write_section(top_keys(), c);
  out["model"] = write_section(model_keys(), c.model);
  out["parallel"] = write_section(parallel_keys(), c);
  out["workload"] = write_section(workload_keys(), c.workload);
  out["memory"] = write_section(memory_keys(), c);
  out["strategies"] = strategies;
  if (c.paper.enabled) out["paper"] = write_section(paper_keys(), c.paper);
  if (c.train.enabled) out["train"] = write_section(train_keys(), c.train);
  return out;
}

double WorkloadConfig::intensity(int64_t step, int64_t layer, int64_t layers) const {
  if (schedule == "none" || schedule == "trace") return 1.0;
  const double depth = double(layer + 1) / double(layers);
  const double t = (double(step) - peak_step) / width;
  return depth * (0.15 + 0.85 * std::exp(-t * t));
}

std::string label_value(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_array()) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + label_value(v[i]);
    return s + "]";
  }
  if (v.is_number_float()) {
    // The shortest form that reads back to the same double, with ".0" on whole numbers: 1.0,
    // 1.25, 0.05, 400.0 (Python's repr: an exponent only below 1e-4 or from 1e16), so 1, 1.0 and
    // 1.00 label alike once typed.
    const double d = v.get<double>();
    const bool plain = std::fabs(d) >= 1e-4 && std::fabs(d) < 1e16;
    char buf[40];
    for (int prec = 1; prec <= 17; ++prec) {
      std::snprintf(buf, sizeof buf, "%.*g", prec, d);
      if (std::strtod(buf, nullptr) == d && !(plain && std::strchr(buf, 'e'))) break;
    }
    std::string s = buf;
    if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
    return s;
  }
  return v.dump();  // integers, booleans, null
}

std::string StrategySpec::label() const {
  json params = resolved ? shown : json::object();
  if (!resolved)
    for (const auto& [k, v] : written) params[k] = v.IsScalar() ? yaml_to_json(v) : json(shown_value(v));
  if (params.empty()) return name;
  std::string s = name + "(";
  bool first = true;
  for (const auto& [k, v] : params.items()) {  // nlohmann's objects iterate in key order
    s += (first ? "" : ",") + k + "=" + label_value(v);
    first = false;
  }
  return s + ")";
}

}  // namespace memfine
