#include "core/config/reader.h"

#include "core/config/config.h"
#include "core/util/format.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>

namespace memfine {

namespace {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t prev = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t cur = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, prev + (a[i - 1] != b[j - 1])});
      prev = cur;
    }
  }
  return row[b.size()];
}

}  // namespace

std::string did_you_mean(const std::string& key, const std::vector<std::string>& known) {
  std::string best;
  size_t best_d = 3;  // suggest only close names
  for (const auto& k : known) {
    size_t d = edit_distance(key, k);
    if (d < best_d) best_d = d, best = k;
  }
  return best.empty() ? "" : " (did you mean '" + best + "'?)";
}

void Problems::add(const YAML::Node& at, const std::string& path, const std::string& msg) {
  int line = at.IsDefined() && at.Mark().line >= 0 ? at.Mark().line + 1 : 1;
  if (!(at.IsDefined() && at.Mark().line >= 0) && sweep_lines.count(path)) line = sweep_lines.at(path);
  add_at(file + ":" + std::to_string(line), path, msg);
}

void Problems::add_at(const std::string& where, const std::string& path, const std::string& msg) {
  // What a file's bytes put in the message is shown, not obeyed (a NUL would end it early).
  const std::string s = printable(where + ": " + path + ": " + msg, std::string::npos);
  for (const auto& e : out)
    if (e == s) return;  // the same problem in many sweep points is reported once
  out.push_back(s);
}

MapReader::MapReader(const YAML::Node& node, std::string path, Problems& p)
    : node_(node), path_(std::move(path)), p_(p) {
  if (node_.IsDefined() && !node_.IsNull() && !node_.IsMap())
    p_.add(node_, path_.empty() ? "(top)" : path_, "must be a map");
  if (!node_.IsMap()) return;
  // yaml-cpp keeps the first of two equal keys: a second `model:` would silently lose a block.
  std::map<std::string, int> seen;
  for (const auto& kv : node_) {
    if (!kv.first.IsScalar()) {
      p_.add(kv.first, path_.empty() ? "(top)" : path_, "keys must be plain names");
      continue;
    }
    const std::string k = kv.first.Scalar();
    const int line = kv.first.Mark().line + 1;
    if (!seen.emplace(k, line).second)
      p_.add(kv.first, key(k), "given twice (also at line " + std::to_string(seen[k]) + ")");
  }
}

YAML::Node MapReader::child(const std::string& k) {
  known_.push_back(k);
  if (!node_.IsMap()) return YAML::Node();
  YAML::Node n = node_[k];
  if (n.IsDefined() && p_.lines && n.Mark().line >= 0) (*p_.lines)[key(k)] = n.Mark().line + 1;
  return n;
}

void MapReader::read_int(const std::string& k, int64_t& dst, int64_t lo, int64_t hi) {
  read_value(k, dst, [&](const YAML::Node& n) { return int_value(n, lo, hi); });
}

void MapReader::read_number(const std::string& k, double& dst, double lo, double hi) {
  read_value(k, dst, [&](const YAML::Node& n) { return number_value(n, lo, hi); });
}

void MapReader::read_choice(const std::string& k, std::string& dst, const std::vector<std::string>& allowed) {
  read_value(k, dst, [&](const YAML::Node& n) { return choice_value(n, allowed); });
}

void MapReader::read_bytes(const std::string& k, int64_t& dst, bool none_ok) {
  YAML::Node b = child(k);
  if (!b.IsDefined() || b.IsNull()) return;
  try {
    const std::string text = b.as<std::string>();
    dst = none_ok && text == "none" ? -1 : parse_bytes(text);
  } catch (const std::exception& e) {
    p_.add(b, key(k), e.what());
  }
}

void MapReader::check_unknown() {
  if (!node_.IsMap()) return;
  for (const auto& kv : node_) {
    if (!kv.first.IsScalar()) continue;  // reported when the map was opened
    const std::string k = kv.first.Scalar();
    if (std::find(known_.begin(), known_.end(), k) == known_.end())
      p_.add(kv.first, key(k), "unknown key" + did_you_mean(k, known_));
  }
}

std::string where_in(const std::string& file, const std::map<std::string, int>& lines, const std::string& key) {
  for (std::string k = key;; k = k.substr(0, k.rfind('.'))) {
    auto it = lines.find(k);
    if (it != lines.end()) return file + ":" + std::to_string(it->second);
    if (k.find('.') == std::string::npos) break;
  }
  return file + ":1";
}

bool plain_scalar(const YAML::Node& n) { return n.IsScalar() && MapReader::plain_tag(n); }

std::string range_text(int64_t lo, int64_t hi) { return "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]"; }

std::string range_text(double lo, double hi) {
  std::ostringstream s;
  s << "[" << lo << ", " << hi << "]";
  return s.str();
}

int64_t int_value(const YAML::Node& n, int64_t lo, int64_t hi) {
  const nlohmann::json v = plain_scalar(n) && n.Tag() != "!" ? yaml_to_json(n) : nlohmann::json();
  if (!v.is_number_integer()) throw std::invalid_argument("expected an integer, got '" + shown_value(n) + "'");
  const int64_t i = v.get<int64_t>();
  if (i < lo || i > hi)
    throw std::invalid_argument("must be an integer in " + range_text(lo, hi) + ", got " + std::to_string(i));
  return i;
}

double number_value(const YAML::Node& n, double lo, double hi) {
  const nlohmann::json v = plain_scalar(n) && n.Tag() != "!" ? yaml_to_json(n) : nlohmann::json();
  // YAML's own spellings of the special values, which no setting takes.
  const std::string t = n.IsScalar() ? n.Scalar() : "";
  const bool special = t == ".nan" || t == ".NaN" || t == ".NAN" || t == ".inf" || t == "-.inf" || t == "+.inf" ||
                       t == ".Inf" || t == "-.Inf" || t == ".INF" || t == "-.INF";
  if (!v.is_number() && !special) throw std::invalid_argument("expected a number, got '" + shown_value(n) + "'");
  const double d = special ? std::nan("") : v.get<double>();
  if (!(d >= lo && d <= hi)) {
    std::ostringstream m;
    m << "must be a finite number in " << range_text(lo, hi) << ", got " << (special ? t : label_value(d));
    throw std::invalid_argument(m.str());
  }
  return d;
}

bool bool_value(const YAML::Node& n) {
  const nlohmann::json v = plain_scalar(n) && n.Tag() != "!" ? yaml_to_json(n) : nlohmann::json();
  if (!v.is_boolean()) throw std::invalid_argument("expected true or false, got '" + shown_value(n) + "'");
  return v.get<bool>();
}

std::string choice_value(const YAML::Node& n, const std::vector<std::string>& choices) {
  const std::string v = n.IsScalar() ? n.Scalar() : shown_value(n);
  if (!n.IsScalar() || std::find(choices.begin(), choices.end(), v) == choices.end()) {
    std::string list;
    for (const auto& c : choices) list += (list.empty() ? "" : ", ") + c;
    throw std::invalid_argument("'" + v + "' is not one of " + list + did_you_mean(v, choices));
  }
  return v;
}

std::vector<int64_t> int_list_value(const YAML::Node& n, int64_t lo, int64_t hi) {
  const std::string type = "a non-empty list of integers in " + range_text(lo, hi);
  if (!n.IsSequence() || n.size() == 0 || n.size() > (1u << 16))
    throw std::invalid_argument("expected " + type + ", got '" + shown_value(n) + "'");
  std::vector<int64_t> out;
  for (const auto& item : n) {
    try {
      out.push_back(int_value(item, lo, hi));
    } catch (const std::invalid_argument&) {
      throw std::invalid_argument("must be " + type + ", got '" + shown_value(n) + "'");
    }
  }
  return out;
}

bool MapReader::plain_tag(const YAML::Node& n) {
  const std::string& t = n.Tag();
  return t.empty() || t == "?" || t == "!" || t == "tag:yaml.org,2002:str" || t == "tag:yaml.org,2002:int" ||
         t == "tag:yaml.org,2002:float" || t == "tag:yaml.org,2002:bool" || t == "tag:yaml.org,2002:null";
}

std::string MapReader::dump(const YAML::Node& n) {
  YAML::Emitter e;
  e << YAML::Flow << n;
  return e.c_str();
}

int64_t parse_bytes(const std::string& text) {
  static const std::vector<std::pair<std::string, double>> units = {
      {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0},
      {"KB", 1e3},     {"MB", 1e6},        {"GB", 1e9},           {"TB", 1e12},
      {"B", 1.0}};
  std::string t = text;
  t.erase(std::remove_if(t.begin(), t.end(), ::isspace), t.end());
  double scale = 1.0;
  for (const auto& [u, s] : units) {
    if (t.size() > u.size() && t.compare(t.size() - u.size(), u.size(), u) == 0) {
      t = t.substr(0, t.size() - u.size());
      scale = s;
      break;
    }
  }
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(t, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != t.size() || t.empty())
    throw std::invalid_argument("'" + text + "' is not a size (use bytes or units such as 512MiB, 2GiB)");
  if (!(v > 0) || !std::isfinite(v)) throw std::invalid_argument("must be positive, got '" + text + "'");
  // Beyond 2^62 bytes (4 EiB) a size is a typo, and int64 arithmetic on it overflows.
  if (v * scale >= 4.611686018427388e18) throw std::invalid_argument("'" + text + "' is larger than 4 EiB");
  return static_cast<int64_t>(std::llround(v * scale));
}

}  // namespace memfine
