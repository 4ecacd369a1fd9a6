#include "core/project/report.h"

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "core/project/framework.h"
#include "core/record/schema.h"
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
  Grid dropless = ranked_grid(), lossy = ranked_grid(), capped = ranked_grid();
  lossy.title =
      "lossy storage (activations kept in narrower codes: its gradients differ from the plain computation's by "
      "design, their error measured by `memfine run` as grad_err; not ranked with the above):";
  capped.title = "capacity capping (drops assignments: another model, not ranked with the above):";
  // A row with an earlier row's figures at the same layout in the same table (MACT planning no
  // chunks is full_recompute) is shown once, and named under the tables.
  std::map<std::vector<std::string>, std::string> shown;  // layout and figures -> the strategy shown
  std::map<std::pair<std::string, std::string>, int64_t> alike;  // (strategy, as which) -> rows
  for (const auto& e : r.ranked) {
    Grid& g = e.drops ? capped : e.lossy ? lossy : dropless;
    if (int64_t(g.rows.size()) >= (&g == &dropless ? c.top : 3)) continue;
    std::vector<std::string> row = row_of(e, int64_t(g.rows.size()) + 1);
    std::vector<std::string> figures(row.begin() + 1, row.end());
    figures[1] = figures[8] = "";  // the strategy and its chunk count aside, its table kept
    figures.push_back(e.drops ? "drops" : e.lossy ? "lossy" : "");
    if (auto [it, fresh] = shown.emplace(figures, e.strategy); !fresh) {
      ++alike[{e.strategy, it->second}];
      continue;
    }
    g.rows.push_back(row);
  }
  out += text(dropless);
  if (!lossy.rows.empty()) out += text(lossy);
  if (!capped.rows.empty()) out += text(capped);
  for (const auto& [who, rows] : alike)
    out += "= " + who.first + " projects as " + who.second + " (the same figures at the same layout; " +
           std::to_string(rows) + " row" + (rows > 1 ? "s" : "") + " not shown)\n";
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

const std::vector<FieldSpec>& projection_schema() {
  static const char* k = "project";
  static const std::vector<FieldSpec> fields = {
      {"project", "string", "", "the project file's name", k},
      {"model", "string", "", "the model preset (or the file's own model)", k},
      {"hardware", "string", "", "the hardware preset", k},
      {"gpus", "integer", "", "the cluster's GPUs", k},
      {"layout", "object", "",
       "tp, pp, vpp, ep, dp, cp, micro_batch, grad_accumulation and global_batch (sequences a step)", k},
      {"strategy", "string", "", "the strategy's label; empty for a layout rejected before any strategy", k},
      {"name", "string", "", "the registered strategy", k},
      {"drops", "boolean", "", "the strategy drops assignments (capacity capping): another model", k},
      {"fits", "boolean", "", "the need is within the usable memory", k},
      {"fit", "string", "", "`yes`, `no`, or `borderline` (within the framework's margin of the limit)", k},
      {"framework", "string", "", "the framework whose memory and time are priced (framework.name)", k},
      {"ep_overlap", "boolean", "", "the all-to-all overlapped with another micro-batch's compute", k},
      {"tp_comm_overlap", "boolean", "", "TP's collectives behind the GEMMs", k},
      {"ep_overlap_hidden", "number", "", "with ep_overlap: the most of an all-to-all that hides (a share)", k},
      {"hottest_stage", "string", "", "the pipeline rank whose memory is given", k},
      {"why", "string", "", "why the layout or strategy is rejected or does not fit (empty when it does)", k},
      {"rank", "integer", "", "its place by goodput among the ranked (0: rejected)", k},
      {"git_commit", "string", "", "the commit the projection was made at", k},
      {"date", "string", "", "when the projection was made (UTC)", k},
      {"overload", "object", "",
       "the hottest rank's s' over its balanced share at this EP: worst layer, mean over layers, held", k},
      {"published", "object", "",
       "a validation file's published figures (values by quantity; source, evidence, calibration, known_issue)", k},
      {"peak_gb", "number", "GB", "the hottest GPU's allocated peak", k},
      {"static_gb", "number", "GB", "weights, gradients and optimizer state on it", k},
      {"activation_gb", "number", "GB", "activations at its peak", k},
      {"host_gb", "number", "GB", "offloaded to the host", k},
      {"reserved_gb", "number", "GB", "with the allocator's reserve", k},
      {"need_gb", "number", "GB", "with what the process holds beside (CUDA context, NCCL): against the limit", k},
      {"chunks", "integer", "", "the MoE's chunk count where it runs in chunks (0: not chunked)", k},
      {"step_s", "number", "s", "one training step", k},
      {"step_parts_s", "object", "s",
       "compute, recompute, comm, bubble, offload_wait, chunk_overhead, optimizer and launch", k},
      {"all_to_all_s", "number", "s", "the step's all-to-all, exposed or not", k},
      {"expert_gemm", "object", "",
       "the routed experts' GEMMs: rows per expert and TFLOP/s on the curve (table_tflops, accumulated_tflops: "
       "the GEMM table's at one expert's shape)",
       k},
      {"tokens_per_s_gpu", "number", "tokens/s", "tokens a GPU trains per second", k},
      {"balanced_tokens_per_s_gpu", "number", "tokens/s", "the same with balanced routing", k},
      {"model_tflops_gpu", "number", "TFLOP/s", "model FLOPs a GPU does per second (no recomputation counted)", k},
      {"goodput", "object", "",
       "ettr, mttf_h, interval_h (the optimal checkpoint interval) and tokens_per_s_gpu that survive failures", k},
  };
  return fields;
}

namespace {

// A line as the schema declares it; a field it does not declare, or of another type, is a bug.
void check_declared(const nlohmann::json& j) {
  static const std::map<std::string, const FieldSpec*> by_key = [] {
    std::map<std::string, const FieldSpec*> m;
    for (const auto& f : projection_schema()) m[f.key] = &f;
    return m;
  }();
  for (const auto& [key, value] : j.items()) {
    auto it = by_key.find(key);
    if (it == by_key.end()) throw std::logic_error("memfine project --json: '" + key + "' is not declared");
    if (!of_type(value, *it->second))
      throw std::logic_error("memfine project --json: " + key + " is not of its declared type " + it->second->type);
  }
}

}  // namespace

std::string project_json(const ProjectConfig& c, const ProjectResult& r, const Published& published,
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
    if (nlohmann::json pub = published_of(published, e.strategy); !pub.is_null()) j["published"] = pub;
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
    check_declared(j);
    o << j.dump() << "\n";
  };
  int64_t n = 0;
  for (const auto& e : r.ranked) row(e, ++n);
  for (const auto& e : r.rejected) row(e, 0);
  return o.str();
}

}  // namespace memfine
