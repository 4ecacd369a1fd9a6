#include "core/config/config.h"

#include <sys/stat.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <set>
#include <sstream>

namespace memfine {

using json = nlohmann::json;

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
  std::map<std::string, int> sweep_lines;        // a swept key's line, for keys the sweep created
  void add(const YAML::Node& at, const std::string& path, const std::string& msg) {
    int line = at.IsDefined() && at.Mark().line >= 0 ? at.Mark().line + 1 : 1;
    if (!(at.IsDefined() && at.Mark().line >= 0) && sweep_lines.count(path)) line = sweep_lines.at(path);
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
      if (!n.IsScalar() || !plain_tag(n)) throw YAML::Exception(n.Mark(), "");
      dst = n.as<T>();
    } catch (const YAML::Exception&) {
      p_.add(n, key(k), std::string("expected ") + type + ", got '" + dump(n) + "'");
    }
  }
  // An integer in [lo, hi]; the limits are experiments/README.md's.
  void read_int(const std::string& k, int64_t& dst, int64_t lo, int64_t hi) {
    const int64_t before = dst;
    read(k, dst, "an integer");
    if (dst < lo || dst > hi) {
      p_.add(child(k), key(k), "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + std::to_string(dst));
      dst = before;  // later checks divide by it: keep a sane value
    }
  }
  void read_positive(const std::string& k, int64_t& dst, int64_t hi = int64_t(1) << 20) { read_int(k, dst, 1, hi); }
  // A finite number in [lo, hi] (NaN and infinities are refused).
  void read_number(const std::string& k, double& dst, double lo, double hi) {
    const double before = dst;
    read(k, dst, "a number");
    if (!(dst >= lo && dst <= hi)) {
      std::ostringstream m;
      m << "must be a finite number in [" << lo << ", " << hi << "], got " << dst;
      p_.add(child(k), key(k), m.str());
      dst = before;
    }
  }
  // Only YAML's own scalar types: `!!binary 256` or a custom tag is not a number.
  static bool plain_tag(const YAML::Node& n) {
    const std::string& t = n.Tag();
    return t.empty() || t == "?" || t == "!" || t == "tag:yaml.org,2002:str" || t == "tag:yaml.org,2002:int" ||
           t == "tag:yaml.org,2002:float" || t == "tag:yaml.org,2002:bool" || t == "tag:yaml.org,2002:null";
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
      if (!kv.first.IsScalar()) continue;  // reported when the map was opened
      const std::string k = kv.first.Scalar();
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
  r.read_positive("layers", m.layers, 4096);
  r.read_positive("hidden", m.hidden, 65536);
  r.read_positive("heads", m.heads, 1024);
  r.read_positive("kv_heads", m.kv_heads, 1024);
  r.read_positive("head_dim", m.head_dim, 4096);
  r.read_positive("ffn_hidden", m.ffn_hidden, 262144);
  r.read_positive("experts", m.experts, 65536);
  r.read_positive("topk", m.topk, 65536);
  r.read_positive("seq", m.seq, 1 << 20);
  r.read_positive("micro_batch", m.micro_batch, 65536);
  r.read_int("shared_experts", m.shared_experts, 0, 64);
  r.read_choice("attention", m.attention, {"gqa", "none"});
  r.read_int("vocab", m.vocab, 0, 1 << 20);
  r.check_unknown();
  if (m.topk > m.experts)
    p.add(r.child("topk"), "model.topk", "topk (" + std::to_string(m.topk) + ") exceeds experts (" +
                                             std::to_string(m.experts) + ")");
  if (m.tokens() > (int64_t(1) << 24))
    p.add(r.child("seq"), "model.seq", "seq x micro_batch (" + std::to_string(m.tokens()) + " tokens per rank) exceeds 16777216");
  if (m.heads % m.kv_heads != 0)
    p.add(r.child("kv_heads"), "model.kv_heads", "heads (" + std::to_string(m.heads) +
                                                      ") is not divisible by kv_heads (" + std::to_string(m.kv_heads) + ")");
}

void parse_workload(const YAML::Node& node, const std::string& yaml_dir, WorkloadConfig& w, Problems& p) {
  MapReader r(node, "workload", p);
  r.read("kind", w.kind, "a string");  // checked against the registered laws above config (run/validate)
  r.read_number("alpha", w.alpha, 0, 100);
  r.read_number("sigma", w.sigma, 0, 100);
  r.read_number("hot_fraction", w.hot_fraction, 0, 1);
  r.read_positive("hot_experts", w.hot_experts, 65536);
  r.read("trace", w.trace, "a path");
  r.read_choice("schedule", w.schedule, {"none", "figure5", "trace"});
  r.read_number("peak_step", w.peak_step, -1e6, 1e6);
  r.read_number("width", w.width, 1e-6, 1e6);
  r.check_unknown();
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
  if (node.size() == 0) {
    p.add(node, "strategies", "is empty: list at least one strategy (see `memfine strategies`)");
    return;
  }
  if (node.size() > kMaxStrategies) {
    p.add(node, "strategies", "lists " + std::to_string(node.size()) + " strategies, more than " +
                                  std::to_string(kMaxStrategies) + ": split the experiment");
    return;
  }
  for (size_t i = 0; i < node.size(); ++i) {
    const YAML::Node item = node[i];
    const std::string path = "strategies[" + std::to_string(i) + "]";
    StrategySpec spec;
    if (item.IsScalar()) {
      spec.name = item.as<std::string>();
    } else if (item.IsMap()) {
      MapReader keys(item, path, p);  // duplicate and complex keys
      for (const auto& kv : item) {
        if (!kv.first.IsScalar()) continue;  // reported by `keys`
        const std::string k = kv.first.Scalar();
        if (k == "name") spec.name = kv.second.as<std::string>("");
        else spec.written[k] = kv.second;
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
    // Names, parameters and duplicates (by canonical label) are checked against the registry above
    // config (run/validate).
    out.push_back(spec);
  }
}

// The name is a results folder under results/<device>/: one plain folder name.
std::string folder_name_problem(const std::string& name) {
  if (name.size() > 128) return "longer than 128 bytes: it names the results folder";
  if (name == "." || name == "..") return "'" + name + "' is not a folder name";
  for (unsigned char ch : name)
    if (ch == '/' || ch < 0x20 || ch == 0x7f) return "must be a plain folder name (no '/' or control characters)";
  // UTF-8: records are JSON.
  for (size_t i = 0; i < name.size();) {
    const unsigned char b = static_cast<unsigned char>(name[i]);
    const size_t n = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xe ? 3 : (b >> 3) == 0x1e ? 4 : 0;
    if (n == 0 || i + n > name.size()) return "is not UTF-8";
    for (size_t j = 1; j < n; ++j)
      if ((static_cast<unsigned char>(name[i + j]) >> 6) != 0x2) return "is not UTF-8";
    i += n;
  }
  return "";
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
  r.read_int("threads", c.threads, 0, 1024);
  r.read_int("warmup", c.warmup, 0, 1000000);
  r.read_positive("repeats", c.repeats, 1000000);
  r.read("verify", c.verify, "true or false");
  parse_model(r.child("model"), c.model, p);
  {
    MapReader pr(r.child("parallel"), "parallel", p);
    pr.read_positive("ep", c.ep, 65536);
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
      pr.read_number("alpha", ps.alpha, 1e-9, 1);
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
      pr.read_number("bytes_param", ps.bytes_param, 0, 64);
      pr.read_number("bytes_grad", ps.bytes_grad, 0, 64);
      pr.read_number("bytes_optimizer", ps.bytes_optimizer, 0, 64);
      pr.read("received", ps.received, "'figure2' or a number");
      pr.read("figure2", ps.figure2, "a path");
      pr.read_number("m_g", ps.m_g, 1e-9, 1e6);
      pr.check_unknown();
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
  {
    YAML::Node tn = r.child("train");
    if (tn.IsDefined() && !tn.IsNull()) {
      TrainConfig& t = c.train;
      t.enabled = true;
      MapReader tr(tn, "train", p);
      tr.read_positive("steps", t.steps, 10000000);
      tr.read_number("lr", t.lr, 0, 10);
      tr.read_int("warmup", t.warmup, 0, 10000000);
      tr.read_number("min_lr", t.min_lr, 0, 10);
      tr.read_positive("eval_every", t.eval_every, 10000000);
      tr.read_positive("eval_batches", t.eval_batches, 100000);
      tr.read_positive("checkpoint_every", t.checkpoint_every, 10000000);
      tr.read_number("aux_loss", t.aux_loss, 0, 100);
      tr.read_number("bias_update", t.bias_update, 0, 10);
      tr.read("data_seed", t.data_seed, "a non-negative integer");
      tr.read("corpus", t.corpus, "a path");
      if (std::filesystem::path(t.corpus).is_relative())
        t.corpus = (std::filesystem::path(dir.empty() ? "." : dir) / t.corpus).lexically_normal().string();
      tr.read_positive("stats_ep", t.stats_ep, 65536);
      tr.check_unknown();
      if (t.min_lr > t.lr) p.add(tr.child("min_lr"), "train.min_lr", "exceeds train.lr");
      if (c.model.vocab == 0)
        p.add(tn, "train", "training needs a language model: set model.vocab (256 for the byte tokenizer)");
      else if (c.model.vocab < 256)
        p.add(r.child("model")["vocab"], "model.vocab",
              std::to_string(c.model.vocab) + " is fewer than the byte tokenizer's 256 token ids (the corpus is read as bytes)");
      // Training learns its routing: the router's own top-k decides.
      const YAML::Node wn = r.child("workload");
      if (!wn.IsDefined() || wn.IsNull() || !wn["kind"].IsDefined()) c.workload.kind = "router";
      else if (c.workload.kind != "router")
        p.add(wn["kind"], "workload.kind", "training learns its routing: use 'router' (or leave workload out)");
      if (c.ep > 1) {
        // Real ranks (memfine launch) measure s' on themselves: the hottest of parallel.ep.
        if (tr.child("stats_ep").IsDefined() && t.stats_ep != c.ep)
          p.add(tr.child("stats_ep"), "train.stats_ep", "parallel.ep is " + std::to_string(c.ep) +
                                                            ": real ranks measure s' themselves; leave stats_ep out");
        t.stats_ep = c.ep;
      }
      if (c.model.experts % t.stats_ep != 0)
        p.add(tr.child("stats_ep"), "train.stats_ep", "experts (" + std::to_string(c.model.experts) +
                                                          ") is not divisible by stats_ep (" + std::to_string(t.stats_ep) + ")");
    }
  }
  if (c.model.vocab > 0 && !c.train.enabled)
    p.add(r.child("model")["vocab"], "model.vocab", "a language model is trained, not benchmarked: add a train: section and use memfine train");
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
  else if (const std::string why = folder_name_problem(c.name); !why.empty()) p.add(r.child("name"), "name", why);
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
  if (schedule == "none" || schedule == "trace") return 1.0;
  const double depth = double(layer + 1) / double(layers);
  const double t = (double(step) - peak_step) / width;
  return depth * (0.15 + 0.85 * std::exp(-t * t));
}

std::string label_value(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_array()) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + label_value(v[i]);
    return s + "]";
  }
  if (v.is_number_float()) {
    // The shortest form that reads back to the same double, with ".0" on whole numbers: 1.0,
    // 1.25, 0.05 (Python's repr), so 1, 1.0 and 1.00 label alike once typed.
    const double d = v.get<double>();
    char buf[40];
    for (int prec = 1; prec <= 17; ++prec) {
      std::snprintf(buf, sizeof buf, "%.*g", prec, d);
      if (std::strtod(buf, nullptr) == d) break;
    }
    std::string s = buf;
    if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
    return s;
  }
  return v.dump();  // integers, booleans, null
}

std::string StrategySpec::label() const {
  json params = resolved ? shown : json::object();
  if (!resolved)
    for (const auto& [k, v] : written) params[k] = yaml_to_json(v);
  if (params.empty()) return name;
  std::string s = name + "(";
  bool first = true;
  for (const auto& [k, v] : params.items()) {  // nlohmann's objects iterate in key order
    s += (first ? "" : ",") + k + "=" + label_value(v);
    first = false;
  }
  return s + ")";
}

const json& StrategySpec::value(const std::string& key) const {
  auto it = values.find(key);
  if (it == values.end())
    throw std::logic_error("strategy '" + name + "' reads parameter '" + key + "', which it does not declare" +
                           (resolved ? "" : " (the spec was not resolved)"));
  return *it;
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
  // Beyond 2^62 bytes (4 EiB) a size is a typo, and int64 arithmetic on it overflows.
  if (v * scale >= 4.611686018427388e18) throw std::invalid_argument("'" + text + "' is larger than 4 EiB");
  return static_cast<int64_t>(std::llround(v * scale));
}

std::vector<SweepPoint> load_experiment(const std::string& path, std::vector<std::string>& errors) {
  Problems p{path, errors};
  // A regular file only: a FIFO would block the reader, a folder is no experiment.
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    errors.push_back(path + ": cannot read: " + std::strerror(errno));
    return {};
  }
  if (!S_ISREG(st.st_mode)) {
    errors.push_back(path + ": not a regular file" + (S_ISDIR(st.st_mode) ? " (a folder)" : ""));
    return {};
  }
  if (st.st_size > (1 << 24)) {
    errors.push_back(path + ": larger than 16 MiB: not an experiment");
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
