#include "core/record/record.h"

#include <algorithm>
#include <cmath>

#include "core/model/flops.h"
#include "core/record/environment.h"
#include "core/record/schema.h"
#include "core/util/stats.h"

namespace memfine {

PointContext point_context(const ExperimentConfig& c) { return {config_to_json(c), environment(c)}; }

json new_record(const ExperimentConfig& c, const PointContext& ctx, const std::string& point, const StrategySpec& s,
                const std::string& status, const std::string& error) {
  json r = json::object();
  put(r, "experiment", c.name), put(r, "point", point), put(r, "strategy", s.label()), put(r, "name", s.name);
  put(r, "params", s.values), put(r, "role", s.role.empty() ? json(nullptr) : json(s.role));
  put(r, "status", status), put(r, "error", error.empty() ? json(nullptr) : json(error));
  put(r, "seed", c.seed), put(r, "ep", c.ep), put(r, "config", ctx.config), put(r, "env", ctx.env);
  return r;
}

namespace {

// Where the rank ran and what it received.
void put_routing(json& r, const PointRouting& rt) {
  put(r, "rank", rt.rank);
  put(r, "world_size", rt.world);
  if (!rt.backend.empty()) put(r, "backend", rt.backend);
  put(r, "tokens_received", rt.tokens_received);
  put(r, "tokens_received_per_layer", rt.per_layer);
  if (!rt.expert_tokens.empty())
    put(r, "expert_tokens", rt.expert_tokens), put(r, "expert_tokens_step", rt.expert_tokens_step);
  if (!rt.per_step.empty()) put(r, "tokens_received_per_step", rt.per_step);
  put(r, "overload_factor", rt.overload);
}

// The step times and what they give: tokens and model FLOPs per second, the share of the matmul
// ceiling; null where no step was timed.
void put_times(json& r, const ExperimentConfig& c, const PointRouting& rt, const Measured& k, double ceiling) {
  if (k.ms.empty()) {
    for (const char* key : {"step_ms", "tokens_per_s", "tflops", "loss"}) put(r, key, nullptr);
    return;
  }
  const Spread s = spread(k.ms);
  put(r, "step_ms", {{"median", s.median}, {"min", s.min}, {"max", s.max}});
  put(r, "step_ms_all", k.ms);
  put(r, "tokens_per_s", double(c.model.tokens()) / (s.median / 1e3));
  // Model FLOPs of the rows computed: a strategy that drops assignments says which share of the
  // rows its experts receive dropless they compute (counter kept_row_fraction).
  const double kept = k.counters.value("kept_row_fraction", 1.0);
  const double tflops =
      step_flops(c.model, int64_t(double(rt.tokens_received_sum) * kept)).total() / (s.median / 1e3) / 1e12;
  put(r, "tflops", tflops);
  if (ceiling > 0) put(r, "ceiling_fraction", tflops * 1e12 / ceiling);
  put(r, "loss", k.loss);
  // Host work: the timed steps' median (the lower of two middles: a count).
  auto median = [](std::vector<int64_t> v) {
    std::nth_element(v.begin(), v.begin() + (v.size() - 1) / 2, v.end());
    return v[(v.size() - 1) / 2];
  };
  if (!k.ops.empty()) put(r, "ops_per_step", median(k.ops)), put(r, "host_syncs_per_step", median(k.host_syncs));
  if (c.graphs != "none") {
    put(r, "graphs", k.graphs);
    if (!k.graphs_why.empty()) put(r, "graphs_why", k.graphs_why);
    if (k.graph_pool_bytes >= 0) put(r, "graph_pool_bytes", k.graph_pool_bytes);
    if (k.graph_err >= 0) put(r, "graph_err", k.graph_err);
  }
}

}  // namespace

std::vector<json> measured_records(const SweepPoint& pt, const PointContext& ctx, const PointRouting& rt,
                                   const std::vector<Measured>& ms, double ceiling) {
  const ExperimentConfig& c = pt.config;
  std::vector<json> records;
  for (const auto& k : ms) {
    json r = new_record(c, ctx, pt.id, k.spec, k.status, k.error);
    if (ceiling > 0) r["env"]["matmul_ceiling_tflops"] = ceiling / 1e12;
    put_routing(r, rt);
    put(r, "static_bytes", k.static_bytes);
    put(r, "peak_activation_bytes",
        k.ms.empty() ? json(nullptr) : json(int64_t(*std::max_element(k.peaks.begin(), k.peaks.end()))));
    put(r, "predicted_activation_bytes", k.predicted_activation_bytes);
    if (!k.predicted_host_bytes.is_null()) put(r, "predicted_offload_host_peak_bytes", k.predicted_host_bytes);
    if (!k.unpredicted_why.empty()) put(r, "unpredicted_why", k.unpredicted_why);
    put(r, "budget_bytes", c.budget < 0 ? json(nullptr) : json(c.budget));
    put_times(r, c, rt, k, ceiling);
    // The verdict: against the tolerance of the dtype (core/run/verify.h); null when not checked.
    put(r, "grad_max_rel_err", k.grad_err < 0 ? json(nullptr) : json(k.grad_err));
    // A lossy strategy's error is its result: held to no tolerance.
    const bool verdict = k.grad_err >= 0 && !k.lossy;
    put(r, "verify_tolerance", verdict ? json(k.verify_tolerance) : json(nullptr));
    put(r, "verified", verdict ? json(k.grad_err <= k.verify_tolerance) : json(nullptr));
    for (const auto& [key, value] : k.counters.items()) r[key] = value;  // the strategy's, declared by it
    records.push_back(std::move(r));
  }
  return records;
}

}  // namespace memfine
