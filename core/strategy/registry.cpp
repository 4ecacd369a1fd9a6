#include "core/strategy/registry.h"

#include "core/config/reader.h"

namespace memfine {

namespace {
std::map<std::string, StrategyInfo>& registry() {
  static std::map<std::string, StrategyInfo> r;
  return r;
}
}  // namespace

const char* role_name(Role role) {
  return role == Role::Reference ? "reference" : role == Role::Baseline ? "baseline" : "";
}

StrategyInfo shaped(std::string name, std::string description, std::vector<Param> params, ShapeFn shape, Role role) {
  StrategyInfo info;
  info.name = std::move(name), info.description = std::move(description), info.params = std::move(params);
  info.shape = std::move(shape), info.role = role;
  return info;
}

StrategyInfo coded(std::string name, std::string description, std::vector<Param> params, MakeFn make,
                   CheckFn check_point) {
  StrategyInfo info;
  info.name = std::move(name), info.description = std::move(description), info.params = std::move(params);
  info.make = std::move(make), info.check_point = std::move(check_point);
  return info;
}

const std::map<std::string, StrategyInfo>& strategy_registry() { return registry(); }

bool register_strategy(StrategyInfo info) {
  const std::string name = info.name;
  registry()[name] = std::move(info);
  return true;
}

std::string strategy_of_role(Role role) {
  for (const auto& [name, info] : registry())
    if (info.role == role) return name;
  return "";
}

StrategySpec resolve_strategy(const StrategySpec& spec, std::vector<ParamProblem>& problems) {
  auto it = registry().find(spec.name);
  if (it == registry().end()) {
    std::vector<std::string> names;
    for (const auto& [n, info] : registry()) names.push_back(n);
    problems.push_back({"", "unknown strategy '" + spec.name + "'" + did_you_mean(spec.name, names)});
    return spec;
  }
  StrategySpec out = resolve_params(spec, it->second.params, problems);
  out.role = role_name(it->second.role);
  return out;
}

std::unique_ptr<Strategy> make_strategy(const StrategySpec& spec) {
  if (!spec.resolved) {
    std::vector<ParamProblem> problems;
    const StrategySpec r = resolve_strategy(spec, problems);
    if (!problems.empty())
      throw std::invalid_argument(spec.label() + ": " + (problems[0].key.empty() ? "" : problems[0].key + ": ") +
                                  problems[0].message);
    return make_strategy(r);
  }
  const StrategyInfo& info = registry().at(spec.name);
  if (info.make) return info.make(spec);
  return std::make_unique<Strategy>(spec, info.shape(spec));
}

}  // namespace memfine
