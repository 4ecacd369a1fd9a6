#include "core/record/record.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "core/meter/flops.h"
#include "core/meter/timer.h"
#include "core/record/environment.h"
#include "core/strategy/strategy.h"

namespace memfine {

std::string fmt_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (std::fabs(b) >= 1024 && u < 4) b /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", b, units[u]);
  return buf;
}

namespace {
const char* role_name(const std::string& strategy) {
  auto it = strategy_registry().find(strategy);
  if (it == strategy_registry().end()) return nullptr;
  switch (it->second.role) {
    case Role::Reference: return "reference";
    case Role::Baseline: return "baseline";
    default: return nullptr;
  }
}
}  // namespace

json new_record(const ExperimentConfig& c, const std::string& point, const StrategySpec& s, const std::string& status,
                const std::string& error) {
  const char* role = role_name(s.name);
  return {{"experiment", c.name}, {"point", point}, {"strategy", s.label()}, {"name", s.name},
          {"role", role ? json(role) : json(nullptr)}, {"status", status},
          {"error", error.empty() ? json(nullptr) : json(error)}, {"seed", c.seed}, {"ep", c.ep},
          {"config", config_to_json(c)}, {"env", environment(c)}};
}

std::vector<json> measured_records(const SweepPoint& pt, const PointRouting& rt, const std::vector<Measured>& ms,
                                   double ceiling) {
  const ExperimentConfig& c = pt.config;
  std::vector<json> records;
  for (const auto& k : ms) {
    json r = new_record(c, pt.id, k.spec, k.status, k.error);
    if (ceiling > 0) r["env"]["matmul_ceiling_tflops"] = ceiling / 1e12;
    r["rank"] = rt.rank;
    r["world_size"] = rt.world;
    if (!rt.backend.empty()) r["backend"] = rt.backend;
    r["tokens_received"] = rt.tokens_received;
    r["tokens_received_per_layer"] = rt.per_layer;
    if (!rt.expert_tokens.empty()) r["expert_tokens"] = rt.expert_tokens, r["expert_tokens_step"] = rt.expert_tokens_step;
    if (!rt.per_step.empty()) r["tokens_received_per_step"] = rt.per_step;
    r["overload_factor"] = rt.overload;
    r["static_bytes"] = k.static_bytes;
    const bool measured = !k.ms.empty();
    r["peak_activation_bytes"] = measured ? json(int64_t(*std::max_element(k.peaks.begin(), k.peaks.end()))) : json(nullptr);
    r["predicted_activation_bytes"] = k.predicted_activation_bytes;
    if (!k.unpredicted_why.empty()) r["unpredicted_why"] = k.unpredicted_why;
    r["budget_bytes"] = c.budget < 0 ? json(nullptr) : json(c.budget);
    if (measured) {
      const Spread s = spread(k.ms);
      r["step_ms"] = {{"median", s.median}, {"min", s.min}, {"max", s.max}};
      r["step_ms_all"] = k.ms;
      r["tokens_per_s"] = double(c.model.tokens()) / (s.median / 1e3);
      r["tflops"] = step_flops(c.model, rt.tokens_received_sum).total() / (s.median / 1e3) / 1e12;
      if (ceiling > 0) r["ceiling_fraction"] = r["tflops"].get<double>() * 1e12 / ceiling;
      r["loss"] = k.loss;
    } else {
      r["step_ms"] = nullptr;
      r["tokens_per_s"] = nullptr;
      r["tflops"] = nullptr;
      r["loss"] = nullptr;
    }
    r["grad_max_rel_err"] = k.grad_err < 0 ? json(nullptr) : json(k.grad_err);
    for (const auto& [key, value] : k.counters.items()) r[key] = value;
    records.push_back(std::move(r));
  }
  return records;
}

std::string summary_table(const std::vector<json>& records) {
  std::ostringstream out;
  char line[400];
  std::snprintf(line, sizeof line, "%-28s %-34s %-6s %9s %7s %11s %11s %10s %8s %8s\n", "point", "strategy", "status",
                "s'", "chunks", "static", "act peak", "step ms", "act/base", "time/base");
  std::string baseline;
  for (const auto& r : records)
    if (r.value("role", json()) == "baseline") baseline = r["strategy"].get<std::string>();
  out << (baseline.empty() ? "" : "ratios against " + baseline + " (the baseline)\n") << line << std::string(140, '-') << "\n";
  for (const auto& r : records) {
    const json* base = nullptr;
    for (const auto& o : records)
      if (o["point"] == r["point"] && o.value("rank", 0) == r.value("rank", 0) && o.value("role", json()) == "baseline" &&
          o["status"] == "ok")
        base = &o;
    auto num = [](const json& j) { return j.is_null() ? NAN : j.get<double>(); };
    const double act = r.contains("peak_activation_bytes") ? num(r["peak_activation_bytes"]) : NAN;
    const double ms = !r.contains("step_ms") || r["step_ms"].is_null() ? NAN : r["step_ms"]["median"].get<double>();
    std::string act_ratio = "-", time_ratio = "-";
    if (base && !std::isnan(act)) {
      char b[32];
      std::snprintf(b, sizeof b, "%.3f", act / num((*base)["peak_activation_bytes"]));
      act_ratio = b;
      std::snprintf(b, sizeof b, "%.3f", ms / (*base)["step_ms"]["median"].get<double>());
      time_ratio = b;
    }
    const json chunks_j = r.value("chunks", json());
    const std::string chunks = chunks_j.is_null() ? "-" : chunks_j.is_array() ? "tuned" : chunks_j.dump();
    std::string point = r["point"].get<std::string>();
    const std::string at_rank = r.value("world_size", 1) > 1 ? " r" + std::to_string(r.value("rank", 0)) : "";
    if (point.size() + at_rank.size() > 28) point = point.substr(0, 25 - at_rank.size()) + "...";
    point += at_rank;
    std::snprintf(line, sizeof line, "%-28s %-34s %-6s %9lld %7s %11s %11s %10s %8s %8s\n", point.c_str(),
                  r["strategy"].get<std::string>().c_str(), r["status"].get<std::string>().c_str(),
                  (long long)r.value("tokens_received", int64_t(0)), chunks.c_str(),
                  r.value("static_bytes", json()).is_null() ? "-" : fmt_bytes(num(r["static_bytes"])).c_str(),
                  std::isnan(act) ? "-" : fmt_bytes(act).c_str(),
                  std::isnan(ms) ? "-" : (std::to_string(ms).substr(0, std::to_string(ms).find('.') + 2)).c_str(),
                  act_ratio.c_str(), time_ratio.c_str());
    out << line;
  }
  return out.str();
}

}  // namespace memfine
