#include "core/project/report.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/project/framework.h"
#include "core/record/table.h"

#include "core/util/format.h"

namespace memfine {

namespace {

std::string heading(const ProjectConfig& c, const ProjectResult& r) {
  std::ostringstream o;
  o << c.name << ": " << c.model_name << " on " << c.gpus << " x " << c.hardware.name << ", global batch "
    << c.global_batch << " x " << c.model.seq << " tokens";
  if (c.overload > 0)
    o << ", imbalance: s' " << c.overload << "x the balanced share (given)";
  else
    o << ", imbalance: " << c.imbalance.kind
      << (c.imbalance.kind == "zipf" ? " alpha " + fmt_double("%g", c.imbalance.alpha) : "");
  o << "\nframework: " << name_of(c.framework.name) << " (memory by its profile; `framework:` in the file says which)";
  o << "\nthe hottest rank's s' over its balanced share (worst layer, mean over layers):";
  for (const auto& [ep, x] : r.overload)
    o << (ep == r.overload.begin()->first ? " EP" : ", EP") << ep << " " << fmt_double("%.2f", x.worst) << "x/"
      << fmt_double("%.2f", x.mean) << "x";
  o << "\n"
    << r.layouts << " layouts x " << c.strategies.size() << " strategies: " << r.ranked.size() << " fit, "
    << r.rejected.size() << " rejected; ranked by goodput (tokens/s per GPU that survive failures)\n";
  return o.str();
}

Grid ranked_grid() {
  Grid g;
  g.header = {"#",     "layout", "strategy", "fit",     "need",     "alloc",     "static",   "act",
              "host",  "chunk",  "step",     "compute", "overhead", "comm",      "bubble",   "tok/s/GPU",
              "balanced", "TFLOP/s", "ETTR", "goodput"};
  g.units = {"", "", "", "", "GB", "GB", "GB", "GB", "GB", "", "s", "s", "s", "s", "s", "", "", "", "", "tok/s/GPU"};
  g.left = 3;
  return g;
}

std::vector<std::string> row_of(const Estimate& e, int64_t n) {
  return {std::to_string(n),
          e.layout.text(),
          e.strategy + (e.drops ? "*" : ""),
          e.fit,
          fmt_double("%.1f", e.need_gb),
          fmt_double("%.1f", e.peak_gb),
          fmt_double("%.1f", e.static_gb),
          fmt_double("%.1f", e.activation_gb),
          fmt_double("%.1f", e.host_gb),
          e.chunks > 0 ? std::to_string(e.chunks) : "-",
          fmt_double("%.2f", e.step),
          fmt_double("%.2f", e.compute + e.optimizer + e.launch),
          fmt_double("%.2f", e.recompute + e.chunk_overhead + e.offload_wait),
          fmt_double("%.2f", e.comm),
          fmt_double("%.2f", e.bubble),
          fmt_double("%.0f", e.tokens_per_s_gpu),
          fmt_double("%.0f", e.balanced_tokens_per_s_gpu),
          fmt_double("%.0f", e.model_tflops_gpu),
          fmt_double("%.3f", e.goodput.ettr),
          fmt_double("%.0f", e.goodput.tokens_per_s)};
}

// Nothing dropless fits: the nearest misses, so the reader sees how far off the cluster is.
std::string nearest(const ProjectConfig& c, const ProjectResult& r) {
  std::vector<const Estimate*> near;
  for (const auto& e : r.rejected)
    if (!e.strategy.empty() && !e.drops) near.push_back(&e);
  std::sort(near.begin(), near.end(), [](const Estimate* a, const Estimate* b) { return a->peak_gb < b->peak_gb; });
  std::ostringstream o;
  if (r.layouts == 0)
    o << "no layout of the search space divides " << c.gpus << " GPUs (TP x PP x CP must divide them)\n";
  else if (near.empty())
    o << "no layout of the search space is possible on " << c.gpus << " GPUs (why: under rejected)\n";
  else
    o << "no dropless layout fits; the nearest:\n";
  for (size_t i = 0; i < std::min<size_t>(3, near.size()); ++i)
    o << "  " << near[i]->layout.text() << " " << near[i]->strategy << ": " << near[i]->why << "\n";
  return o.str();
}

}  // namespace

std::string project_table(const ProjectConfig& c, const ProjectResult& r) {
  std::string out = heading(c, r) + "\n";
  Grid dropless = ranked_grid(), capped = ranked_grid();
  capped.title = "capacity capping (drops assignments: another model, not ranked with the above):";
  for (const auto& e : r.ranked) {
    Grid& g = e.drops ? capped : dropless;
    if (int64_t(g.rows.size()) < (e.drops ? 3 : c.top)) g.rows.push_back(row_of(e, int64_t(g.rows.size()) + 1));
  }
  out += text(dropless);
  if (!capped.rows.empty()) out += text(capped);
  if (dropless.rows.empty()) out += nearest(c, r);
  // Why the others were rejected, counted.
  std::map<std::string, int64_t> reasons;
  for (const auto& e : r.rejected) reasons[e.why.substr(0, e.why.find(':'))]++;
  out += "\nrejected:";
  if (reasons.empty()) out += " none";
  for (const auto& [why, count] : reasons) out += "\n  " + std::to_string(count) + " x " + why;
  out +=
      "\n\nneed = alloc (what the tensors take) with the allocator's reserve and what the process holds beside "
      "(CUDA context, NCCL), against the usable memory; fit: borderline within the framework's margin of it\n"
      "compute = the kernels, the optimizer step and the GPU's wait for the host's launches; "
      "overhead = recomputation (with its all-to-alls), MemFine's chunks, offloading's copy wait and encoding's "
      "passes over memory (8-bit storage); comm = "
      "exposed communication; balanced = tok/s/GPU with balanced routing; goodput = ETTR x tok/s/GPU\n"
      "* drops assignments (capacity capping): another model, not comparable with the dropless rows\n";
  if (!r.ranked.empty()) {
    out += "assumptions (each part's model):\n";
    for (const auto& a : r.ranked.front().assumptions) out += "  - " + a + "\n";
  }
  return out;
}

std::string project_json(const ProjectConfig& c, const ProjectResult& r,
                         const std::map<std::string, std::string>& stamp) {
  std::ostringstream o;
  const double overlap_hidden = framework_setting(c).ep_overlap_hidden;
  auto row = [&](const Estimate& e, int64_t rank) {
    const Layout& l = e.layout;
    nlohmann::json j = {{"project", c.name},
                        {"model", c.model_name},
                        {"hardware", c.hardware.name},
                        {"gpus", c.gpus},
                        {"layout",
                         {{"tp", l.tp},
                          {"pp", l.pp},
                          {"vpp", l.vpp},
                          {"ep", l.ep},
                          {"dp", l.dp},
                          {"cp", l.cp},
                          {"micro_batch", l.micro_batch},
                          {"grad_accumulation", l.grad_accumulation},
                          {"global_batch", l.global_batch}}},
                        {"strategy", e.strategy},
                        {"name", e.name},
                        {"drops", e.drops},
                        {"fits", e.fits},
                        {"fit", e.fit},
                        {"framework", name_of(c.framework.name)},
                        {"ep_overlap", c.framework.ep_overlap},
                        {"tp_comm_overlap", c.framework.tp_comm_overlap},
                        {"hottest_stage", e.hottest_stage},
                        {"why", e.why},
                        {"rank", rank}};
    for (const auto& [k, v] : stamp) j[k] = v;
    if (c.framework.ep_overlap) j["ep_overlap_hidden"] = overlap_hidden;
    if (auto it = r.overload.find(l.ep); it != r.overload.end())
      j["overload"] = {{"worst", it->second.worst}, {"mean", it->second.mean}, {"held", e.held_overload}};
    if (auto it = c.published.find(e.strategy); it != c.published.end()) {
      j["published"] = {{"source", c.published_source}, {"values", it->second}};
      for (const auto& [key, field] : published_texts())
        if (!(c.*field).empty()) j["published"][key] = c.*field;
    }
    if (!e.strategy.empty()) {
      j["peak_gb"] = e.peak_gb, j["static_gb"] = e.static_gb, j["activation_gb"] = e.activation_gb,
      j["host_gb"] = e.host_gb, j["reserved_gb"] = e.reserved_gb, j["need_gb"] = e.need_gb;
      j["chunks"] = e.chunks, j["step_s"] = e.step;
      j["step_parts_s"] = {
          {"compute", e.compute}, {"recompute", e.recompute},       {"comm", e.comm},
          {"bubble", e.bubble},   {"offload_wait", e.offload_wait}, {"chunk_overhead", e.chunk_overhead},
          {"optimizer", e.optimizer}, {"launch", e.launch}};
      j["all_to_all_s"] = e.all_to_all;
      j["expert_gemm"] = {{"rows", e.expert_rows}, {"tflops", e.expert_tflops}};
      if (e.expert_table_tflops > 0) j["expert_gemm"]["table_tflops"] = e.expert_table_tflops;
      if (e.expert_accumulated_tflops > 0) j["expert_gemm"]["accumulated_tflops"] = e.expert_accumulated_tflops;
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
