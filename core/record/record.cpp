#include "core/record/record.h"

#include <algorithm>
#include <cmath>

#include "core/meter/memory_meter.h"
#include "core/meter/timer.h"
#include "core/model/flops.h"
#include "core/record/environment.h"

namespace memfine {

PointContext point_context(const ExperimentConfig& c) { return {config_to_json(c), environment(c)}; }

json new_record(const ExperimentConfig& c, const PointContext& ctx, const std::string& point, const StrategySpec& s,
                const std::string& status, const std::string& error) {
  return {{"experiment", c.name},  {"point", point},
          {"strategy", s.label()}, {"name", s.name},
          {"params", s.values},    {"role", s.role.empty() ? json(nullptr) : json(s.role)},
          {"status", status},      {"error", error.empty() ? json(nullptr) : json(error)},
          {"seed", c.seed},        {"ep", c.ep},
          {"config", ctx.config},  {"env", ctx.env}};
}

std::vector<json> measured_records(const SweepPoint& pt, const PointContext& ctx, const PointRouting& rt,
                                   const std::vector<Measured>& ms, double ceiling) {
  const ExperimentConfig& c = pt.config;
  std::vector<json> records;
  for (const auto& k : ms) {
    json r = new_record(c, ctx, pt.id, k.spec, k.status, k.error);
    if (ceiling > 0) r["env"]["matmul_ceiling_tflops"] = ceiling / 1e12;
    r["rank"] = rt.rank;
    r["world_size"] = rt.world;
    if (!rt.backend.empty()) r["backend"] = rt.backend;
    r["tokens_received"] = rt.tokens_received;
    r["tokens_received_per_layer"] = rt.per_layer;
    if (!rt.expert_tokens.empty())
      r["expert_tokens"] = rt.expert_tokens, r["expert_tokens_step"] = rt.expert_tokens_step;
    if (!rt.per_step.empty()) r["tokens_received_per_step"] = rt.per_step;
    r["overload_factor"] = rt.overload;
    r["static_bytes"] = k.static_bytes;
    const bool measured = !k.ms.empty();
    r["peak_activation_bytes"] =
        measured ? json(int64_t(*std::max_element(k.peaks.begin(), k.peaks.end()))) : json(nullptr);
    r["predicted_activation_bytes"] = k.predicted_activation_bytes;
    if (!k.predicted_host_bytes.is_null()) r["predicted_offload_host_peak_bytes"] = k.predicted_host_bytes;
    if (!k.unpredicted_why.empty()) r["unpredicted_why"] = k.unpredicted_why;
    r["budget_bytes"] = c.budget < 0 ? json(nullptr) : json(c.budget);
    if (measured) {
      const Spread s = spread(k.ms);
      r["step_ms"] = {{"median", s.median}, {"min", s.min}, {"max", s.max}};
      r["step_ms_all"] = k.ms;
      r["tokens_per_s"] = double(c.model.tokens()) / (s.median / 1e3);
      // Model FLOPs of the rows computed: a strategy that drops assignments says which share of
      // the rows its experts receive dropless they compute (counter kept_row_fraction).
      const double kept = k.counters.value("kept_row_fraction", 1.0);
      r["tflops"] =
          step_flops(c.model, int64_t(double(rt.tokens_received_sum) * kept)).total() / (s.median / 1e3) / 1e12;
      if (ceiling > 0) r["ceiling_fraction"] = r["tflops"].get<double>() * 1e12 / ceiling;
      r["loss"] = k.loss;
    } else {
      r["step_ms"] = nullptr;
      r["tokens_per_s"] = nullptr;
      r["tflops"] = nullptr;
      r["loss"] = nullptr;
    }
    r["grad_max_rel_err"] = k.grad_err < 0 ? json(nullptr) : json(k.grad_err);
    // The verdict: against the tolerance of the dtype (core/run/verify.h); null when not checked.
    r["verify_tolerance"] = k.grad_err < 0 ? json(nullptr) : json(k.verify_tolerance);
    r["verified"] = k.grad_err < 0 ? json(nullptr) : json(k.grad_err <= k.verify_tolerance);
    for (const auto& [key, value] : k.counters.items()) r[key] = value;
    records.push_back(std::move(r));
  }
  return records;
}

}  // namespace memfine
