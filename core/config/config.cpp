#include "core/config/config.h"

#include <cmath>
#include <filesystem>
#include <functional>
#include <set>
#include <sstream>

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

std::string ExperimentConfig::where(const std::string& key) const {
  for (std::string k = key;; k = k.substr(0, k.rfind('.'))) {
    auto it = lines.find(k);
    if (it != lines.end()) return source + ":" + std::to_string(it->second);
    if (k.find('.') == std::string::npos) break;
  }
  return source + ":1";
}

namespace {

// Collects "FILE:LINE: key.path: message" lines.
struct Problems {
  std::string file;
  std::vector<std::string>& out;
  std::map<std::string, int>* lines = nullptr;  // where each key of the config being read is
  void add(const YAML::Node& at, const std::string& path, const std::string& msg) {
    int line = at.IsDefined() && at.Mark().line >= 0 ? at.Mark().line + 1 : 1;
    std::string s = file + ":" + std::to_string(line) + ": " + path + ": " + msg;
    for (const auto& e : out)
      if (e == s) return;  // the same problem in many sweep points is reported once
    out.push_back(s);
  }
};

// Reads one YAML map, typed, remembering which keys it knew so the rest can be flagged.
class MapReader {
 public:
  MapReader(const YAML::Node& node, std::string path, Problems& p) : node_(node), path_(std::move(path)), p_(p) {
    if (node_.IsDefined() && !node_.IsNull() && !node_.IsMap()) p_.add(node_, path_.empty() ? "(top)" : path_, "must be a map");
  }
  std::string key(const std::string& k) const { return path_.empty() ? k : path_ + "." + k; }
  YAML::Node child(const std::string& k) {
    known_.push_back(k);
    if (!node_.IsMap()) return YAML::Node();
    YAML::Node n = node_[k];
    if (n.IsDefined() && p_.lines && n.Mark().line >= 0) (*p_.lines)[key(k)] = n.Mark().line + 1;
    return n;
  }
  template <class T>
  void read(const std::string& k, T& dst, const char* type) {
    YAML::Node n = child(k);
    if (!n.IsDefined() || n.IsNull()) return;
    try {
      if (!n.IsScalar()) throw YAML::Exception(n.Mark(), "");
      dst = n.as<T>();
    } catch (const YAML::Exception&) {
      p_.add(n, key(k), std::string("expected ") + type + ", got '" + dump(n) + "'");
    }
  }
  void read_positive(const std::string& k, int64_t& dst) {
    read(k, dst, "an integer");
    if (dst <= 0) p_.add(child(k), key(k), "must be positive, got " + std::to_string(dst));
  }
  void read_choice(const std::string& k, std::string& dst, const std::vector<std::string>& allowed) {
    read(k, dst, "a string");
    if (std::find(allowed.begin(), allowed.end(), dst) == allowed.end()) {
      std::string list;
      for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
      p_.add(child(k), key(k), "'" + dst + "' is not one of " + list + did_you_mean(dst, allowed));
    }
  }
  void check_unknown() {
    if (!node_.IsMap()) return;
    for (const auto& kv : node_) {
      const std::string k = kv.first.as<std::string>();
      if (std::find(known_.begin(), known_.end(), k) == known_.end())
        p_.add(kv.first, key(k), "unknown key" + did_you_mean(k, known_));
    }
  }
  static std::string dump(const YAML::Node& n) {
    YAML::Emitter e;
    e << YAML::Flow << n;
    return e.c_str();
  }

 private:
  YAML::Node node_;
  std::string path_;
  Problems& p_;
  std::vector<std::string> known_;
};

void parse_model(const YAML::Node& node, ModelConfig& m, Problems& p) {
  MapReader r(node, "model", p);
  r.read_positive("layers", m.layers);
  r.read_positive("hidden", m.hidden);
  r.read_positive("heads", m.heads);
  r.read_positive("kv_heads", m.kv_heads);
  r.read_positive("head_dim", m.head_dim);
  r.read_positive("ffn_hidden", m.ffn_hidden);
  r.read_positive("experts", m.experts);
  r.read_positive("topk", m.topk);
  r.read_positive("seq", m.seq);
  r.read_positive("micro_batch", m.micro_batch);
  r.read("shared_experts", m.shared_experts, "an integer");
  if (m.shared_experts < 0) p.add(r.child("shared_experts"), "model.shared_experts", "must be 0 or more");
  r.read_choice("attention", m.attention, {"gqa", "none"});
  r.check_unknown();
  if (m.topk > m.experts)
    p.add(r.child("topk"), "model.topk", "topk (" + std::to_string(m.topk) + ") exceeds experts (" +
                                             std::to_string(m.experts) + ")");
  if (m.heads % m.kv_heads != 0)
    p.add(r.child("kv_heads"), "model.kv_heads", "heads (" + std::to_string(m.heads) +
                                                      ") is not divisible by kv_heads (" + std::to_string(m.kv_heads) + ")");
}

void parse_workload(const YAML::Node& node, const std::string& yaml_dir, WorkloadConfig& w, Problems& p) {
  MapReader r(node, "workload", p);
  r.read("kind", w.kind, "a string");  // checked against the registered laws above config (run/validate)
  r.read("alpha", w.alpha, "a number");
  r.read("sigma", w.sigma, "a number");
  r.read("hot_fraction", w.hot_fraction, "a number");
  r.read("hot_experts", w.hot_experts, "an integer");
  r.read("trace", w.trace, "a path");
  r.read_choice("schedule", w.schedule, {"none", "figure5"});
  r.read("peak_step", w.peak_step, "a number");
  r.read("width", w.width, "a number");
  r.check_unknown();
  if (w.width <= 0) p.add(r.child("width"), "workload.width", "must be positive");
  if (w.alpha < 0) p.add(r.child("alpha"), "workload.alpha", "must be 0 or more");
  if (w.sigma < 0) p.add(r.child("sigma"), "workload.sigma", "must be 0 or more");
  if (w.hot_fraction < 0 || w.hot_fraction > 1) p.add(r.child("hot_fraction"), "workload.hot_fraction", "must be in [0, 1]");
  if (w.hot_experts <= 0) p.add(r.child("hot_experts"), "workload.hot_experts", "must be positive");
  if (w.kind == "trace") {
    if (w.trace.empty()) {
      p.add(node, "workload.trace", "kind 'trace' needs a trace file");
    } else {
      // Absolute, so that the record's config names the same file from anywhere.
      std::filesystem::path tp(w.trace);
      if (tp.is_relative() && !std::filesystem::exists(tp)) tp = std::filesystem::path(yaml_dir) / tp;
      w.trace = std::filesystem::absolute(tp).lexically_normal().string();
    }
  }
}

void parse_strategies(const YAML::Node& node, std::vector<StrategySpec>& out, Problems& p) {
  if (!node.IsDefined() || node.IsNull()) {
    p.add(node, "strategies", "missing: list at least one strategy (see `memfine strategies`)");
    return;
  }
  if (!node.IsSequence()) {
    p.add(node, "strategies", "must be a list");
    return;
  }
  std::set<std::string> labels;
  for (size_t i = 0; i < node.size(); ++i) {
    const YAML::Node item = node[i];
    const std::string path = "strategies[" + std::to_string(i) + "]";
    StrategySpec spec;
    if (item.IsScalar()) {
      spec.name = item.as<std::string>();
    } else if (item.IsMap()) {
      for (const auto& kv : item) {
        const std::string k = kv.first.as<std::string>();
        if (k == "name") spec.name = kv.second.as<std::string>("");
        else spec.params[k] = kv.second;
        if (p.lines) (*p.lines)[path + "." + k] = kv.first.Mark().line + 1;
      }
      if (spec.name.empty()) {
        p.add(item, path + ".name", "missing");
        continue;
      }
    } else {
      p.add(item, path, "must be a name or a map with 'name'");
      continue;
    }
    if (p.lines) (*p.lines)[path] = item.Mark().line + 1;
    // Names and parameters are checked against the registry above config (run/validate).
    if (!labels.insert(spec.label()).second) p.add(item, path, "'" + spec.label() + "' is listed twice");
    out.push_back(spec);
  }
}

ExperimentConfig parse_config(const YAML::Node& root, const std::string& file, Problems& p) {
  ExperimentConfig c;
  c.source = file;
  p.lines = &c.lines;
  MapReader r(root, "", p);
  r.read("name", c.name, "a string");
  r.read("seed", c.seed, "a non-negative integer");
  r.read_choice("device", c.device, {"cpu", "cuda"});
  r.read_choice("dtype", c.dtype, {"float32", "float64", "bfloat16"});
  r.read_choice("kernels", c.kernels, {"auto", "aten", "fused"});  // auto: resolved in run/validate
  r.read("threads", c.threads, "an integer");
  if (c.threads < 0) p.add(r.child("threads"), "threads", "must be 0 (all cores) or more");
  r.read("warmup", c.warmup, "an integer");
  if (c.warmup < 0) p.add(r.child("warmup"), "warmup", "must be 0 or more");
  r.read_positive("repeats", c.repeats);
  r.read("verify", c.verify, "true or false");
  parse_model(r.child("model"), c.model, p);
  {
    MapReader pr(r.child("parallel"), "parallel", p);
    pr.read_positive("ep", c.ep);
    YAML::Node rank = pr.child("rank");
    if (rank.IsDefined() && !rank.IsNull()) {
      if (rank.IsScalar() && rank.as<std::string>() == "hottest") c.rank = -1;
      else pr.read("rank", c.rank, "an integer or 'hottest'");
      if (c.rank < -1 || c.rank >= c.ep) p.add(rank, "parallel.rank", "must be in [0, ep) or 'hottest'");
    }
    pr.check_unknown();
    if (c.model.experts % c.ep != 0)
      p.add(pr.child("ep"), "parallel.ep", "experts (" + std::to_string(c.model.experts) +
                                              ") is not divisible by ep (" + std::to_string(c.ep) + ")");
  }
  const std::string dir = std::filesystem::path(file).parent_path().string();
  parse_workload(r.child("workload"), dir.empty() ? "." : dir, c.workload, p);
  {
    MapReader mr(r.child("memory"), "memory", p);
    YAML::Node b = mr.child("budget");
    if (b.IsDefined() && !b.IsNull()) {
      try {
        const std::string text = b.as<std::string>();
        c.budget = (text == "none") ? -1 : parse_bytes(text);
      } catch (const std::exception& e) {
        p.add(b, "memory.budget", e.what());
      }
    }
    mr.check_unknown();
  }
  {
    YAML::Node pn = r.child("paper");
    if (pn.IsDefined() && !pn.IsNull()) {
      PaperScaleConfig& ps = c.paper;
      ps.enabled = true;
      MapReader pr(pn, "paper", p);
      YAML::Node dm = pr.child("device_memory");
      if (dm.IsDefined() && !dm.IsNull()) {
        try {
          ps.device_memory = parse_bytes(dm.as<std::string>());
        } catch (const std::exception& e) {
          p.add(dm, "paper.device_memory", e.what());
        }
      }
      pr.read("alpha", ps.alpha, "a number");
      pr.read_positive("pipeline", ps.pipeline);
      pr.read("layers_per_stage", ps.layers_per_stage, "an integer");
      pr.read("dense_layers", ps.dense_layers, "an integer");
      pr.read_positive("dense_ffn", ps.dense_ffn);
      pr.read_positive("vocab", ps.vocab);
      pr.read_positive("q_lora_rank", ps.q_lora_rank);
      pr.read_positive("kv_lora_rank", ps.kv_lora_rank);
      pr.read_positive("qk_nope_dim", ps.qk_nope_dim);
      pr.read_positive("qk_rope_dim", ps.qk_rope_dim);
      pr.read_positive("v_head_dim", ps.v_head_dim);
      pr.read("bytes_param", ps.bytes_param, "a number");
      pr.read("bytes_grad", ps.bytes_grad, "a number");
      pr.read("bytes_optimizer", ps.bytes_optimizer, "a number");
      pr.read("received", ps.received, "'figure2' or a number");
      pr.read("figure2", ps.figure2, "a path");
      pr.read("m_g", ps.m_g, "a number");
      pr.check_unknown();
      if (ps.alpha <= 0 || ps.alpha > 1) p.add(pr.child("alpha"), "paper.alpha", "must be in (0, 1]");
      if (!ps.figure2.empty()) {
        std::filesystem::path fp(ps.figure2);
        const std::string dir = std::filesystem::path(file).parent_path().string();
        if (fp.is_relative()) fp = std::filesystem::path(dir.empty() ? "." : dir) / fp;
        ps.figure2 = std::filesystem::absolute(fp).lexically_normal().string();
        if (!std::filesystem::exists(fp)) p.add(pr.child("figure2"), "paper.figure2", "cannot read '" + ps.figure2 + "'");
      } else if (ps.received == "figure2") {
        p.add(pn, "paper.figure2", "received: figure2 needs the Figure 2 CSV");
      }
    }
  }
  r.read("cost_model", c.cost_model, "a path");
  if (!c.cost_model.empty()) {
    std::filesystem::path cp(c.cost_model);
    if (cp.is_relative()) cp = std::filesystem::path(dir.empty() ? "." : dir) / cp;
    c.cost_model = std::filesystem::absolute(cp).lexically_normal().string();
  }
  parse_strategies(r.child("strategies"), c.strategies, p);
  r.child("sweep");  // expanded by the caller
  r.check_unknown();
  if (c.name.empty()) p.add(root, "name", "missing: every experiment needs a name (it names the results folder)");
  p.lines = nullptr;
  return c;
}

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

double WorkloadConfig::intensity(int64_t step, int64_t layer, int64_t layers) const {
  if (schedule == "none") return 1.0;
  const double depth = double(layer + 1) / double(layers);
  const double t = (double(step) - peak_step) / width;
  return depth * (0.15 + 0.85 * std::exp(-t * t));
}

std::string StrategySpec::label() const {
  if (params.empty()) return name;
  std::string s = name + "(";
  bool first = true;
  for (const auto& [k, v] : params) {
    s += (first ? "" : ",") + k + "=" + MapReader::dump(v);
    first = false;
  }
  return s + ")";
}

namespace {
// A parameter as T, or `fallback` when it is not given; a value of another type names the key.
template <class T>
T param_as(const std::map<std::string, YAML::Node>& params, const std::string& key, T fallback, const char* what) {
  auto it = params.find(key);
  if (it == params.end()) return fallback;
  try {
    return it->second.as<T>();
  } catch (const YAML::Exception&) {
    throw std::invalid_argument(key + ": expected " + what + ", got '" + MapReader::dump(it->second) + "'");
  }
}
}  // namespace

int64_t StrategySpec::get_int(const std::string& key, int64_t fallback) const {
  return param_as(params, key, fallback, "an integer");
}
double StrategySpec::get_double(const std::string& key, double fallback) const {
  return param_as(params, key, fallback, "a number");
}
bool StrategySpec::get_bool(const std::string& key, bool fallback) const {
  return param_as(params, key, fallback, "true or false");
}
std::string StrategySpec::get_string(const std::string& key, const std::string& fallback) const {
  auto it = params.find(key);
  if (it == params.end()) return fallback;
  if (!it->second.IsScalar()) throw std::invalid_argument(key + ": expected a string");
  return it->second.as<std::string>();
}
std::vector<int64_t> StrategySpec::get_int_list(const std::string& key, std::vector<int64_t> fallback) const {
  return param_as(params, key, std::move(fallback), "a list of integers");
}

int64_t parse_bytes(const std::string& text) {
  static const std::vector<std::pair<std::string, double>> units = {
      {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0},
      {"KB", 1e3},     {"MB", 1e6},        {"GB", 1e9},           {"TB", 1e12},  {"B", 1.0}};
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
  return static_cast<int64_t>(std::llround(v * scale));
}

std::vector<SweepPoint> load_experiment(const std::string& path, std::vector<std::string>& errors) {
  Problems p{path, errors};
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    errors.push_back(path + ":1: (file): cannot read the file");
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
      for (const auto& kv : sweep) {
        const std::string k = kv.first.as<std::string>();
        if (!kv.second.IsSequence() || kv.second.size() == 0) {
          p.add(kv.second, "sweep." + k, "must be a non-empty list of values");
          continue;
        }
        if (k == "sweep" || k.rfind("sweep.", 0) == 0 || k == "name") {
          p.add(kv.first, "sweep." + k, "cannot be swept");
          continue;
        }
        axes.emplace_back(k, kv.second);
      }
    }
  }
  std::vector<SweepPoint> points;
  size_t total = 1;
  for (const auto& a : axes) total *= a.second.size();
  for (size_t idx = 0; idx < total; ++idx) {
    // A fresh parse per point (not YAML::Clone, which drops line numbers).
    YAML::Node copy = YAML::LoadFile(path);
    std::string id;
    size_t rest = idx;
    for (const auto& [key, values] : axes) {
      const YAML::Node v = values[rest % values.size()];
      rest /= values.size();
      YAML::Node parent = node_at(copy, key);
      const std::string leaf = key.substr(key.rfind('.') + 1);
      if (!parent.IsDefined()) {
        p.add(values, "sweep." + key, "does not name a setting");
        continue;
      }
      parent[leaf] = v;  // keeps the sweep value's line for error messages
      id += (id.empty() ? "" : ",") + key + "=" + MapReader::dump(v);
    }
    SweepPoint pt{id.empty() ? "base" : id, parse_config(copy, path, p)};
    points.push_back(std::move(pt));
  }
  return points;
}

}  // namespace memfine
