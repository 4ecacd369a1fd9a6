#include "core/project/project.h"

#include <algorithm>
#include <memory>

#include "core/strategy/registry.h"
#include "core/workload/workload.h"

namespace memfine {

Overload project_overload(const ProjectConfig& c, int64_t ep) {
  if (c.overload > 0) return {c.overload, c.mean_overload > 0 ? c.mean_overload : c.overload};
  if (c.imbalance.kind == "balanced" || ep == 1) return {};
  // The law's routing of one micro-batch-sized draw per MoE layer over `ep` ranks.
  ModelConfig m;
  m.experts = c.model.experts, m.topk = c.model.topk, m.seq = c.model.seq, m.micro_batch = 1,
  m.layers = c.model.moe_layers();
  m.hidden = 8, m.ffn_hidden = 8, m.heads = 1, m.kv_heads = 1, m.head_dim = 8;
  double worst = 1, sum = 0;
  const int64_t local = m.experts / ep;
  for (int64_t l = 0; l < m.layers; ++l) {
    const auto counts = expert_counts(c.imbalance, m, ep, l, c.seed);
    double total = 0, hottest = 0;
    for (int64_t r = 0; r < ep; ++r) {
      double rank = 0;
      for (int64_t e = r * local; e < (r + 1) * local; ++e) rank += double(counts[size_t(e)]);
      hottest = std::max(hottest, rank), total += rank;
    }
    const double x = total > 0 ? hottest * double(ep) / total : 1;
    worst = std::max(worst, x), sum += x;
  }
  return {worst, m.layers > 0 ? sum / double(m.layers) : 1};
}

ProjectResult run_project(const ProjectConfig& c) {
  ProjectResult out;
  std::vector<std::unique_ptr<Strategy>> strategies;
  for (const auto& spec : c.strategies) strategies.push_back(make_strategy(spec));
  const ProjectSetting setting = project_setting(c);
  for (const Layout& l : layouts(c.search, c.gpus, c.global_batch)) {
    ++out.layouts;
    if (const std::string bad = layout_problem(c.model, c.hardware, l, c.pipeline_layout); !bad.empty()) {
      Estimate e;
      e.layout = l, e.why = bad;
      out.rejected.push_back(e);
      continue;
    }
    if (!out.overload.count(l.ep)) out.overload[l.ep] = project_overload(c, l.ep);
    for (const auto& s : strategies) {
      ProjectSetting set = setting;
      set.overload = out.overload[l.ep].worst, set.time_overload = out.overload[l.ep].mean;
      Estimate e = estimate(c.model, c.hardware, l, *s, set);
      set.overload = set.time_overload = 1;
      e.balanced_tokens_per_s_gpu = estimate(c.model, c.hardware, l, *s, set).tokens_per_s_gpu;
      (e.fits ? out.ranked : out.rejected).push_back(e);
    }
  }
  // Dropless first (capacity computes another model), each by goodput.
  std::stable_sort(out.ranked.begin(), out.ranked.end(), [](const Estimate& a, const Estimate& b) {
    if (a.drops != b.drops) return !a.drops;
    return a.goodput.tokens_per_s > b.goodput.tokens_per_s;
  });
  return out;
}

}  // namespace memfine
