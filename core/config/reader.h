// Reading an experiment's YAML: problems collected as "FILE:LINE: key.path: what is wrong", and
// one YAML map read key by key, typed and range-checked, its unknown keys flagged with did-you-mean.
#pragma once
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace memfine {

// Collects "FILE:LINE: key.path: message" lines.
struct Problems {
  std::string file;
  std::vector<std::string>& out;
  std::map<std::string, int>* lines = nullptr;  // where each key of the config being read is
  std::map<std::string, int> sweep_lines;       // a swept key's line, for keys the sweep created
  void add(const YAML::Node& at, const std::string& path, const std::string& msg);
  // At a place already known ("FILE:LINE": ExperimentConfig::where), for checks after parsing.
  void add_at(const std::string& where, const std::string& path, const std::string& msg);
};

// A written value, typed: the one reader of a key's value, whoever declares the key (a section's
// field, a strategy's parameter, a project's key). YAML's own scalar types only (`!!binary 4` or a
// custom tag is not a number); a quoted scalar is a string. Each throws std::invalid_argument
// saying what is wrong, the value shown as written (aliases kept: never expanded).
bool plain_scalar(const YAML::Node& n);
int64_t int_value(const YAML::Node& n, int64_t lo, int64_t hi);
double number_value(const YAML::Node& n, double lo, double hi);  // finite
bool bool_value(const YAML::Node& n);
std::string choice_value(const YAML::Node& n, const std::vector<std::string>& choices);
std::vector<int64_t> int_list_value(const YAML::Node& n, int64_t lo, int64_t hi);  // non-empty
// The range as messages write it: "[1, 1024]", "[0, 1e+06]".
std::string range_text(int64_t lo, int64_t hi);
std::string range_text(double lo, double hi);

// One YAML map, read typed, remembering which keys it knew so the rest can be flagged.
class MapReader {
 public:
  MapReader(const YAML::Node& node, std::string path, Problems& p);
  std::string key(const std::string& k) const { return path_.empty() ? k : path_ + "." + k; }
  YAML::Node child(const std::string& k);
  Problems& problems() { return p_; }
  // The value of `k` as T; false (and a problem) when it is given but not one. Absent: untouched.
  template <class T>
  bool read(const std::string& k, T& dst, const char* type);
  // An integer in [lo, hi] (kept as it was when out of range: later checks divide by it).
  void read_int(const std::string& k, int64_t& dst, int64_t lo, int64_t hi);
  // A finite number in [lo, hi] (NaN and infinities are refused).
  void read_number(const std::string& k, double& dst, double lo, double hi);
  void read_choice(const std::string& k, std::string& dst, const std::vector<std::string>& allowed);
  // A byte count ("512MiB", "2GiB", "1e9"; `none` when `none_ok`: -1).
  void read_bytes(const std::string& k, int64_t& dst, bool none_ok);
  void check_unknown();
  // Only YAML's own scalar types: `!!binary 256` or a custom tag is not a number.
  static bool plain_tag(const YAML::Node& n);
  // Reads `k` with a value reader above; a problem where it throws. Absent or null: untouched.
  template <class T, class F>
  void read_value(const std::string& k, T& dst, F value);
  static std::string dump(const YAML::Node& n);

 private:
  YAML::Node node_;
  std::string path_;
  Problems& p_;
  std::vector<std::string> known_;
};

template <class T>
bool MapReader::read(const std::string& k, T& dst, const char* type) {
  YAML::Node n = child(k);
  if (!n.IsDefined() || n.IsNull()) return true;
  try {
    if (!n.IsScalar() || !plain_tag(n)) throw YAML::Exception(n.Mark(), "");
    dst = n.as<T>();
    return true;
  } catch (const YAML::Exception&) {
    p_.add(n, key(k), std::string("expected ") + type + ", got '" + dump(n) + "'");
    return false;
  }
}

template <class T, class F>
void MapReader::read_value(const std::string& k, T& dst, F value) {
  YAML::Node n = child(k);
  if (!n.IsDefined() || n.IsNull()) return;
  try {
    dst = value(n);
  } catch (const std::invalid_argument& e) {
    p_.add(n, key(k), e.what());
  }
}

// "FILE:LINE" of `key` in a file read with `lines` (Problems::lines), or of its nearest parent
// that was written; "FILE:1" where none was.
std::string where_in(const std::string& file, const std::map<std::string, int>& lines, const std::string& key);

// " (did you mean 'X'?)" for the closest of `known`, or "".
std::string did_you_mean(const std::string& key, const std::vector<std::string>& known);

// Parses "512MiB", "2GiB", "1e9" or a plain byte count; throws std::invalid_argument.
int64_t parse_bytes(const std::string& text);

}  // namespace memfine
