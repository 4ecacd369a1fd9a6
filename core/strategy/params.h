// A strategy's parameters, declared once: name, help, type, default and range. The declaration
// drives parsing (typed, with the unknown-key check and did-you-mean), the canonical label that
// keys results, `memfine strategies` and the parameter reference in experiments/README.md.
#pragma once
#include <yaml-cpp/yaml.h>
#include <nlohmann/json.hpp>

#include <functional>
#include <string>
#include <vector>

#include "core/config/config.h"

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
};

// The common kinds.
Param int_param(std::string name, std::string help, int64_t fallback, int64_t lo, int64_t hi);
Param number_param(std::string name, std::string help, double fallback, double lo, double hi);
Param bool_param(std::string name, std::string help, bool fallback);
Param choice_param(std::string name, std::string help, std::string fallback, std::vector<std::string> choices);
Param int_list_param(std::string name, std::string help, std::vector<int64_t> fallback, int64_t lo, int64_t hi);
// The same with `named` set.
Param named(Param p);

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

}  // namespace memfine
