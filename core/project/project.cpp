#include "core/project/project.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <stdexcept>

#include "core/strategy/registry.h"
#include "core/workload/workload.h"

namespace memfine {

Overload project_overload(const ProjectConfig& c, int64_t ep) {
  // One expert-parallel rank holds every expert: it receives its balanced share, however routed.
  if (ep == 1) return {};
  if (c.overload > 0) return {c.overload, c.mean_overload > 0 ? c.mean_overload : c.overload, {}};
  if (c.imbalance.kind == "balanced") return {};
  // The law's routing of one micro-batch-sized draw per MoE layer over `ep` ranks.
  ModelConfig m;
  m.experts = c.model.experts, m.topk = c.model.topk, m.seq = c.model.seq, m.micro_batch = 1,
  m.layers = c.model.moe_layers();
  m.hidden = 8, m.ffn_hidden = 8, m.heads = 1, m.kv_heads = 1, m.head_dim = 8;
  Overload o;
  double sum = 0;
  const int64_t local = m.experts / ep;
  for (int64_t l = 0; l < m.layers; ++l) {
    const auto counts = expert_counts(c.imbalance, m, ep, l, c.seed);
    std::vector<double> rank(size_t(ep), 0.0);
    double total = 0;
    for (int64_t r = 0; r < ep; ++r) {
      for (int64_t e = r * local; e < (r + 1) * local; ++e) rank[size_t(r)] += double(counts[size_t(e)]);
      total += rank[size_t(r)];
    }
    for (double& x : rank) x = total > 0 ? x * double(ep) / total : 1;
    const double x = *std::max_element(rank.begin(), rank.end());
    o.worst = std::max(o.worst, x), sum += x;
    o.shares.push_back(std::move(rank));
  }
  o.mean = m.layers > 0 ? sum / double(m.layers) : 1;
  return o;
}

double Overload::held(int64_t layers) const {
  // Given outright: no rank holds more over its layers than the layers' hottest ranks on average.
  if (shares.empty()) return mean;
  const size_t n = size_t(std::clamp<int64_t>(layers, 1, int64_t(shares.size())));
  double most = 1;
  for (size_t begin = 0; begin < shares.size(); begin += n) {
    const size_t end = std::min(shares.size(), begin + n);
    for (size_t r = 0; r < shares[begin].size(); ++r) {
      double sum = 0;
      for (size_t l = begin; l < end; ++l) sum += shares[l][r];
      most = std::max(most, sum / double(end - begin));
    }
  }
  return most;
}

namespace {
// An estimate's numbers are results: finite and not negative. Rates within their keys' ranges give
// them; this stops what slips past a range (a rate near its least, a framework value) from being
// printed as a step time.
void check_result(const ProjectConfig& c, const Estimate& e) {
  const std::pair<const char*, double> parts[] = {
      {"step time", e.step},       {"peak memory", e.peak_gb},          {"tokens/s", e.tokens_per_s_gpu},
      {"TFLOP/s", e.model_tflops_gpu}, {"goodput", e.goodput.tokens_per_s}, {"need", e.need_gb}};
  for (const auto& [what, x] : parts)
    if (!std::isfinite(x) || x < 0)
      throw std::invalid_argument(c.where("hardware") + ": hardware: its rates give " + e.strategy + " at " +
                                  e.layout.text() + " a " + what + " that is not a result (" + std::to_string(x) +
                                  "); check the rates it names");
}
}  // namespace

ProjectResult run_project(const ProjectConfig& c) {
  ProjectResult out;
  std::vector<std::unique_ptr<Strategy>> strategies;
  for (const auto& spec : c.strategies) strategies.push_back(make_strategy(spec));
  const ProjectSetting setting = project_setting(c);
  for (const Layout& l : layouts(c.search, c.gpus, c.global_batch)) {
    ++out.layouts;
    if (const std::string bad =
            layout_problem(c.model, c.hardware, l, c.pipeline_layout, setting.framework.tp_beyond_kv_heads);
        !bad.empty()) {
      Estimate e;
      e.layout = l, e.why = bad;
      out.rejected.push_back(e);
      continue;
    }
    if (!out.overload.count(l.ep)) out.overload[l.ep] = project_overload(c, l.ep);
    const Overload& o = out.overload[l.ep];
    const double held = o.held((c.model.moe_layers() + l.pp - 1) / l.pp);  // over a pipeline rank's MoE layers
    for (const auto& s : strategies) {
      ProjectSetting set = setting;
      set.overload = o.worst, set.time_overload = o.mean, set.held_overload = held;
      Estimate e = estimate(c.model, c.hardware, l, *s, set);
      set.overload = set.time_overload = set.held_overload = 1;
      e.balanced_tokens_per_s_gpu = estimate(c.model, c.hardware, l, *s, set).tokens_per_s_gpu;
      check_result(c, e);
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
