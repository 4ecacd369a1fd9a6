#include "core/project/project.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "core/config/sections.h"
#include "core/project/work.h"
#include "core/workload/workload.h"

namespace memfine {

namespace {

std::string dir_of(const std::string& file) {
  const auto slash = file.find_last_of('/');
  return slash == std::string::npos ? "." : file.substr(0, slash);
}

// A list of positive integers (a search axis).
void read_axis(MapReader& r, const std::string& k, std::vector<int64_t>& dst) {
  YAML::Node n = r.child(k);
  if (!n.IsDefined()) return;
  std::vector<int64_t> out;
  bool ok = n.IsSequence() && n.size() > 0;
  if (ok)
    for (const auto& item : n) {
      try {
        const int64_t v = item.as<int64_t>();
        if (v < 1 || v > (int64_t(1) << 20)) ok = false;
        out.push_back(v);
      } catch (const YAML::Exception&) {
        ok = false;
      }
    }
  if (!ok)
    r.problems().add(n, r.key(k),
                     "expected a non-empty list of integers in [1, 2^20], got '" + MapReader::dump(n) + "'");
  else
    dst = out;
}

}  // namespace

std::string default_presets_dir(const std::string& file) {
  const auto slash = file.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : file.substr(0, slash);
  for (const std::string& d : {dir + "/project", dir, dir + "/.."})
    if (std::ifstream(d + "/models.yaml").good()) return d;
  return dir + "/project";
}

ProjectConfig read_project(const std::string& file, const std::string& presets_dir) {
  std::vector<std::string> problems;
  ProjectConfig c;
  c.file = file;
  YAML::Node root;
  try {
    root = YAML::LoadFile(file);
  } catch (const YAML::BadFile&) {
    throw std::invalid_argument(file + ": cannot be read");
  } catch (const YAML::Exception& e) {
    throw std::invalid_argument(file + ":" + std::to_string(e.mark.line + 1) + ": " + e.msg);
  }
  Problems p{file, problems};
  if (!root.IsMap()) throw std::invalid_argument(file + ": expected a map of project keys");
  MapReader r(root, "", p);
  r.read("name", c.name, "a string");
  // The model and the hardware: a preset's name, or the keys written out.
  auto preset = [&](const char* key, auto read_file, auto read_one, auto& dst) {
    YAML::Node n = r.child(key);
    if (!n.IsDefined()) {
      p.add(root, key, "missing");
      return;
    }
    if (n.IsMap()) {
      dst = read_one(n, key, p);
      return;
    }
    const std::string path = presets_dir + "/" + (std::string(key) == "model" ? "models.yaml" : "hardware.yaml");
    const auto all = read_file(path, problems);
    const std::string name = n.IsScalar() ? n.Scalar() : "";
    auto it = all.find(name);
    if (it == all.end()) {
      std::vector<std::string> names;
      for (const auto& [k, v] : all) names.push_back(k);
      std::string list;
      for (const auto& x : names) list += (list.empty() ? "" : ", ") + x;
      p.add(n, key,
            "'" + MapReader::dump(n) + "' is not a preset of " + path + did_you_mean(name, names) + " (" + list + ")");
      return;
    }
    dst = it->second;
  };
  preset(
      "model", [](const std::string& f, std::vector<std::string>& pr) { return read_models(f, pr); },
      [](const YAML::Node& n, const std::string& k, Problems& pr) { return read_model(n, k, pr); }, c.model);
  preset(
      "hardware", [](const std::string& f, std::vector<std::string>& pr) { return read_hardware(f, pr); },
      [](const YAML::Node& n, const std::string& k, Problems& pr) { return read_hardware(n, k, pr); }, c.hardware);
  if (c.hardware.memory_gb > 0 &&
      (c.hardware.gemm_tflops <= 0 || c.hardware.attention_tflops <= 0 ||
       (c.hardware.grouped_gemm_curve.empty() &&
        (c.hardware.grouped_gemm_tflops <= 0 || c.hardware.grouped_gemm_small_tflops <= 0))))
    p.add(r.child("hardware"), "hardware",
          "'" + c.hardware.name +
              "' has no compute rates (gemm_tflops, attention_tflops, grouped_gemm_tflops, "
              "grouped_gemm_small_tflops): a step time needs them (memfine predict projects memory alone)");
  r.read_int("gpus", c.gpus, 1, int64_t(1) << 24);
  r.read_int("global_batch", c.global_batch, 1, int64_t(1) << 30);
  int64_t seed = 1;
  r.read_int("seed", seed, 0, int64_t(1) << 62);
  c.seed = uint64_t(seed);
  r.read_number("usable_memory", c.setting.usable_memory, 0.01, 1);
  double restart_min = 10;
  r.read_number("restart_min", restart_min, 0, 1e6);
  c.setting.restart_h = restart_min / 60;
  r.read_number("checkpoint_gb_s_per_node", c.setting.checkpoint_gb_s_per_node, 1e-3, 1e6);
  r.read_int("top", c.top, 1, 1 << 20);
  // Whether the run trains the model's MTP modules (DeepSeek-V3's card has one; many runs leave it out).
  r.read_int("mtp_layers", c.model.mtp_layers, 0, 1 << 10);
  std::string sharding = "distributed_optimizer";
  r.read_choice("sharding", sharding, {"distributed_optimizer", "fsdp"});
  c.setting.fsdp = sharding == "fsdp";
  std::string dtype = "bfloat16";
  r.read_choice("dtype", dtype, {"bfloat16", "float32"});
  c.setting.element_bytes = dtype == "float32" ? 4 : 2;
  std::string dispatcher = "alltoall";
  r.read_choice("dispatcher", dispatcher, {"alltoall", "deepep"});
  c.setting.node_dedup = dispatcher == "deepep";
  // What a source measured for this case (validation): a number per strategy and quantity.
  if (YAML::Node n = r.child("published"); n.IsDefined() && !n.IsMap()) {
    p.add(n, "published", "expected a map: source, and a map of measured quantities per strategy");
  } else if (n.IsDefined()) {
    MapReader pr(n, "published", p);
    pr.read("source", c.published_source, "a string");
    for (const auto& kv : n) {
      const std::string strategy = kv.first.as<std::string>();
      if (strategy == "source") continue;
      const std::string key = "published." + strategy;
      try {
        project_strategy(strategy);
      } catch (const std::exception& e) {
        p.add(kv.first, key, e.what());
        continue;
      }
      if (!kv.second.IsMap()) {
        p.add(kv.second, key, "expected a map of tokens_per_s_gpu, model_tflops_gpu, peak_gb");
        continue;
      }
      MapReader qr(kv.second, key, p);
      auto& q = c.published[strategy];
      for (const char* k : {"tokens_per_s_gpu", "model_tflops_gpu", "peak_gb"}) {
        if (!kv.second[k].IsDefined()) continue;
        double v = -1;
        qr.read_number(k, v, 1e-9, 1e12);
        if (v > 0) q[k] = v;
      }
      qr.check_unknown();
    }
  }
  // Reliability: a preset's name, or failures per 1000 node-days.
  c.setting.reliability = reliability_preset("llama3");
  if (YAML::Node n = r.child("reliability"); n.IsDefined()) {
    try {
      if (n.IsScalar() && !n.Scalar().empty() && !std::isdigit(static_cast<unsigned char>(n.Scalar()[0])))
        c.setting.reliability = reliability_preset(n.Scalar());
      else
        c.setting.reliability = {"", n.as<double>() / 24000, "written in " + file};
    } catch (const std::exception& e) {
      p.add(n, "reliability", std::string("a preset's name or failures per 1000 node-days: ") + e.what());
    }
  }
  // Imbalance: {overload: X} outright, or a routing law as an experiment's workload section.
  if (YAML::Node n = r.child("imbalance"); n.IsDefined()) {
    if (n.IsMap() && n["overload"].IsDefined()) {
      MapReader ir(n, "imbalance", p);
      ir.read_number("overload", c.overload, 1, 1e6);
      ir.check_unknown();
    } else {
      parse_workload(n, dir_of(file), c.imbalance, p);
    }
  }
  if (YAML::Node n = r.child("search"); n.IsDefined()) {
    MapReader sr(n, "search", p);
    read_axis(sr, "tp", c.tp), read_axis(sr, "pp", c.pp), read_axis(sr, "ep", c.ep), read_axis(sr, "cp", c.cp);
    read_axis(sr, "micro_batch", c.micro_batch), read_axis(sr, "vpp", c.vpp);
    read_axis(sr, "grad_accumulation", c.grad_accumulation);
    sr.check_unknown();
  }
  if (YAML::Node n = r.child("strategies"); n.IsDefined()) {
    c.strategies.clear();
    if (!n.IsSequence()) p.add(n, "strategies", "expected a list of strategy names");
    for (size_t i = 0; n.IsSequence() && i < n.size(); ++i) {
      try {
        project_strategy(n[i].as<std::string>());
        c.strategies.push_back(n[i].as<std::string>());
      } catch (const std::exception& e) {
        p.add(n[i], "strategies[" + std::to_string(i) + "]", e.what());
      }
    }
  }
  r.check_unknown();
  if (c.gpus == 0) p.add(root, "gpus", "missing");
  if (c.global_batch == 0) p.add(root, "global_batch", "missing");
  if (!problems.empty()) {
    std::string all;
    for (const auto& x : problems) all += (all.empty() ? "" : "\n") + x;
    throw std::invalid_argument(all);
  }
  if (c.name.empty()) c.name = c.model.name;
  if (r.child("model").IsMap()) c.model.name = c.name + "'s model";
  return c;
}

bool is_project_file(const std::string& file) {
  // Only a regular file of a project file's size is read here: a FIFO, a device or a huge file is
  // left to the experiment loader, which refuses it saying why (reading one here would block).
  std::error_code ec;
  if (!std::filesystem::is_regular_file(file, ec) || std::filesystem::file_size(file, ec) > (1u << 20) || ec)
    return false;
  try {
    const YAML::Node root = YAML::LoadFile(file);
    return root.IsMap() && root["hardware"].IsDefined();
  } catch (const YAML::Exception&) {
    return false;
  }
}

double project_overload(const ProjectConfig& c, int64_t ep) {
  if (c.overload > 0) return c.overload;
  if (c.imbalance.kind == "balanced" || ep == 1) return 1;
  // The law's routing of one micro-batch-sized draw per MoE layer over `ep` ranks.
  ModelConfig m;
  m.experts = c.model.experts, m.topk = c.model.topk, m.seq = c.model.seq, m.micro_batch = 1,
  m.layers = c.model.moe_layers();
  m.hidden = 8, m.ffn_hidden = 8, m.heads = 1, m.kv_heads = 1, m.head_dim = 8;
  double worst = 1;
  const int64_t local = m.experts / ep;
  for (int64_t l = 0; l < m.layers; ++l) {
    const auto counts = expert_counts(c.imbalance, m, ep, l, c.seed);
    double total = 0, hottest = 0;
    for (int64_t r = 0; r < ep; ++r) {
      double rank = 0;
      for (int64_t e = r * local; e < (r + 1) * local; ++e) rank += double(counts[size_t(e)]);
      hottest = std::max(hottest, rank), total += rank;
    }
    if (total > 0) worst = std::max(worst, hottest * double(ep) / total);
  }
  return worst;
}

ProjectResult run_project(const ProjectConfig& c) {
  ProjectResult out;
  const ProjectModel& m = c.model;
  std::map<int64_t, double>& overload = out.overload;  // by EP, drawn once each
  for (int64_t tp : c.tp)
    for (int64_t pp : c.pp)
      for (int64_t cp : c.cp) {
        if (c.gpus % (tp * pp * cp)) continue;
        const int64_t dp = c.gpus / (tp * pp * cp);
        for (int64_t ep : c.ep)
          for (int64_t mb : c.micro_batch)
            for (int64_t vpp : c.vpp)
              for (int64_t ga : c.grad_accumulation) {
                Layout l;
                l.tp = tp, l.pp = pp, l.cp = cp, l.dp = dp, l.ep = ep, l.micro_batch = mb, l.vpp = vpp;
                l.grad_accumulation = ga;
                l.global_batch = c.global_batch;
                // What makes a layout impossible, before any estimate.
                std::string bad;
                if (tp > c.hardware.gpus_per_node)
                  bad = "TP spans nodes";
                else if (m.heads % tp || m.kv_heads % tp)
                  bad = "TP does not divide the heads";
                else if (m.experts % ep)
                  bad = "EP does not divide the experts";
                else if ((dp * cp * tp) % ep)
                  bad = "EP does not divide DP x CP x TP";
                else if (pp * vpp > m.layers)
                  bad = "PP x VPP exceeds the layers";
                else if (c.global_batch % (dp * mb * ga))
                  bad = "DP x micro-batch x gradient accumulation does not divide the global batch";
                else if (m.seq % (cp * tp))
                  bad = "CP x TP does not divide the sequence";
                else if (vpp > 1 && pp == 1)
                  bad = "VPP needs PP";
                ++out.layouts;
                if (!bad.empty()) {
                  Estimate e;
                  e.layout = l, e.why = bad;
                  out.rejected.push_back(e);
                  continue;
                }
                if (!overload.count(ep)) overload[ep] = project_overload(c, ep);
                for (const auto& name : c.strategies) {
                  ProjectSetting set = c.setting;
                  set.overload = overload[ep];
                  Estimate e = estimate(m, c.hardware, l, project_strategy(name), set);
                  set.overload = 1;
                  e.balanced_tokens_per_s_gpu =
                      estimate(m, c.hardware, l, project_strategy(name), set).tokens_per_s_gpu;
                  (e.fits ? out.ranked : out.rejected).push_back(e);
                }
              }
      }
  // Dropless first (capacity computes another model), each by goodput.
  std::stable_sort(out.ranked.begin(), out.ranked.end(), [](const Estimate& a, const Estimate& b) {
    const bool da = a.strategy.keep != Keep::Capacity, db = b.strategy.keep != Keep::Capacity;
    if (da != db) return da;
    return a.goodput.tokens_per_s > b.goodput.tokens_per_s;
  });
  return out;
}

namespace {
std::string f(const char* fmt, double v) {
  char b[64];
  std::snprintf(b, sizeof b, fmt, v);
  return b;
}
}  // namespace

std::string project_table(const ProjectConfig& c, const ProjectResult& r) {
  std::ostringstream o;
  const ProjectModel& m = c.model;
  o << c.name << ": " << m.name << " on " << c.gpus << " x " << c.hardware.name << ", global batch " << c.global_batch
    << " x " << m.seq << " tokens";
  if (c.overload > 0)
    o << ", imbalance: s' " << c.overload << "x the balanced share (given)";
  else
    o << ", imbalance: " << c.imbalance.kind
      << (c.imbalance.kind == "zipf" ? " alpha " + f("%g", c.imbalance.alpha) : "");
  o << "\nthe hottest rank's s' over its balanced share:";
  for (const auto& [ep, x] : r.overload) o << " EP" << ep << " " << f("%.2f", x) << "x";
  o << "\n"
    << r.layouts << " layouts x " << c.strategies.size() << " strategies: " << r.ranked.size() << " fit, "
    << r.rejected.size() << " rejected; ranked by goodput (tokens/s per GPU that survive failures)\n\n";
  const char* head = "%-4s %-30s %-18s %6s %6s %6s %6s %5s %7s %7s %8s %7s %7s %9s %8s %7s %6s %8s\n";
  char line[512];
  std::snprintf(line, sizeof line, head, "#", "layout", "strategy", "peak", "static", "act", "host", "chunk", "step",
                "compute", "overhead", "comm", "bubble", "tok/s/GPU", "balanced", "TFLOP/s", "ETTR", "goodput");
  o << line;
  std::snprintf(line, sizeof line, head, "", "", "", "GB", "GB", "GB", "GB", "", "s", "s", "s", "s", "s", "", "", "",
                "", "tok/s/GPU");
  o << line;
  int64_t n = 0, capped = 0;
  for (const auto& e : r.ranked) {
    // The best few of capacity capping after the dropless ones, apart.
    if (e.strategy.keep == Keep::Capacity) {
      if (capped++ == 0) o << "capacity capping (drops assignments: another model, not ranked with the above):\n";
      if (capped > 3) break;
    } else if (n >= c.top) {
      continue;
    }
    std::snprintf(
        line, sizeof line,
        "%-4lld %-30s %-18s %6.1f %6.1f %6.1f %6.1f %5s %7.2f %7.2f %8.2f %7.2f %7.2f %9.0f %8.0f %7.0f %6.3f %8.0f\n",
        (long long)(e.strategy.keep == Keep::Capacity ? capped : ++n), e.layout.text().c_str(),
        (e.strategy.name + (e.strategy.keep == Keep::Capacity ? "*" : "")).c_str(), e.peak_gb, e.static_gb,
        e.activation_gb, e.host_gb, e.strategy.keep == Keep::MemFine ? std::to_string(e.chunks).c_str() : "-", e.step,
        e.compute, e.recompute + e.chunk_overhead + e.offload_wait, e.comm, e.bubble, e.tokens_per_s_gpu,
        e.balanced_tokens_per_s_gpu, e.model_tflops_gpu, e.goodput.ettr, e.goodput.tokens_per_s);
    o << line;
  }
  // Nothing dropless fits: the nearest misses, so the reader sees how far off the cluster is.
  if (n == 0) {
    std::vector<const Estimate*> near;
    for (const auto& e : r.rejected)
      if (!e.strategy.name.empty() && e.strategy.keep != Keep::Capacity) near.push_back(&e);
    std::sort(near.begin(), near.end(), [](const Estimate* a, const Estimate* b) { return a->peak_gb < b->peak_gb; });
    if (r.layouts == 0)
      o << "no layout of the search space divides " << c.gpus << " GPUs (TP x PP x CP must divide them)\n";
    else if (near.empty())
      o << "no layout of the search space is possible on " << c.gpus << " GPUs (why: under rejected)\n";
    else
      o << "no dropless layout fits; the nearest:\n";
    for (size_t i = 0; i < std::min<size_t>(3, near.size()); ++i)
      o << "  " << near[i]->layout.text() << " " << near[i]->strategy.name << ": " << near[i]->why << "\n";
  }
  // Why the others were rejected, counted.
  std::map<std::string, int64_t> reasons;
  for (const auto& e : r.rejected) reasons[e.why.substr(0, e.why.find(':'))]++;
  o << "\nrejected:";
  if (reasons.empty()) o << " none";
  for (const auto& [why, count] : reasons) o << "\n  " << count << " x " << why;
  o << "\n\noverhead = recomputation (with its all-to-alls), MemFine's chunks and offloading's copy wait; comm = "
       "exposed communication; balanced = tok/s/GPU with balanced routing; goodput = ETTR x tok/s/GPU\n"
       "* capacity drops assignments: another model, not comparable with the dropless rows\n";
  if (!r.ranked.empty()) {
    o << "assumptions (each part's model):\n";
    for (const auto& a : r.ranked.front().assumptions) o << "  - " << a << "\n";
  }
  return o.str();
}

std::string project_json(const ProjectConfig& c, const ProjectResult& r,
                         const std::map<std::string, std::string>& stamp) {
  std::ostringstream o;
  auto row = [&](const Estimate& e, int64_t rank) {
    nlohmann::json j = {{"project", c.name},
                        {"model", c.model.name},
                        {"hardware", c.hardware.name},
                        {"gpus", c.gpus},
                        {"layout",
                         {{"tp", e.layout.tp},
                          {"pp", e.layout.pp},
                          {"vpp", e.layout.vpp},
                          {"ep", e.layout.ep},
                          {"dp", e.layout.dp},
                          {"cp", e.layout.cp},
                          {"micro_batch", e.layout.micro_batch},
                          {"grad_accumulation", e.layout.grad_accumulation},
                          {"global_batch", e.layout.global_batch}}},
                        {"strategy", e.strategy.name},
                        {"fits", e.fits},
                        {"hottest_stage", e.hottest_stage},
                        {"why", e.why},
                        {"rank", rank}};
    for (const auto& [k, v] : stamp) j[k] = v;
    if (auto it = c.published.find(e.strategy.name); it != c.published.end())
      j["published"] = {{"source", c.published_source}, {"values", it->second}};
    if (!e.strategy.name.empty()) {
      j["peak_gb"] = e.peak_gb, j["static_gb"] = e.static_gb, j["activation_gb"] = e.activation_gb,
      j["host_gb"] = e.host_gb;
      j["chunks"] = e.chunks, j["step_s"] = e.step;
      j["step_parts_s"] = {
          {"compute", e.compute}, {"recompute", e.recompute},       {"comm", e.comm},
          {"bubble", e.bubble},   {"offload_wait", e.offload_wait}, {"chunk_overhead", e.chunk_overhead}};
      j["all_to_all_s"] = e.all_to_all;
      j["tokens_per_s_gpu"] = e.tokens_per_s_gpu, j["balanced_tokens_per_s_gpu"] = e.balanced_tokens_per_s_gpu;
      j["model_tflops_gpu"] = e.model_tflops_gpu;
      j["goodput"] = {{"ettr", e.goodput.ettr},
                      {"mttf_h", e.goodput.mttf},
                      {"interval_h", e.goodput.interval},
                      {"tokens_per_s_gpu", e.goodput.tokens_per_s}};
    }
    o << j.dump() << "\n";
  };
  int64_t n = 0;
  for (const auto& e : r.ranked) row(e, ++n);
  for (const auto& e : r.rejected) row(e, 0);
  return o.str();
}

}  // namespace memfine
