// A strategy's parameters, declared once: name, help, type, default and range. The declaration
// drives parsing (typed, with the unknown-key check and did-you-mean), the canonical label that
// keys results, `memfine strategies` and the parameter reference in experiments/README.md.
#pragma once
#include <yaml-cpp/yaml.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "core/config/config.h"
#include "core/util/named_enum.h"

namespace memfine {

struct Param {
  std::string name, help;
  std::string type;  // what `read` accepts, as help and errors say it ("an integer in [1, 2^30]")
  // Reads a written value into its canonical JSON; throws std::invalid_argument saying what is wrong.
  std::function<nlohmann::json(const YAML::Node&)> read;
  nlohmann::json fallback;  // the default
  // Named in the label even at its default (capacity's factor, memfine's chunks): what a reader of
  // a table needs to tell the rows apart. Other parameters appear only when they differ from it.
  bool named = false;
  // How a figure says it in words (scripts/plots/names.py): a Python format template of the value
  // `v` ("{v} chunks", "factor {v:g}"; `{modules}` is a list of modules in words), and words for
  // particular values by their label text ("auto": "MACT"; "" says nothing). Empty: "name v".
  std::string phrase;
  std::map<std::string, std::string> phrases;
};

// The common kinds.
Param int_param(std::string name, std::string help, int64_t fallback, int64_t lo, int64_t hi);
Param number_param(std::string name, std::string help, double fallback, double lo, double hi);
Param bool_param(std::string name, std::string help, bool fallback);
Param choice_param(std::string name, std::string help, std::string fallback, std::vector<std::string> choices);
Param int_list_param(std::string name, std::string help, std::vector<int64_t> fallback, int64_t lo, int64_t hi);
// One of an enum's names (core/util/named_enum.h): all of them, or those `allowed`, in its order.
template <class E>
Param enum_param(std::string name, std::string help, E fallback, std::vector<E> allowed = {}) {
  std::vector<std::string> choices;
  for (const auto& [v, n] : EnumNames<E>::all)
    if (allowed.empty() || std::find(allowed.begin(), allowed.end(), v) != allowed.end()) choices.emplace_back(n);
  return choice_param(std::move(name), std::move(help), name_of(fallback), std::move(choices));
}
// The same with `named` set.
Param named(Param p);
// The same with how a figure says it (Param::phrase, Param::phrases).
Param said(Param p, std::string phrase, std::map<std::string, std::string> phrases = {});

// Each value of a written integer, number, boolean or string: YAML's own scalar types only
// (`!!binary 4` or a custom tag is not a number).
int64_t read_int(const YAML::Node& n);
double read_number(const YAML::Node& n);

struct ParamProblem {
  std::string key, message;  // key: the parameter ("" for the strategy as a whole)
};

// Resolves `spec` against `params`: typed values, defaults filled in, the label's parameters.
// Problems (an unknown key, with did-you-mean; a value of the wrong type or out of range) are
// appended; the spec is resolved only when there were none.
StrategySpec resolve_params(const StrategySpec& spec, const std::vector<Param>& params,
                            std::vector<ParamProblem>& problems);

// A parameter bound to where its value goes in a strategy's typed parameters P: declared once,
// read once (ParamsOf::parse), so the strategy's code holds typed fields, not a bag of names.
template <class P>
struct Bound {
  Param param;
  std::function<void(const nlohmann::json&, P&)> set;
};

// `p`'s value into member `m`: an integer, number, boolean, string, list of integers, or an enum
// (by its names).
template <class P, class T>
Bound<P> bind(T P::*m, Param p) {
  return {std::move(p), [m](const nlohmann::json& v, P& out) {
            if constexpr (std::is_enum_v<T>)
              out.*m = *enum_named<T>(v.template get<std::string>());
            else
              out.*m = v.template get<T>();
          }};
}

// `p`'s value through `set`: a value that sets more than one field (recompute: full).
template <class P>
Bound<P> bind(Param p, std::function<void(const nlohmann::json&, P&)> set) {
  return {std::move(p), std::move(set)};
}

// A part's parameter (one of Q's) into P's member `m`; and a group of them (offloading's, the codec's).
template <class P, class Q>
Bound<P> nest(Q P::*m, Bound<Q> b) {
  return {std::move(b.param), [m, set = std::move(b.set)](const nlohmann::json& v, P& p) { set(v, p.*m); }};
}
template <class P, class Q>
std::vector<Bound<P>> nest(Q P::*m, std::vector<Bound<Q>> part) {
  std::vector<Bound<P>> out;
  for (auto& b : part) out.push_back(nest(m, std::move(b)));
  return out;
}

// A strategy's declared parameters with where each goes: the registry takes `params()`, the
// strategy `parse`s a resolved spec into P (defaults in P start, then every declared value).
template <class P>
class ParamsOf {
 public:
  ParamsOf() = default;
  ParamsOf(std::initializer_list<Bound<P>> bound) : bound_(bound) {}
  ParamsOf& add(Bound<P> b) {
    bound_.push_back(std::move(b));
    return *this;
  }
  ParamsOf& add(std::vector<Bound<P>> bs) {
    for (auto& b : bs) bound_.push_back(std::move(b));
    return *this;
  }
  std::vector<Param> params() const {
    std::vector<Param> out;
    for (const auto& b : bound_) out.push_back(b.param);
    return out;
  }
  P parse(const StrategySpec& spec, P start = P{}) const {
    if (!spec.resolved) throw std::logic_error("strategy '" + spec.name + "' parsed before it was resolved");
    for (const auto& b : bound_) b.set(spec.values.at(b.param.name), start);
    return start;
  }

 private:
  std::vector<Bound<P>> bound_;
};

}  // namespace memfine
