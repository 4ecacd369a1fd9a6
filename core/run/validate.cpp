#include "core/run/validate.h"

#include <algorithm>
#include <fstream>
#include <iostream>
#include <set>

#include <nlohmann/json.hpp>

#include "core/model/model.h"
#include "core/moe/fused.h"
#include "core/record/environment.h"
#include "core/strategy/strategy.h"
#include "core/workload/workload.h"

namespace memfine {
namespace {

struct Problems {
  std::vector<std::string>& out;
  void add(const ExperimentConfig& c, const std::string& key, const std::string& msg) {
    const std::string s = c.where(key) + ": " + key + ": " + msg;
    if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);  // once, not once per point
  }
};

void check_strategies(const ExperimentConfig& c, Problems& p, bool parsed) {
  std::vector<std::string> names;
  for (const auto& [n, info] : strategy_registry()) names.push_back(n);
  for (size_t i = 0; i < c.strategies.size(); ++i) {
    const StrategySpec& spec = c.strategies[i];
    const std::string path = "strategies[" + std::to_string(i) + "]";
    auto it = strategy_registry().find(spec.name);
    if (it == strategy_registry().end()) {
      p.add(c, path + ".name", "unknown strategy '" + spec.name + "'" + did_you_mean(spec.name, names));
      continue;
    }
    std::vector<std::string> known;
    for (const auto& prm : it->second.params) known.push_back(prm.name);
    bool ok = true;
    for (const auto& [k, v] : spec.params)
      if (std::find(known.begin(), known.end(), k) == known.end()) {
        p.add(c, path + "." + k, "unknown parameter of '" + spec.name + "'" + did_you_mean(k, known));
        ok = false;
      }
    if (!ok || !parsed) continue;
    try {
      it->second.make(spec);  // a strategy checks its own values when it is made
      if (it->second.check_point) it->second.check_point(spec, c);
    } catch (const std::exception& e) {
      p.add(c, path, spec.label() + ": " + e.what());
    }
  }
}

// The cost model must be readable and fitted on this machine: step times do not carry over.
void check_cost_model(const ExperimentConfig& c, Problems& p, bool runnable_here) {
  std::ifstream in(c.cost_model);
  if (!in) {
    p.add(c, "cost_model", "cannot read '" + c.cost_model + "' (scripts/fit-cost-model fits one on this machine)");
    return;
  }
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    p.add(c, "cost_model", "'" + c.cost_model + "' is not a cost model (" + e.what() + ")");
    return;
  }
  const std::string fitted_on = j.value("context", nlohmann::json::object()).value("cpu_model", "");
  if (fitted_on.empty())
    std::cerr << c.where("cost_model") << ": cost_model: warning: '" << c.cost_model
              << "' does not name the machine it was fitted on (refit with scripts/fit-cost-model)\n";
  else if (runnable_here && c.device == "cpu" && fitted_on != cpu_name())  // the file is valid; this machine is not its
    p.add(c, "cost_model", "fitted on another machine (" + fitted_on + "; this is " + cpu_name() +
                               "): refit with scripts/fit-cost-model");
}

}  // namespace

std::vector<SweepPoint> load_and_validate(const std::string& path, std::vector<std::string>& errors,
                                          bool runnable_here) {
  std::vector<SweepPoint> points = load_experiment(path, errors);
  // Names are checked whatever else is wrong; what reads sizes only when the YAML parsed cleanly.
  const bool parsed = errors.empty();
  Problems p{errors};
  const std::vector<std::string> kinds = workload_kinds();
  std::set<std::string> cost_models;
  for (auto& pt : points) {
    ExperimentConfig& c = pt.config;
#ifndef MEMFINE_TORCH_CUDA
    if (c.device == "cuda" && runnable_here)
      p.add(c, "device", "this build's LibTorch has no CUDA (build against PyTorch's: scripts/gpu-build)");
#endif
    if (c.kernels == "fused" && !fused_kernels_available(c.device) && runnable_here)
      p.add(c, "kernels", "this build has no CUDA kernels (build on the GPU machine with scripts/gpu-build)");
    if (c.kernels == "auto") c.kernels = c.device == "cuda" && fused_kernels_available(c.device) ? "fused" : "aten";
    if (std::find(kinds.begin(), kinds.end(), c.workload.kind) == kinds.end()) {
      std::string list;
      for (const auto& k : kinds) list += (list.empty() ? "" : ", ") + k;
      p.add(c, "workload.kind", "'" + c.workload.kind + "' is not one of " + list + did_you_mean(c.workload.kind, kinds));
    }
    check_strategies(c, p, parsed);
    if (!parsed || !errors.empty()) continue;
    // Read once per file, not once per point.
    if (!c.cost_model.empty() && cost_models.insert(c.cost_model).second) check_cost_model(c, p, runnable_here);
    // Sizes are each bounded (experiments/README.md), their products are not: refuse what int64
    // byte counts cannot hold before computing any.
    const ModelConfig& m = c.model;
    const double params = double(m.layers) * ((double(m.experts / c.ep) + double(m.shared_experts)) * 3.0 * double(m.hidden) *
                                                  double(m.ffn_hidden) +
                                              4.0 * double(m.hidden) * double(m.heads) * double(m.head_dim) +
                                              double(m.hidden) * double(m.experts));
    if (params * 8 * 4 > 4.0e18) {
      p.add(c, "model", "about " + std::to_string(int64_t(params / 1e9)) + " billion parameters on one rank: too large to size");
      continue;
    }
    const int64_t floor = static_bytes_lower_bound(c);
    if (c.budget >= 0 && c.budget < floor)
      p.add(c, "memory.budget", "the budget (" + std::to_string(c.budget) +
                                    " bytes) is below the static memory of parameters, gradients, optimizer state and inputs (" +
                                    std::to_string(floor) + " bytes)");
    try {
      validate_workload(c.workload, c.model, c.ep, c.train.enabled);
    } catch (const std::exception& e) {
      p.add(c, "workload", e.what());
    }
  }
  return points;
}

}  // namespace memfine
