#include "core/run/validate.h"

#include "core/config/reader.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "core/dist/dist.h"
#include "core/model/model.h"
#include "core/moe/fused.h"
#include "core/record/environment.h"
#include "core/strategy/registry.h"
#include "core/workload/corpus.h"
#include "core/workload/workload.h"

namespace memfine {
namespace {

void add(Problems& p, const ExperimentConfig& c, const std::string& key, const std::string& msg) {
  p.add_at(c.where(key), key, msg);
}

// Warnings are said once per job: by `memfine launch` before it starts ranks, or by rank 0 of a job
// another launcher started.
bool says_warnings() {
  const JobPlace place = job_place();
  return !place.launched || (place.rank == 0 && !std::getenv("MEMFINE_LAUNCHER"));
}

// Bounds on what a file may ask to size, so that predict needs at most ~1 GiB and seconds on any
// file that validates (experiments/README.md, "Limits"): DeepSeek-V3 is 61 x 256 expert-layers.
constexpr double kMaxExpertLayers = double(1 << 22);
constexpr double kMaxRoutedExpertLayers = double(1 << 26);
constexpr double kMaxSweepWork = double(1 << 28);

// Resolves each strategy against its declaration (typed values, the canonical label) in place, and
// checks it against the point: values when the strategy is made, the rest by its check_point.
// Warnings by where and what, with the points that gave them.
using Warnings = std::map<std::pair<std::string, std::string>, int64_t>;

void check_strategies(ExperimentConfig& c, Problems& p, bool parsed, Warnings& warned) {
  std::map<std::string, size_t> labels;
  for (size_t i = 0; i < c.strategies.size(); ++i) {
    StrategySpec& spec = c.strategies[i];
    const std::string path = "strategies[" + std::to_string(i) + "]";
    std::vector<ParamProblem> problems;
    const StrategySpec resolved = resolve_strategy(spec, problems);
    for (const auto& pr : problems) add(p, c, pr.key.empty() ? path + ".name" : path + "." + pr.key, pr.message);
    if (!problems.empty()) continue;
    spec = resolved;
    // By the canonical label: `memfine` and `{name: memfine, chunks: 1}` are one strategy.
    const auto [at, fresh] = labels.emplace(spec.label(), i);
    if (!fresh)
      add(p, c, path, "'" + spec.label() + "' is listed twice (also strategies[" + std::to_string(at->second) + "])");
    if (!parsed) continue;
    try {
      const StrategyInfo& info = strategy_registry().at(spec.name);
      const auto made = make_strategy(spec);  // a strategy checks how its values go together when it is made
      const OffloadSpec& off = made->shape().offload;
      if (c.attention_kernel == "sdpa" &&
          (off.has(Module::QkvLinear) || off.has(Module::CoreAttn) || off.has(Module::AttnProj)))
        add(p, c, path,
            spec.label() +
                ": offloads or encodes attention's saved tensors, which sdpa keeps otherwise than the "
                "memory model prices them: run it with attention_kernel: eager");
      const std::string warning = info.check_point ? info.check_point(spec, c) : "";
      if (!warning.empty()) ++warned[{c.where(path) + ": " + path, spec.label() + ": " + warning}];
    } catch (const std::exception& e) {
      add(p, c, path, spec.label() + ": " + e.what());
    }
  }
}

// The cost model must be readable and fitted on this machine: step times do not carry over.
void check_cost_model(const ExperimentConfig& c, Problems& p, bool runnable_here) {
  std::ifstream in(c.cost_model);
  if (!in) {
    add(p, c, "cost_model", "cannot read '" + c.cost_model + "' (scripts/fit-cost-model fits one on this machine)");
    return;
  }
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    add(p, c, "cost_model", "'" + c.cost_model + "' is not a cost model (" + e.what() + ")");
    return;
  }
  const std::string fitted_on = j.value("context", nlohmann::json::object()).value("cpu_model", "");
  if (fitted_on.empty())
    std::cerr << c.where("cost_model") << ": cost_model: warning: '" << c.cost_model
              << "' does not name the machine it was fitted on (refit with scripts/fit-cost-model)\n";
  else if (runnable_here && c.device == "cpu" && fitted_on != cpu_name())  // the file is valid; this machine is not its
    add(p, c, "cost_model",
        "fitted on another machine (" + fitted_on + "; this is " + cpu_name() + "): refit with scripts/fit-cost-model");
}

}  // namespace

std::vector<SweepPoint> load_and_validate(const std::string& path, std::vector<std::string>& errors,
                                          bool runnable_here) {
  std::vector<SweepPoint> points = load_experiment(path, errors);
  // Names are checked whatever else is wrong; what reads sizes only when the YAML parsed cleanly.
  const bool parsed = errors.empty();
  Problems p{path, errors};
  const std::vector<std::string> kinds = workload_kinds();
  std::set<std::string> cost_models;
  Warnings warned;
  std::set<std::pair<std::string, int64_t>> corpora;
  double sweep_work = 0;
  for (auto& pt : points) {
    ExperimentConfig& c = pt.config;
#ifndef MEMFINE_TORCH_CUDA
    if (c.device == "cuda" && runnable_here)
      add(p, c, "device", "this build's LibTorch has no CUDA (build against PyTorch's: scripts/gpu-build)");
#endif
    if (c.kernels == "fused" && !fused_kernels_available(c.device) && runnable_here)
      add(p, c, "kernels", "this build has no CUDA kernels (build on the GPU machine with scripts/gpu-build)");
    // Not to run here (predict): auto is what a GPU build would choose, so that its predictions are
    // the ones that build's records carry.
    if (c.graphs != "none") {
      if (c.device != "cuda") add(p, c, "graphs", "CUDA graphs need device: cuda");
      if (c.workload.schedule != "none" || c.workload.kind == "router")
        add(p, c, "graphs", "a captured step replays one routing: the workload must route every step alike (no "
                            "schedule, not the router's own)");
      if (c.train.enabled) add(p, c, "graphs", "memfine train runs its steps eagerly");
    }
    if (c.attention_kernel == "sdpa") {
      if (c.model.attention != "gqa")
        add(p, c, "attention_kernel",
            "sdpa runs grouped-query attention; model.attention is '" + c.model.attention + "'");
      if (c.dtype == "float64")
        add(p, c, "attention_kernel",
            "sdpa's fused kernels take float32 and bfloat16 (float64 would run its unfused "
            "fallback, whose memory the model does not price)");
      if (runnable_here && !fused_attention_available())
        add(p, c, "attention_kernel",
            "this build's LibTorch (1.x) has no scaled_dot_product_attention: build against "
            "LibTorch 2.x (scripts/gpu-build on a GPU, scripts/check-libtorch2 here)");
    }
    if (c.kernels == "auto")
      c.kernels = c.device == "cuda" && (fused_kernels_available(c.device) || !runnable_here) ? "fused" : "aten";
    if (std::find(kinds.begin(), kinds.end(), c.workload.kind) == kinds.end()) {
      std::string list;
      for (const auto& k : kinds) list += (list.empty() ? "" : ", ") + k;
      add(p, c, "workload.kind",
          "'" + c.workload.kind + "' is not one of " + list + did_you_mean(c.workload.kind, kinds));
    }
    check_strategies(c, p, parsed, warned);
    if (!parsed || !errors.empty()) continue;
    // Read once per file, not once per point.
    if (!c.cost_model.empty() && cost_models.insert(c.cost_model).second) check_cost_model(c, p, runnable_here);
    // Sizes are each bounded (experiments/README.md), their products are not: refuse what int64
    // byte counts cannot hold before computing any.
    const ModelConfig& m = c.model;
    const double params =
        double(m.layers) *
        ((double(m.experts / c.ep) + double(m.shared_experts)) * 3.0 * double(m.hidden) * double(m.ffn_hidden) +
         4.0 * double(m.hidden) * double(m.heads) * double(m.head_dim) + double(m.hidden) * double(m.experts));
    if (params * 8 * 4 > 4.0e18) {
      add(p, c, "model",
          "about " + std::to_string(int64_t(params / 1e9)) + " billion parameters on one rank: too large to size");
      continue;
    }
    // What sizing the routing costs (memfine predict, and run's routing per step): in proportion
    // to the layers' experts, per routed step under a schedule, over every point of the sweep.
    const double expert_layers = double(m.layers) * double(m.experts);
    const double routed_steps = c.workload.schedule == "none" ? 1.0 : double(c.warmup + c.repeats);
    if (expert_layers > kMaxExpertLayers) {
      add(p, c, "model",
          "layers x experts is " + std::to_string(int64_t(expert_layers)) + ", more than " +
              std::to_string(int64_t(kMaxExpertLayers)) + " expert-layers to route and size");
      continue;
    }
    if (expert_layers * routed_steps > kMaxRoutedExpertLayers) {
      add(p, c, "repeats",
          "a schedule routes every step: (warmup + repeats) x layers x experts is " +
              std::to_string(int64_t(expert_layers * routed_steps)) + ", more than " +
              std::to_string(int64_t(kMaxRoutedExpertLayers)));
      continue;
    }
    sweep_work += expert_layers * routed_steps * double(c.strategies.size());
    const int64_t floor = static_bytes_lower_bound(c);
    if (c.budget >= 0 && c.budget < floor)
      add(p, c, "memory.budget",
          "the budget (" + std::to_string(c.budget) +
              " bytes) is below the static memory of parameters, gradients, optimizer state and inputs (" +
              std::to_string(floor) + " bytes)");
    try {
      validate_workload(c.workload, c.model, c.ep, c.train.enabled);
    } catch (const std::exception& e) {
      add(p, c, "workload", e.what());
    }
    // Read once per file: a corpus that cannot hold one sequence fails here, not at the first step
    // that samples it.
    if (c.train.enabled && runnable_here && corpora.insert({c.train.corpus, c.model.seq}).second)
      if (const std::string why = corpus_problem(c.train.corpus, c.model.seq); !why.empty())
        add(p, c, "train.corpus", why);
  }
  // What is valid but likely not meant, said where every point of the sweep gives it: a sweep that
  // sets it apart at some points (a budget swept from none) means it.
  if (says_warnings())
    for (const auto& [where_what, n] : warned)
      if (n == int64_t(points.size()))
        std::cerr << where_what.first << ": warning: " << where_what.second << "\n";
  if (sweep_work > kMaxSweepWork && errors.empty() && !points.empty())
    p.add_at(points.front().config.where("sweep"), "sweep",
             "the sweep's points x strategies x layers x experts (x routed steps) is " +
                 std::to_string(int64_t(sweep_work)) + ", more than " + std::to_string(int64_t(kMaxSweepWork)) +
                 " to size: split the experiment");
  return points;
}

}  // namespace memfine
