#include "core/strategy/params.h"
#include "core/config/reader.h"

#include <cmath>
#include <sstream>
#include <stdexcept>

namespace memfine {

using json = nlohmann::json;

namespace {

std::string shown(const YAML::Node& n) { return label_value(yaml_to_json(n)); }

bool plain_scalar(const YAML::Node& n) {
  if (!n.IsScalar()) return false;
  const std::string& t = n.Tag();
  return t.empty() || t == "?" || t == "!" || t == "tag:yaml.org,2002:str" || t == "tag:yaml.org,2002:int" ||
         t == "tag:yaml.org,2002:float" || t == "tag:yaml.org,2002:bool";
}

std::string range_text(double lo, double hi) {
  std::ostringstream s;
  s << "[" << lo << ", " << hi << "]";
  return s.str();
}
std::string range_text(int64_t lo, int64_t hi) { return "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]"; }

}  // namespace

int64_t read_int(const YAML::Node& n) {
  const json v = plain_scalar(n) && n.Tag() != "!" ? yaml_to_json(n) : json();
  if (!v.is_number_integer()) throw std::invalid_argument("expected an integer, got '" + shown(n) + "'");
  return v.get<int64_t>();
}

double read_number(const YAML::Node& n) {
  const json v = plain_scalar(n) && n.Tag() != "!" ? yaml_to_json(n) : json();
  if (!v.is_number()) throw std::invalid_argument("expected a number, got '" + shown(n) + "'");
  return v.get<double>();
}

Param int_param(std::string name, std::string help, int64_t fallback, int64_t lo, int64_t hi) {
  const std::string type = "an integer in " + range_text(lo, hi);
  auto read = [lo, hi, type](const YAML::Node& n) -> json {
    const int64_t v = read_int(n);
    if (v < lo || v > hi) throw std::invalid_argument("must be " + type + ", got " + std::to_string(v));
    return v;
  };
  return Param{std::move(name), std::move(help), type, read, fallback};
}

Param number_param(std::string name, std::string help, double fallback, double lo, double hi) {
  const std::string type = "a number in " + range_text(lo, hi);
  auto read = [lo, hi, type](const YAML::Node& n) -> json {
    const double v = read_number(n);
    if (!(v >= lo && v <= hi)) throw std::invalid_argument("must be " + type + ", got " + label_value(v));
    return v;  // a double, whether written 1 or 1.0: one label either way
  };
  return Param{std::move(name), std::move(help), type, read, fallback};
}

Param bool_param(std::string name, std::string help, bool fallback) {
  auto read = [](const YAML::Node& n) -> json {
    const json v = plain_scalar(n) && n.Tag() != "!" ? yaml_to_json(n) : json();
    if (!v.is_boolean()) throw std::invalid_argument("expected true or false, got '" + shown(n) + "'");
    return v;
  };
  return Param{std::move(name), std::move(help), "true or false", read, fallback};
}

Param choice_param(std::string name, std::string help, std::string fallback, std::vector<std::string> choices) {
  std::string list;
  for (const auto& c : choices) list += (list.empty() ? "'" : ", '") + c + "'";
  const std::string type = "one of " + list;
  auto read = [choices, type](const YAML::Node& n) -> json {
    const std::string v = n.IsScalar() ? n.Scalar() : shown(n);
    if (!n.IsScalar() || std::find(choices.begin(), choices.end(), v) == choices.end())
      throw std::invalid_argument("'" + v + "' is not " + type + did_you_mean(v, choices));
    return v;
  };
  return Param{std::move(name), std::move(help), type, read, fallback};
}

Param int_list_param(std::string name, std::string help, std::vector<int64_t> fallback, int64_t lo, int64_t hi) {
  const std::string type = "a list of integers in " + range_text(lo, hi);
  auto read = [lo, hi, type](const YAML::Node& n) -> json {
    if (!n.IsSequence()) throw std::invalid_argument("expected " + type + ", got '" + shown(n) + "'");
    json out = json::array();
    for (const auto& item : n) {
      int64_t v = 0;
      try {
        v = read_int(item);
      } catch (const std::invalid_argument&) {
        throw std::invalid_argument("expected " + type + ", got '" + shown(n) + "'");
      }
      if (v < lo || v > hi) throw std::invalid_argument("must be " + type + ", got " + std::to_string(v));
      out.push_back(v);
    }
    return out;
  };
  return Param{std::move(name), std::move(help), type, read, fallback};
}

Param named(Param p) {
  p.named = true;
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
