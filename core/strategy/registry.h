// Strategies by name. A strategy is registered once, in one file, with its parameters (typed,
// with defaults: core/strategy/params.h) and either its shape, which the executor runs, or code
// of its own. `memfine strategies`, validation, the labels that key results and the docs all come
// from the registration; nothing outside a strategy's file names it.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/strategy/params.h"
#include "core/strategy/strategy.h"
#include "core/util/field_spec.h"

namespace memfine {

// A strategy's place in the comparisons, declared where it is registered (the harness never names
// a strategy): `verify: true` checks every dropless strategy against the reference (the plain
// computation), and tables give ratios against the baseline (the paper's).
enum class Role { None, Reference, Baseline };
const char* role_name(Role role);  // "reference", "baseline" or ""

using ShapeFn = std::function<StrategyShape(const StrategySpec&)>;
using MakeFn = std::function<std::unique_ptr<Strategy>(const StrategySpec&)>;
// Checks the strategy against a whole point (chunk count vs tokens): throws what makes it invalid,
// returns a warning ("" none) for what is valid but likely not meant.
using CheckFn = std::function<std::string(const StrategySpec&, const ExperimentConfig&)>;

struct StrategyInfo {
  std::string name, description;
  std::vector<Param> params;
  Role role = Role::None;
  ShapeFn shape;  // declared as a shape: the executor runs it
  MakeFn make;    // or code of its own (throws on values that do not go together)
  CheckFn check_point;
  // The counters its records carry (Strategy::record_counters), declared as the record schema's
  // fields are (core/record/schema.h): `memfine schema` lists them, the runner refuses one undeclared.
  std::vector<FieldSpec> counters;
  // How figures draw it: its family's colour and marker, the same in every figure
  // (scripts/plots/style.py reads them from `memfine schema --json`).
  std::string colour = "", marker = "";
};

// A strategy that is its shape.
StrategyInfo shaped(std::string name, std::string description, std::vector<Param> params, ShapeFn shape,
                    Role role = Role::None);
// A strategy with code of its own.
StrategyInfo coded(std::string name, std::string description, std::vector<Param> params, MakeFn make,
                   CheckFn check_point = {});

// The same over typed parameters (ParamsOf): `shape(const P&)` builds the shape, `make(spec, P)`
// the strategy, `check(P, config)` checks a point as CheckFn does.
template <class P, class F>
StrategyInfo shaped(std::string name, std::string description, ParamsOf<P> params, F shape, Role role = Role::None) {
  ShapeFn fn = [params, shape](const StrategySpec& s) { return StrategyShape(shape(params.parse(s))); };
  return shaped(std::move(name), std::move(description), params.params(), std::move(fn), role);
}
template <class P, class F>
StrategyInfo coded(std::string name, std::string description, ParamsOf<P> params, F make) {
  MakeFn fn = [params, make](const StrategySpec& s) { return make(s, params.parse(s)); };
  return coded(std::move(name), std::move(description), params.params(), std::move(fn));
}
template <class P, class F>
StrategyInfo checked(StrategyInfo info, ParamsOf<P> params, F check) {
  info.check_point = [params, check](const StrategySpec& s, const ExperimentConfig& c) {
    return std::string(check(params.parse(s), c));
  };
  return info;
}

// The same with its counters declared.
StrategyInfo with_counters(StrategyInfo info, std::vector<FieldSpec> counters);
// The same with how figures draw it: a colour ("#1f77b4") and a matplotlib marker ("s").
StrategyInfo drawn(StrategyInfo info, std::string colour, std::string marker);

const std::map<std::string, StrategyInfo>& strategy_registry();
// The counter `key` of strategy `name` as it declares it; nullptr where it does not.
const FieldSpec* strategy_counter(const std::string& name, const std::string& key);
bool register_strategy(StrategyInfo info);
// The registered strategy of a role ("" when none is).
std::string strategy_of_role(Role role);
// `spec` typed by its strategy's declared parameters (StrategySpec::resolved and its role set on
// success); problems are appended (an unknown strategy is one, key "").
StrategySpec resolve_strategy(const StrategySpec& spec, std::vector<ParamProblem>& problems);
// A label as records write it, "name(k=v,k=[a,b])", read back into its name and written
// parameters; nullopt when it does not read so.
std::optional<StrategySpec> parse_label(const std::string& label);
// The label this build gives a strategy written as `label`, or by its `name` and `params` (a
// record's typed fields, when given): labels written before they were canonical
// (`memfine(bins=[1, 2, 4, 8],chunks=auto)`) resolve to today's (`memfine(chunks=auto)`). A strategy
// this build does not know keeps its label.
std::string canonical_label(const std::string& label, const std::string& name = "",
                            const nlohmann::json& params = nlohmann::json());

// Resolves `spec` if it is not yet (std::invalid_argument naming the first problem), then makes it.
std::unique_ptr<Strategy> make_strategy(const StrategySpec& spec);

#define MEMFINE_CONCAT_(a, b) a##b
#define MEMFINE_CONCAT(a, b) MEMFINE_CONCAT_(a, b)
#define MEMFINE_REGISTER_STRATEGY(...) \
  static const bool MEMFINE_CONCAT(memfine_registered_, __LINE__) = ::memfine::register_strategy(__VA_ARGS__)

}  // namespace memfine
