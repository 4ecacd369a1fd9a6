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

StrategyInfo drawn(StrategyInfo info, std::string colour, std::string marker) {
  info.colour = std::move(colour), info.marker = std::move(marker);
  return info;
}

StrategyInfo with_counters(StrategyInfo info, std::vector<FieldSpec> counters) {
  info.counters = std::move(counters);
  return info;
}

const std::map<std::string, StrategyInfo>& strategy_registry() { return registry(); }

const FieldSpec* strategy_counter(const std::string& name, const std::string& key) {
  auto it = registry().find(name);
  if (it == registry().end()) return nullptr;
  for (const auto& f : it->second.counters)
    if (f.key == key) return &f;
  return nullptr;
}

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
    problems.push_back({"", "unknown strategy '" + spec.name + "'" + did_you_mean(spec.name, names) +
                                " (`memfine strategies` lists them with their parameters)"});
    return spec;
  }
  StrategySpec out = resolve_params(spec, it->second.params, problems);
  out.role = role_name(it->second.role);
  return out;
}

std::optional<StrategySpec> parse_label(const std::string& label) {
  StrategySpec s;
  const size_t open = label.find('(');
  if (open == std::string::npos) {
    s.name = label;
    return s;
  }
  if (label.back() != ')') return std::nullopt;
  s.name = label.substr(0, open);
  const std::string body = label.substr(open + 1, label.size() - open - 2);
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= body.size(); ++i) {
    if (i < body.size() && (body[i] == '[' || body[i] == '{')) ++depth;
    if (i < body.size() && (body[i] == ']' || body[i] == '}')) --depth;
    if (i < body.size() && !(body[i] == ',' && depth == 0)) continue;
    const std::string part = body.substr(start, i - start);
    const size_t eq = part.find('=');
    if (eq == std::string::npos) return std::nullopt;
    try {
      s.written[part.substr(0, eq)] = YAML::Load(part.substr(eq + 1));
    } catch (const YAML::Exception&) {
      return std::nullopt;
    }
    start = i + 1;
  }
  return s;
}

std::string canonical_label(const std::string& label, const std::string& name, const nlohmann::json& params) {
  std::optional<StrategySpec> spec;
  if (!name.empty() && params.is_object()) {
    StrategySpec s;
    s.name = name;
    for (const auto& [k, v] : params.items()) s.written[k] = YAML::Load(v.dump());
    spec = s;
  } else {
    spec = parse_label(label);
  }
  if (!spec) return label;
  std::vector<ParamProblem> problems;
  const StrategySpec resolved = resolve_strategy(*spec, problems);
  return problems.empty() ? resolved.label() : label;
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
