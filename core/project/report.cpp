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

// Without `wide`, within 120 columns: memory and speed with their ranges, the parts left to --wide.
Grid ranked_grid(bool wide) {
  Grid g;
  if (wide) {
    g.header = {"#",       "layout",   "strategy", "fit",  "need",      "alloc", "static",   "act",
                "host",    "chunk",    "step",     "compute", "overhead", "comm", "bubble",   "tok/s/GPU",
                "range",   "balanced", "TFLOP/s",  "ETTR", "goodput"};
    g.units = {"", "", "", "", "GB", "GB", "GB", "GB", "GB", "", "s", "s", "s", "s", "s", "", "", "", "", "", "tok/s/GPU"};
  } else {
    g.header = {"#", "layout", "strategy", "fit", "need", "step", "tok/s/GPU", "range", "balanced", "goodput"};
    g.units = {"", "", "", "", "GB", "s", "", "", "", "tok/s/GPU"};
  }
  g.left = 3;
  return g;
}

std::string range_text(const std::vector<double>& r) {
  return r.size() == 2 ? fmt_double("%.0f", r[0]) + "-" + fmt_double("%.0f", r[1]) : "-";
}

// The need with its range, which is not symmetric ("71.4(67-76)").
std::string need_text(const Estimate& e) {
  return fmt_double("%.1f", e.need_gb) + (e.need_gb_range.size() == 2 ? "(" + range_text(e.need_gb_range) + ")" : "");
}

// What a row says of its layout, bar the strategy's name and chunk count: two strategies with the
// same figures at the same layout are one row.
std::vector<std::string> figures_of(const Estimate& e) {
  return {e.layout.text(),
          e.fit,
          need_text(e),
          fmt_double("%.1f", e.peak_gb),
          fmt_double("%.1f", e.static_gb),
          fmt_double("%.1f", e.activation_gb),
          fmt_double("%.1f", e.host_gb),
          fmt_double("%.2f", e.step),
          fmt_double("%.2f", e.compute + e.optimizer + e.launch + e.calibration),
          fmt_double("%.2f", e.recompute + e.chunk_overhead + e.offload_wait),
          fmt_double("%.2f", e.comm),
          fmt_double("%.2f", e.bubble),
          fmt_double("%.0f", e.tokens_per_s_gpu),
          range_text(e.tokens_per_s_gpu_range),
          fmt_double("%.0f", e.balanced_tokens_per_s_gpu),
          fmt_double("%.0f", e.model_tflops_gpu),
          fmt_double("%.3f", e.goodput.ettr),
          fmt_double("%.0f", e.goodput.tokens_per_s),
          e.drops ? "drops" : e.lossy ? "lossy" : ""};
}

std::vector<std::string> row_of(const Estimate& e, int64_t n, bool wide) {
  const std::vector<std::string> f = figures_of(e);
  const std::string label = e.strategy + (e.drops ? "*" : "");
  if (wide)
    return {std::to_string(n), f[0], label, f[1], f[2], f[3], f[4], f[5], f[6],
            e.chunks > 0 ? std::to_string(e.chunks) : "-",
            f[7], f[8], f[9], f[10], f[11], f[12], f[13], f[14], f[15], f[16], f[17]};
  return {std::to_string(n), f[0], label, f[1], f[2], f[7], f[12], f[13], f[14], f[17]};
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

// A `seen` entry in words: its runs, their first projections' errors, which way, the range's hold.
std::string seen_runs(const ProjectionErrors::Seen& s, const std::string& who) {
  auto pct = [](double x) { return (x > 0 ? "+" : "") + fmt_double("%.0f", x) + "%"; };
  const std::string runs = std::to_string(s.runs);
  return "the validation's runs " + who + ": " + runs + ", off at their first projection by " +
         (s.runs == 1 ? pct(s.low) : pct(s.low) + " to " + pct(s.high) + " (median " + pct(s.median) + ")") +
         ", too fast on " + std::to_string(s.too_fast) + " of " + runs +
         "; the range, fitted on them and the others, holds " + std::to_string(s.held);
}

// What the validation saw of this model under this framework profile at its first projections: how
// sure an answer is where the validation has run the model, and that it has not where it has not.
std::string seen_text(const ProjectConfig& c) {
  const std::string who = c.model_name + " under " + name_of(c.framework.name);
  const ProjectionErrors::Seen* s = c.errors.seen_of(c.framework.name, c.model_name);
  if (!s) return "no run of " + who + " is in the validation: its range is the other models' errors";
  return seen_runs(*s, "of " + who);
}

// The same by hardware preset: a GPU the validation has run, or that it has not.
std::string seen_hardware_text(const ProjectConfig& c) {
  const ProjectionErrors::Seen* s = c.errors.seen_on(c.hardware.name);
  if (!s) return "no run on " + c.hardware.name + " is in the validation: its range is the other GPUs' errors";
  return seen_runs(*s, "on " + c.hardware.name);
}

}  // namespace

std::string project_table(const ProjectConfig& c, const ProjectResult& r, bool wide) {
  std::string out;
  std::istringstream head(heading(c, r));
  for (std::string line; std::getline(head, line);) out += fold(line, kNarrowColumns) + "\n";
  out += "\n";
  Grid dropless = ranked_grid(wide), lossy = ranked_grid(wide), capped = ranked_grid(wide);
  lossy.title = fold(
      "lossy storage (activations kept in narrower codes: its gradients differ from the plain computation's by "
      "design, their error measured by `memfine run` as grad_err; not ranked with the above):",
      kNarrowColumns);
  capped.title = "capacity capping (drops assignments: another model, not ranked with the above):";
  // A row with an earlier row's figures at the same layout in the same table (MACT planning no
  // chunks is full_recompute) is shown once, and named under the tables.
  std::map<std::vector<std::string>, std::string> shown;  // layout and figures -> the strategy shown
  std::map<std::pair<std::string, std::string>, int64_t> alike;  // (strategy, as which) -> rows
  for (const auto& e : r.ranked) {
    Grid& g = e.drops ? capped : e.lossy ? lossy : dropless;
    if (int64_t(g.rows.size()) >= (&g == &dropless ? c.top : 3)) continue;
    if (auto [it, fresh] = shown.emplace(figures_of(e), e.strategy); !fresh) {
      ++alike[{e.strategy, it->second}];
      continue;
    }
    g.rows.push_back(row_of(e, int64_t(g.rows.size()) + 1, wide));
  }
  // The strategy's label gives way to the layout (expert TP and virtual stages lengthen it).
  if (!wide)
    for (Grid* g : {&dropless, &lossy, &capped}) fit_width(*g, kNarrowColumns, {{2, 16}});
  if (!dropless.rows.empty() || (lossy.rows.empty() && capped.rows.empty())) out += text(dropless);
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
  out += "\n\n";
  const std::vector<std::string> notes = {
      "need = the tensors (alloc) with the allocator's reserve and what the process holds beside (CUDA context, "
      "NCCL), against the usable memory, its range in brackets; fit: borderline within the framework's margin of it or "
      "its range across it",
      "range = the tokens/s a GPU that " +
          (c.errors.file.empty()
               ? std::string("the validation's errors give (no errors.yaml beside the presets: none)")
               : four_digits(100 * c.errors.level) +
                     "% of the validation's runs fell within at their first projection (" + c.errors.file + ")") +
          "; balanced = tok/s/GPU with balanced routing; goodput = ETTR x tok/s/GPU",
      wide ? "compute = the kernels, the optimizer step, the GPU's wait for the host's launches and the calibration; "
             "overhead = recomputation (with its all-to-alls), MemFine's chunks, offloading's copy wait and encoding's "
             "passes over memory (8-bit storage); comm = exposed communication"
           : "--wide: memory and the step in parts (alloc, static, act, host, chunk, compute, overhead, comm, bubble), "
             "TFLOP/s, ETTR; labels in full",
      "* drops assignments (capacity capping): another model, not comparable with the dropless rows"};
  for (const auto& n : notes) out += fold(n, kNarrowColumns) + "\n";
  if (!r.ranked.empty()) {
    const Estimate& top = r.ranked.front();
    out += fold("memory across steps (row 1): the first step needs " + fmt_double("%.1f", top.first_step_need_gb) +
                    " GB, the steps after it " + fmt_double("%.1f", top.need_gb) + " GB: +" +
                    fmt_double("%.1f", top.need_gb - top.first_step_need_gb) +
                    " GB of Adam's moments, created by the first optimizer step (lazily, as torch.optim's and the "
                    "fused Adams' state is) and held after it; the later steps decide fit",
                kNarrowColumns) +
           "\n";
    out += "assumptions (each part's model):\n";
    std::vector<std::string> said = r.ranked.front().assumptions;
    if (const ProjectionErrors& err = c.errors; !err.file.empty()) {
      const ProjectionErrors::Range* need = err.memory_of(c.framework.name);
      said.push_back(
          "how sure (" + err.file + ", scripts/projection_errors.py): " + four_digits(1000 * err.layer_pass_s) +
          " ms for each layer's pass of a micro-batch beside its priced parts, the median on the "
          "validation's runs (a calibrated constant: `calibration` of the step's parts); ranges at " +
          four_digits(100 * err.level) + "%, split conformal over the runs' first projections: tokens/s x [" +
          four_digits(err.speed_low) + ", " + four_digits(err.speed_high) + "], the need " +
          (need ? "x [" + four_digits(need->low) + ", " + four_digits(need->high) + "]" : std::string("without one")) +
          " (" + name_of(c.framework.name) + "'s)" +
          (err.speed_held_by_family >= 0
               ? "; leaving each of " + std::to_string(err.source_families) +
                     " source families out in turn, the tokens/s range from the others held " +
                     fmt_double("%.1f", 100 * err.speed_held_by_family) +
                     "% of the left-out runs (what a new source's runs face)"
               : std::string()));
      said.push_back(seen_text(c));
      said.push_back(seen_hardware_text(c));
      // By row 1's micro-batches a step on a rank: per-step costs weigh most where they are few.
      const int64_t micro = micro_batches(r.ranked.front().layout);
      const std::string m = std::to_string(micro);
      const ProjectionErrors::SeenBin* b = err.seen_at(micro);
      said.push_back(b ? seen_runs(b->seen, "at " + b->name + " micro-batches a step (row 1's " + m + ")")
                       : "no run at row 1's " + m + " micro-batches a step is in the validation");
    }
    if (const FrameworkSetting fw = framework_setting(c);
        fw.mla_flex_by_default && c.model.attention == "mla" && !fw.flex_attention)
      said.push_back("attention at the FlashAttention rates: " + name_of(c.framework.name) +
                     " runs MLA's attention in FlexAttention by default, far slower at these head dims; "
                     "framework.flex_attention prices it so");
    if (!c.hardware.assumed.empty()) {
      std::string keys;
      for (const auto& k : c.hardware.assumed) keys += (keys.empty() ? "" : ", ") + k;
      said.push_back("assumed by the " + c.hardware.name + " preset, not measured: " + keys +
                     " (its answers rest on them as on the measured rates)");
    }
    for (const auto& a : said) out += fold("  - " + a, kNarrowColumns, 4) + "\n";
  }
  return out;
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
                        {"precision", c.precision},
                        {"ep_overlap", c.framework.ep_overlap},
                        {"tp_comm_overlap", c.framework.tp_comm_overlap},
                        {"cuda_graphs", graphs_text(c.framework.cuda_graphs)},
                        {"hottest_stage", e.hottest_stage},
                        {"why", e.why},
                        {"rank", rank}};
    for (const auto& [k, v] : stamp) j[k] = v;
    if (l.etp > 1) j["layout"]["etp"] = l.etp;
    if (!c.hardware.assumed.empty()) j["hardware_assumed"] = c.hardware.assumed;
    if (c.framework.ep_overlap) j["ep_overlap_hidden"] = overlap_hidden;
    if (!c.errors.file.empty()) {
      auto seen = [](const ProjectionErrors::Seen* s) {
        return s ? nlohmann::json{{"runs", s->runs},
                                  {"too_fast", s->too_fast},
                                  {"held", s->held},
                                  {"error_pct", {s->low, s->median, s->high}}}
                 : nlohmann::json{{"runs", 0}};
      };
      j["validation_seen"] = seen(c.errors.seen_of(c.framework.name, c.model_name));
      j["validation_seen_hardware"] = seen(c.errors.seen_on(c.hardware.name));
      const ProjectionErrors::SeenBin* b = c.errors.seen_at(micro_batches(l));
      j["validation_seen_micro_batches"] = seen(b ? &b->seen : nullptr);
      if (b) j["validation_seen_micro_batches"]["bin"] = b->name;
    }
    if (auto it = r.overload.find(l.ep); it != r.overload.end())
      j["overload"] = {{"worst", it->second.worst}, {"mean", it->second.mean}, {"held", e.held_overload}};
    if (nlohmann::json pub = published_of(published, e.strategy); !pub.is_null()) j["published"] = pub;
    if (!e.strategy.empty()) {
      j["peak_gb"] = e.peak_gb, j["static_gb"] = e.static_gb, j["activation_gb"] = e.activation_gb,
      j["host_gb"] = e.host_gb, j["reserved_gb"] = e.reserved_gb, j["need_gb"] = e.need_gb, j["usable_gb"] = e.usable_gb;
      if (!e.need_gb_range.empty()) j["need_gb_range"] = e.need_gb_range;
      j["first_step_need_gb"] = e.first_step_need_gb, j["optimizer_state_created_gb"] = e.lazy_gb;
      j["chunks"] = e.chunks, j["step_s"] = e.step;
      j["step_parts_s"] = {
          {"compute", e.compute}, {"recompute", e.recompute},       {"comm", e.comm},
          {"bubble", e.bubble},   {"offload_wait", e.offload_wait}, {"chunk_overhead", e.chunk_overhead},
          {"optimizer", e.optimizer}, {"launch", e.launch}, {"calibration", e.calibration}};
      j["calibration_passes"] = e.calibration_passes, j["all_to_all_s"] = e.all_to_all;
      j["moe_layer_ms"] = {{"forward", e.moe_layer_forward * 1e3}, {"backward", e.moe_layer_backward * 1e3}};
      j["expert_gemm"] = {{"rows", e.expert_rows}, {"tflops", e.expert_tflops}};
      if (e.expert_table_tflops > 0) j["expert_gemm"]["table_tflops"] = e.expert_table_tflops;
      if (e.expert_accumulated_tflops > 0) j["expert_gemm"]["accumulated_tflops"] = e.expert_accumulated_tflops;
      j["tokens_per_s_gpu"] = e.tokens_per_s_gpu, j["balanced_tokens_per_s_gpu"] = e.balanced_tokens_per_s_gpu;
      if (!e.tokens_per_s_gpu_range.empty()) j["tokens_per_s_gpu_range"] = e.tokens_per_s_gpu_range;
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
