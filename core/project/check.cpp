#include "core/project/check.h"

#include <algorithm>
#include <set>

#include "core/project/pipeline.h"
#include "core/project/rates.h"
#include "core/strategy/registry.h"
#include "core/util/format.h"
#include "core/workload/workload.h"

namespace memfine {

namespace {

// The experiment a strategy's point check sees: the model at the search's smallest micro-batch,
// under a budget (the projection sizes against the GPU's memory).
ExperimentConfig as_experiment(const ProjectConfig& c) {
  ExperimentConfig e;
  e.model = c.model;
  if (!c.search.micro_batch.empty())
    e.model.micro_batch = *std::min_element(c.search.micro_batch.begin(), c.search.micro_batch.end());
  e.budget = 1;
  return e;
}

// The routing as an experiment's workload refuses it.
void check_routing(const ProjectConfig& c, Problems& p) {
  if (c.overload > 0) return;  // given outright: its range was checked
  const std::vector<std::string> kinds = workload_kinds();
  if (std::find(kinds.begin(), kinds.end(), c.imbalance.kind) == kinds.end() || c.imbalance.kind == "router") {
    p.add_at(c.where("imbalance"), "imbalance.kind",
             c.imbalance.kind == "router"
                 ? "'router' decides at run time from a trained router: project a law (zipf, lognormal, hot), a "
                   "trace of one (`memfine train --trace-out`) or {overload: X}"
                 : "'" + c.imbalance.kind + "' is not one of balanced, zipf, lognormal, hot, trace");
    return;
  }
  try {
    validate_workload(c.imbalance, c.model, 1, false);
  } catch (const std::exception& e) {
    p.add_at(c.where("imbalance"), "imbalance", e.what());
  }
}

// A framework value whose default is written -1: -1 or within its range, nothing between; and a
// value that only applies beside another.
void check_framework(const ProjectConfig& c, Problems& p) {
  const FrameworkConfig& f = c.framework;
  const std::pair<const char*, double> defaults[] = {
      {"workspace_gb", f.workspace_gb}, {"fragmentation", f.fragmentation}, {"ep_overlap_hidden", f.ep_overlap_hidden}};
  for (const auto& [key, v] : defaults)
    if (v < 0 && v != -1)
      p.add_at(c.where(std::string("framework.") + key), std::string("framework.") + key,
               "-1 (the framework's) or at least 0, got " + std::to_string(v));
  // FP8 is priced in Megatron-Core's terms (profile_megatron.cpp), at a preset's measured ratio.
  if (c.precision != "bf16" && f.name != Framework::MegatronTe)
    p.add_at(c.where("precision"), "precision",
             c.precision + " is priced for framework megatron_te only (what its linears keep in FP8), not " +
                 std::string(name_of(f.name)));
  if (const Fp8Recipe* r = fp8_recipe(c.precision); r && (c.hardware.*r->curve).empty())
    p.add_at(c.where("precision"), "precision",
             c.precision + " needs the hardware preset's " + r->key +
                 " (FP8 over bf16 GEMM rates measured at the same shapes); " + c.hardware.name + " has none");
  // FlexAttention's rate is taken where it was measured, never stretched to another head dim.
  const auto& flex = c.hardware.flex_attention_head_dim_curve;
  const double head_dim = double(c.model.head_dim);
  if (f.flex_attention && (flex.empty() || head_dim < flex.front().first || head_dim > flex.back().first)) {
    std::string measured;
    for (const auto& [dim, rate] : flex) measured += (measured.empty() ? "" : ", ") + four_digits(dim);
    p.add_at(c.where("framework.flex_attention"), "framework.flex_attention",
             "needs FlexAttention measured at the model's head dim " + std::to_string(c.model.head_dim) +
                 " (the hardware preset's flex_attention_head_dim_curve); " + c.hardware.name +
                 (flex.empty() ? " has none" : " has it at head dims " + measured));
  }
  // Megatron overlaps the all-to-alls of its alltoall and flex dispatchers alone.
  if (f.ep_overlap && c.dispatcher == Dispatcher::AllGather)
    p.add_at(c.where("framework.ep_overlap"), "framework.ep_overlap",
             "Megatron overlaps the alltoall and flex dispatchers' all-to-alls (deepep, hybridep), not the "
             "allgather dispatcher's collectives");
  // Expert TP is priced in Megatron-Core's terms (its dispatcher's gather over the ETP group).
  const auto& etps = c.search.etp;
  if (c.framework.name != Framework::MegatronTe &&
      std::any_of(etps.begin(), etps.end(), [](int64_t e) { return e > 1; }))
    p.add_at(c.where("search.etp"), "search.etp",
             "expert TP above 1 is priced for megatron_te alone (its --expert-tensor-parallel-size); " +
                 name_of(c.framework.name) + " keeps each expert whole on a GPU");
  // The compiled loss is torchtitan's, and only `loss: auto` reads it; a loss the file names wins.
  if (f.compile_loss && f.name != Framework::Torchtitan)
    p.add_at(c.where("framework.compile_loss"), "framework.compile_loss",
             "is torchtitan's (its [compile] components naming the loss); " + name_of(f.name) +
                 "'s loss is its own: say what it holds with framework.loss");
  else if (f.compile_loss && f.loss != Loss::Auto)
    p.add_at(c.where("framework.compile_loss"), "framework.compile_loss",
             "picks the loss under `loss: auto`, but framework.loss names " + std::string(name_of(f.loss)) +
                 ", which wins: it would do nothing");
  if (f.ep_overlap_hidden >= 0 && !f.ep_overlap)
    p.add_at(c.where("framework.ep_overlap_hidden"), "framework.ep_overlap_hidden",
             "says how much of the all-to-all hides with `ep_overlap: true`, which is not set: it would do nothing");
}

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
      // What an experiment refuses of it at this model, refused here alike (a chunk count above the
      // tokens, a per-layer plan of another length). Warnings are an experiment's.
      const StrategyInfo& info = strategy_registry().at(resolved.name);
      if (info.check_point) info.check_point(resolved, as_experiment(c));
    } catch (const std::exception& e) {
      p.add_at(c.where(path), path, resolved.label() + ": " + e.what());
    }
  }
}

}  // namespace

ProjectConfig load_project(const std::string& file, const std::string& presets_dir) {
  std::vector<std::string> problems;
  ProjectConfig c = parse_project(file, presets_dir, problems);
  const bool parsed = problems.empty();
  Problems p{file, problems};
  check_strategies(c, p);
  check_routing(c, p);
  check_framework(c, p);
  if (!c.reliability.empty()) {
    try {
      reliability_preset(c.reliability);
    } catch (const std::invalid_argument& e) {
      p.add_at(c.where("reliability"), "reliability", e.what());
    }
  }
  // Consecutive experts give every expert the same rows: no imbalance law or overload beside them.
  if (c.expert_choice == ExpertChoice::Consecutive && (c.overload > 1 || (c.overload <= 0 && c.imbalance.kind != "balanced")))
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
  s.consecutive_experts = c.expert_choice == ExpertChoice::Consecutive;
  s.pipeline_layout = c.pipeline_layout;
  s.framework = framework_setting(c);
  s.errors = c.errors;
  s.element_bytes = c.dtype == "float32" ? 4 : 2;
  s.fp8 = c.precision != "bf16";
  s.precision = c.precision;
  return s;
}

}  // namespace memfine
