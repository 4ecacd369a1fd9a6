#include "core/strategy/params.h"
#include "core/config/reader.h"

#include <cmath>
#include <limits>
#include <sstream>
#include <stdexcept>

namespace memfine {

using json = nlohmann::json;

int64_t read_int(const YAML::Node& n) {
  return int_value(n, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max());
}

double read_number(const YAML::Node& n) {
  return number_value(n, -std::numeric_limits<double>::max(), std::numeric_limits<double>::max());
}

// Each kind reads through the one reader of typed values (core/config/reader.h).
Param int_param(std::string name, std::string help, int64_t fallback, int64_t lo, int64_t hi) {
  auto read = [lo, hi](const YAML::Node& n) -> json { return int_value(n, lo, hi); };
  return Param{std::move(name), std::move(help), "an integer in " + range_text(lo, hi), read, fallback};
}

Param number_param(std::string name, std::string help, double fallback, double lo, double hi) {
  // A double, whether written 1 or 1.0: one label either way.
  auto read = [lo, hi](const YAML::Node& n) -> json { return number_value(n, lo, hi); };
  return Param{std::move(name), std::move(help), "a number in " + range_text(lo, hi), read, fallback};
}

Param bool_param(std::string name, std::string help, bool fallback) {
  auto read = [](const YAML::Node& n) -> json { return bool_value(n); };
  return Param{std::move(name), std::move(help), "true or false", read, fallback};
}

Param choice_param(std::string name, std::string help, std::string fallback, std::vector<std::string> choices) {
  std::string list;
  for (const auto& c : choices) list += (list.empty() ? "'" : ", '") + c + "'";
  auto read = [choices](const YAML::Node& n) -> json { return choice_value(n, choices); };
  return Param{std::move(name), std::move(help), "one of " + list, read, fallback};
}

Param int_list_param(std::string name, std::string help, std::vector<int64_t> fallback, int64_t lo, int64_t hi) {
  auto read = [lo, hi](const YAML::Node& n) -> json { return int_list_value(n, lo, hi); };
  return Param{std::move(name), std::move(help), "a list of integers in " + range_text(lo, hi), read, fallback};
}

Param named(Param p) {
  p.named = true;
  return p;
}

Param said(Param p, std::string phrase, std::map<std::string, std::string> phrases) {
  p.phrase = std::move(phrase);
  p.phrases = std::move(phrases);
  return p;
}

StrategySpec resolve_params(const StrategySpec& spec, const std::vector<Param>& params,
                            std::vector<ParamProblem>& problems) {
  StrategySpec out = spec;
  out.values = json::object();
  out.shown = json::object();
  const size_t before = problems.size();
  std::vector<std::string> known;
  for (const auto& p : params) known.push_back(p.name);
  for (const auto& [k, v] : spec.written)
    if (std::find(known.begin(), known.end(), k) == known.end())
      problems.push_back({k, "unknown parameter of '" + spec.name + "'" + did_you_mean(k, known)});
  for (const auto& p : params) {
    json value = p.fallback;
    auto it = spec.written.find(p.name);
    if (it != spec.written.end()) {
      try {
        value = p.read(it->second);
      } catch (const std::invalid_argument& e) {
        problems.push_back({p.name, e.what()});
        continue;
      }
    }
    out.values[p.name] = value;
    if (p.named || value != p.fallback) out.shown[p.name] = value;
  }
  out.resolved = problems.size() == before;
  return out;
}

}  // namespace memfine
