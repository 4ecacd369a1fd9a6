#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <sstream>

#include "core/config/sections.h"

namespace memfine {

namespace {

// Returns the node at a dotted path, creating maps on the way, or an undefined node on a clash.
YAML::Node node_at(YAML::Node root, const std::string& dotted) {
  std::vector<std::string> parts;
  std::stringstream ss(dotted);
  for (std::string part; std::getline(ss, part, '.');) parts.push_back(part);
  YAML::Node cur = root;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    YAML::Node next = cur[parts[i]];
    if (!next.IsDefined() || next.IsNull()) cur[parts[i]] = YAML::Node(YAML::NodeType::Map);
    cur.reset(cur[parts[i]]);
    if (!cur.IsMap()) return YAML::Node(YAML::NodeType::Undefined);
  }
  return cur;
}

}  // namespace

std::string ExperimentConfig::where(const std::string& key) const { return where_in(source, lines, key); }

std::string yaml_file_problem(const std::string& path) {
  // A regular file only: a FIFO would block the reader, a folder is no YAML (yaml-cpp would say
  // `basic_filebuf::underflow` without the name).
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return path + ": cannot read: " + std::strerror(errno);
  if (!S_ISREG(st.st_mode)) return path + ": not a regular file" + (S_ISDIR(st.st_mode) ? " (a folder)" : "");
  if (st.st_size > (1 << 24)) return path + ": larger than 16 MiB: not a configuration file";
  return "";
}

std::vector<SweepPoint> load_experiment(const std::string& path, std::vector<std::string>& errors) {
  Problems p{path, errors};
  if (const std::string why = yaml_file_problem(path); !why.empty()) {
    errors.push_back(why);
    return {};
  }
  YAML::Node root;
  try {
    std::vector<YAML::Node> docs = YAML::LoadAllFromFile(path);
    if (docs.size() > 1) {
      errors.push_back(path + ":" + std::to_string(docs[1].Mark().line + 1) +
                       ": (document): a second YAML document; an experiment is one");
      return {};
    }
    if (!docs.empty()) root = docs[0];
  } catch (const YAML::BadFile&) {
    errors.push_back(path + ": cannot read: " + std::strerror(errno));
    return {};
  } catch (const YAML::ParserException& e) {
    errors.push_back(path + ":" + std::to_string(e.mark.line + 1) + ": (syntax): " + e.msg);
    return {};
  }
  if (!root.IsMap()) {
    p.add(root, "(top)", "an experiment must be a YAML map");
    return {};
  }
  // The base config must be valid on its own, except for keys that the sweep sets.
  std::vector<std::pair<std::string, YAML::Node>> axes;
  YAML::Node sweep = root["sweep"];
  if (sweep.IsDefined() && !sweep.IsNull()) {
    if (!sweep.IsMap()) {
      p.add(sweep, "sweep", "must be a map from a dotted key to a list of values");
    } else {
      MapReader sweep_keys(sweep, "sweep", p);
      for (const auto& kv : sweep) {
        if (!kv.first.IsScalar()) continue;
        const std::string k = kv.first.Scalar();
        if (!kv.second.IsSequence() || kv.second.size() == 0) {
          p.add(kv.second, "sweep." + k, "must be a non-empty list of values");
          continue;
        }
        if (k.empty() || k == "sweep" || k.rfind("sweep.", 0) == 0 || k == "name") {
          p.add(kv.first, "sweep." + k, "cannot be swept");
          continue;
        }
        axes.emplace_back(k, kv.second);
        p.sweep_lines[k] = kv.first.Mark().line + 1;
      }
    }
  }
  // The product of the axes, without overflow; past kMaxPoints it is refused, not run.
  size_t total = 1;
  for (const auto& a : axes) {
    if (total > kMaxSweepPoints / a.second.size()) {
      p.add(sweep, "sweep", "more than " + std::to_string(kMaxSweepPoints) + " points: split the experiment");
      return {};
    }
    total *= a.second.size();
  }
  if (!errors.empty()) return {};
  // Each point sets its values into the one parsed tree and is read from it: linear in the points
  // (re-reading the file per point was quadratic), and the values keep their lines.
  std::vector<SweepPoint> points;
  points.reserve(total);
  for (size_t idx = 0; idx < total; ++idx) {
    std::string id;
    size_t rest = idx;
    for (const auto& [key, values] : axes) {
      const YAML::Node v = values[rest % values.size()];
      rest /= values.size();
      YAML::Node parent = node_at(root, key);
      const std::string leaf = key.substr(key.rfind('.') + 1);
      if (!parent.IsDefined()) {
        p.add(values, "sweep." + key, "does not name a setting");
        continue;
      }
      parent[leaf] = v;  // keeps the sweep value's line for error messages; every point sets every axis
      id += (id.empty() ? "" : ",") + key + "=" + MapReader::dump(v);
    }
    try {
      points.push_back(SweepPoint{id.empty() ? "base" : id, parse_config(root, path, p)});
    } catch (const YAML::Exception& e) {  // a shape no reader expected: still FILE:LINE, exit 2
      errors.push_back(path + ":" + std::to_string(e.mark.line + 1) + ": (yaml): " + e.msg);
      return {};
    }
  }
  return points;
}

}  // namespace memfine
