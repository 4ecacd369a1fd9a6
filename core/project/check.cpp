#include "core/project/check.h"

#include <set>

#include "core/project/pipeline.h"
#include "core/strategy/registry.h"

namespace memfine {

namespace {

void check_strategies(ProjectConfig& c, Problems& p) {
  if (c.strategies.empty())
    for (const auto& [name, info] : strategy_registry()) c.strategies.push_back(StrategySpec{name});
  std::set<std::string> labels;
  for (size_t i = 0; i < c.strategies.size(); ++i) {
    const std::string path = "strategies[" + std::to_string(i) + "]";
    std::vector<ParamProblem> problems;
    const StrategySpec resolved = resolve_strategy(c.strategies[i], problems);
    for (const auto& pr : problems)
      p.add_at(c.where(path), pr.key.empty() ? path : path + "." + pr.key,
               pr.message + (pr.key.empty() ? " (memfine strategies lists them)" : ""));
    if (!problems.empty()) continue;
    c.strategies[i] = resolved;
    if (!labels.insert(resolved.label()).second)
      p.add_at(c.where(path), path, "'" + resolved.label() + "' is listed twice");
    try {
      make_strategy(resolved);
    } catch (const std::exception& e) {
      p.add_at(c.where(path), path, resolved.label() + ": " + e.what());
    }
  }
  // Published figures by the label their strategy has here.
  std::map<std::string, std::map<std::string, double>> published;
  for (const auto& [label, values] : c.published) {
    const std::string key = "published." + label;
    StrategySpec spec = parse_label(label).value_or(StrategySpec{label});
    std::vector<ParamProblem> problems;
    const StrategySpec resolved = resolve_strategy(spec, problems);
    if (!problems.empty() || !labels.count(resolved.label())) {
      p.add_at(c.where(key), key,
               "'" + label + "' is not one of the file's strategies" +
                   (problems.empty() ? "" : " (" + problems.front().message + ")"));
      continue;
    }
    published[resolved.label()] = values;
  }
  c.published = published;
}

}  // namespace

ProjectConfig load_project(const std::string& file, const std::string& presets_dir) {
  std::vector<std::string> problems;
  ProjectConfig c = parse_project(file, presets_dir, problems);
  const bool parsed = problems.empty();
  Problems p{file, problems};
  check_strategies(c, p);
  if (!c.reliability.empty()) {
    try {
      reliability_preset(c.reliability);
    } catch (const std::invalid_argument& e) {
      p.add_at(c.where("reliability"), "reliability", e.what());
    }
  }
  // Consecutive experts give every expert the same rows: no imbalance law or overload beside them.
  if (c.expert_choice == "consecutive" && (c.overload > 1 || (c.overload <= 0 && c.imbalance.kind != "balanced")))
    p.add_at(c.where("expert_choice"), "expert_choice",
             "consecutive experts are balanced routing: `imbalance` must be balanced or {overload: 1}");
  if (std::vector<std::string> stages; !c.pipeline_layout.empty())
    if (const std::string why = parse_pipeline_layout(c.pipeline_layout, stages); !why.empty())
      p.add_at(c.where("pipeline_layout"), "pipeline_layout", why);
  if (parsed && !c.hardware.has_rates())
    p.add_at(c.where("hardware"), "hardware",
             "'" + c.hardware.name +
                 "' has no compute rates (gemm_tflops, attention_tflops, grouped_gemm_tflops and "
                 "grouped_gemm_small_tflops, or grouped_gemm_curve): a step time needs them (memfine predict of an "
                 "experiment's paper: section projects memory alone)");
  if (!problems.empty()) {
    std::string all;
    for (const auto& x : problems) all += (all.empty() ? "" : "\n") + x;
    throw std::invalid_argument(all);
  }
  return c;
}

ProjectSetting project_setting(const ProjectConfig& c) {
  ProjectSetting s;
  s.usable_memory = c.usable_memory;
  s.reliability = c.reliability.empty() ? Reliability{"", c.failure_rate / 24000, "written in " + c.file}
                                        : reliability_preset(c.reliability);
  s.restart_h = c.restart_min / 60;
  s.checkpoint_gb_s_per_node = c.checkpoint_gb_s_per_node;
  s.dispatcher = c.dispatcher;
  s.consecutive_experts = c.expert_choice == "consecutive";
  s.pipeline_layout = c.pipeline_layout;
  s.framework = framework_setting(c);
  s.element_bytes = c.dtype == "float32" ? 4 : 2;
  return s;
}

}  // namespace memfine
