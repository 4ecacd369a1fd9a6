#include "core/workload/workload.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <numeric>
#include <random>
#include <sstream>
#include <stdexcept>

#include "core/util/format.h"
#include "core/workload/trace.h"

namespace memfine {

std::vector<std::string> workload_kinds() { return {"balanced", "zipf", "lognormal", "hot", "trace", "router"}; }

namespace {

// Portable normal sampling (std::normal_distribution differs between standard libraries).
double normal(std::mt19937_64& rng) {
  const double u1 = (double(rng() >> 11) + 0.5) / 9007199254740992.0;
  const double u2 = (double(rng() >> 11) + 0.5) / 9007199254740992.0;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

std::vector<int64_t> shuffled_ids(int64_t n, std::mt19937_64& rng) {
  std::vector<int64_t> ids(n);
  std::iota(ids.begin(), ids.end(), 0);
  for (int64_t i = n - 1; i > 0; --i) std::swap(ids[i], ids[rng() % uint64_t(i + 1)]);
  return ids;
}

// Integer counts proportional to `weights`, summing to `total`, none above `cap`: water-filling
// for the cap, then largest remainders for the rounding.
std::vector<int64_t> counts_from_weights(const std::vector<double>& weights, int64_t total, int64_t cap) {
  const size_t n = weights.size();
  std::vector<double> share(n, 0.0);
  std::vector<bool> capped(n, false);
  double left = double(total);
  for (size_t round = 0; round <= n; ++round) {
    double wsum = 0;
    for (size_t e = 0; e < n; ++e)
      if (!capped[e]) wsum += weights[e];
    bool changed = false;
    for (size_t e = 0; e < n; ++e) {
      if (capped[e]) continue;
      share[e] = wsum > 0 ? left * weights[e] / wsum : 0.0;
      if (share[e] > double(cap)) {
        share[e] = double(cap);
        capped[e] = true;
        left -= double(cap);
        changed = true;
      }
    }
    if (!changed) break;
  }
  std::vector<int64_t> counts(n);
  int64_t sum = 0;
  std::vector<std::pair<double, size_t>> rem;
  for (size_t e = 0; e < n; ++e) {
    counts[e] = int64_t(std::floor(share[e]));
    sum += counts[e];
    rem.emplace_back(share[e] - double(counts[e]), e);
  }
  std::stable_sort(rem.begin(), rem.end(), [](auto& a, auto& b) { return a.first > b.first; });
  for (size_t i = 0; sum < total; i = (i + 1) % n) {
    if (counts[rem[i].second] < cap) ++counts[rem[i].second], ++sum;
  }
  return counts;
}

}  // namespace


std::vector<int64_t> read_trace(const std::string& path, int64_t layer, int64_t experts, int64_t step) {
  const ParsedTrace& t = trace_of(path);
  if (t.max_expert >= experts)
    throw std::invalid_argument(
        (t.megatron ? t.max_expert_where : path + ":" + std::to_string(t.max_expert_line) + ": ") +
        (t.megatron ? "top_indices: expert " + std::to_string(t.max_expert) + " of a model with " +
                          std::to_string(experts) + " experts"
                    : "expert must be in [0, " + std::to_string(experts) + ")"));
  // Steps and layers the file lacks cycle through those it has, in order.
  auto pick = [](const auto& m, int64_t key) {
    auto it = m.find(key);
    if (it != m.end()) return it;
    it = m.begin();
    std::advance(it, key % int64_t(m.size()));
    return it;
  };
  std::vector<int64_t> counts(size_t(experts), 0);
  for (const auto& [e, n] : pick(pick(t.by_step, std::max<int64_t>(step, 0))->second, layer)->second.rows)
    counts[size_t(e)] += n;
  return counts;
}

std::string trace_csv(const std::vector<StepRouting>& steps) {
  std::string csv = "step,layer,expert,tokens\n";
  for (const auto& [step, layers] : steps)
    for (size_t l = 0; l < layers.size(); ++l)
      for (size_t e = 0; e < layers[l].size(); ++e)
        csv += std::to_string(step) + "," + std::to_string(l) + "," + std::to_string(e) + "," +
               std::to_string(layers[l][e]) + "\n";
  return csv;
}

int64_t trace_steps(const std::string& path) { return int64_t(trace_of(path).by_step.size()); }

void validate_workload(const WorkloadConfig& w, const ModelConfig& m, int64_t ep, bool training) {
  if (w.kind == "router" && ep != 1 && !training)
    throw std::invalid_argument(
        "kind 'router' (the router's own top-k decides) needs parallel.ep = 1: "
        "an emulated rank's peers need a workload to route their tokens");
  if (w.kind == "hot" && w.hot_experts > m.experts)
    throw std::invalid_argument("hot_experts (" + std::to_string(w.hot_experts) + ") exceeds experts (" +
                                std::to_string(m.experts) + ")");
  if (w.hot_placement != "random" && w.kind != "hot")
    throw std::invalid_argument("hot_placement places the hot experts of kind 'hot'; kind is '" + w.kind + "'");
  if (w.schedule == "trace" && w.kind != "trace")
    throw std::invalid_argument("schedule 'trace' replays a trace's steps: it needs kind 'trace'");
  if (w.kind == "trace") {
    if (w.schedule == "trace" && trace_steps(w.trace) < 2)
      throw std::invalid_argument("schedule 'trace' needs a trace with a step column ('step,layer,expert,tokens'); '" +
                                  w.trace + "' has one step");
    // A Megatron trace is of one model: its top-k and its MoE layers are the model's or it is refused
    // (a CSV's layers cycle, as written).
    const ParsedTrace& t = trace_of(w.trace);
    if (t.megatron && t.topk != m.topk)
      throw std::invalid_argument("Megatron trace '" + w.trace + "' routes each token to " + std::to_string(t.topk) +
                                  " experts; the model's topk is " + std::to_string(m.topk));
    if (t.megatron && int64_t(t.layer_ids.size()) != m.moe_layers())
      throw std::invalid_argument("Megatron trace '" + w.trace + "' has " + std::to_string(t.layer_ids.size()) +
                                  " decoder MoE layers (" + std::to_string(t.ranks) + " ranks, " +
                                  std::to_string(t.by_step.size()) + " steps" +
                                  (t.mtp_records ? ", its MTP records apart" : "") + "); the model has " +
                                  std::to_string(m.moe_layers()));
    auto c = read_trace(w.trace, 0, m.experts);
    if (std::accumulate(c.begin(), c.end(), int64_t(0)) == 0)
      throw std::invalid_argument("trace file '" + w.trace + "' routes no tokens");
  }
}

std::vector<int64_t> expert_counts(const WorkloadConfig& w, const ModelConfig& m, int64_t ep, int64_t layer,
                                   uint64_t seed, int64_t step) {
  const int64_t E = m.experts;
  const int64_t total_tokens = ep * m.tokens();
  const int64_t total = total_tokens * m.topk;
  // Which experts are popular stays fixed over steps; a schedule only changes how strongly.
  std::mt19937_64 rng(mix_seed(seed, 1000 + layer));
  const double strength = w.intensity(step, layer, m.layers);
  std::vector<double> weight(E, 1.0);
  // Which experts are popular is random (seeded); how popular follows the workload's law.
  const std::vector<int64_t> order = shuffled_ids(E, rng);
  if (w.kind == "zipf") {
    for (int64_t r = 0; r < E; ++r) weight[order[r]] = std::pow(double(r + 1), -w.alpha * strength);
  } else if (w.kind == "lognormal") {
    for (int64_t e = 0; e < E; ++e) weight[e] = std::exp(w.sigma * strength * normal(rng));
  } else if (w.kind == "hot") {
    const int64_t hot = std::min(w.hot_experts, E);
    // With a schedule the hot share moves between balanced (hot/E) and hot_fraction.
    const double frac = double(hot) / double(E) + strength * (w.hot_fraction - double(hot) / double(E));
    std::vector<int64_t> hot_ids(order.begin(), order.begin() + hot);
    if (w.hot_placement == "one_rank") {
      // Drawn from the seed alone (not the layer), so every layer's hot share lands on one rank.
      std::mt19937_64 pick(mix_seed(seed, 999));
      const int64_t local = std::max<int64_t>(1, E / std::max<int64_t>(ep, 1));
      const int64_t base = int64_t(pick() % uint64_t(std::max<int64_t>(1, E / local))) * local;
      for (int64_t i = 0; i < hot; ++i) hot_ids[size_t(i)] = (base + i) % E;
    }
    const double cold = hot == E ? 0.0 : (1.0 - frac) / double(E - hot);
    std::fill(weight.begin(), weight.end(), cold);
    for (int64_t e : hot_ids) weight[size_t(e)] = frac / double(hot);
  } else if (w.kind == "trace") {
    const auto trace = read_trace(w.trace, layer, E, w.schedule == "trace" ? step : 0);
    for (int64_t e = 0; e < E; ++e) weight[e] = double(trace[e]);
    // Replayed exactly when the trace matches this model's assignment total; scaled otherwise.
    if (std::accumulate(trace.begin(), trace.end(), int64_t(0)) == total &&
        *std::max_element(trace.begin(), trace.end()) <= total_tokens)
      return trace;
  }
  return counts_from_weights(weight, total, total_tokens);
}

at::Tensor assign_experts(const std::vector<int64_t>& counts, int64_t total_tokens, int64_t topk, uint64_t seed) {
  // Slot j of the expert-sorted list goes to token j % T in column j / T. Since no expert has more
  // than T slots, a token never gets the same expert twice.
  std::vector<int64_t> slots;
  slots.reserve(size_t(total_tokens * topk));
  for (size_t e = 0; e < counts.size(); ++e) slots.insert(slots.end(), size_t(counts[e]), int64_t(e));
  if (int64_t(slots.size()) != total_tokens * topk)
    throw std::logic_error("assign_experts: counts do not add up to tokens * topk");
  std::mt19937_64 rng(mix_seed(seed, 77));
  const std::vector<int64_t> token_of = shuffled_ids(total_tokens, rng);
  at::Tensor ids = at::empty({total_tokens, topk}, at::kLong);
  auto acc = ids.accessor<int64_t, 2>();
  for (int64_t j = 0; j < total_tokens * topk; ++j) acc[token_of[j % total_tokens]][j / total_tokens] = slots[j];
  return ids;
}

}  // namespace memfine
