#include "core/record/record.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <set>
#include <sstream>

#include "core/meter/flops.h"
#include "core/meter/memory_meter.h"
#include "core/meter/timer.h"
#include "core/record/environment.h"
#include "core/strategy/strategy.h"

namespace memfine {

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

PointContext point_context(const ExperimentConfig& c) { return {config_to_json(c), environment(c)}; }

json new_record(const ExperimentConfig& c, const PointContext& ctx, const std::string& point, const StrategySpec& s,
                const std::string& status, const std::string& error) {
  const char* role = role_name(s.name);
  return {{"experiment", c.name}, {"point", point}, {"strategy", s.label()}, {"name", s.name},
          {"role", role ? json(role) : json(nullptr)}, {"status", status},
          {"error", error.empty() ? json(nullptr) : json(error)}, {"seed", c.seed}, {"ep", c.ep},
          {"config", ctx.config}, {"env", ctx.env}};
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
      // Model FLOPs of the rows computed: a strategy that drops assignments says which share of
      // the rows its experts receive dropless they compute (counter kept_row_fraction).
      const double kept = k.counters.value("kept_row_fraction", 1.0);
      r["tflops"] = step_flops(c.model, int64_t(double(rt.tokens_received_sum) * kept)).total() / (s.median / 1e3) / 1e12;
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

namespace {

// The point without its budget: where a strategy that ran out of memory can be set against the
// baseline measured at another budget.
std::string without_budget(const std::string& point) {
  std::string out;
  size_t pos = 0;
  while (pos <= point.size()) {
    size_t comma = point.find(',', pos);
    if (comma == std::string::npos) comma = point.size();
    const std::string part = point.substr(pos, comma - pos);
    if (part.rfind("memory.budget=", 0) != 0) out += (out.empty() ? "" : ",") + part;
    pos = comma + 1;
  }
  return out;
}

double budget_of(const json& r) {
  const json b = r.value("budget_bytes", json());
  return b.is_number() ? b.get<double>() : INFINITY;
}

// "4"; per layer or per step and layer: "min-max".
std::string chunks_text(const json& c) {
  if (c.is_null()) return "-";
  if (c.is_number()) return c.dump();
  int64_t lo = INT64_MAX, hi = INT64_MIN;
  std::function<void(const json&)> walk = [&](const json& j) {
    if (j.is_array())
      for (const auto& x : j) walk(x);
    else if (j.is_number())
      lo = std::min(lo, j.get<int64_t>()), hi = std::max(hi, j.get<int64_t>());
  };
  walk(c);
  if (lo > hi) return "-";
  return lo == hi ? std::to_string(lo) : std::to_string(lo) + "-" + std::to_string(hi);
}

std::string origin(const json& r) {
  const json env = r.value("env", json::object());
  return env.value("device_name", std::string("?")) + ", commit " + env.value("git_commit", std::string("?")) + ", " +
         env.value("date", std::string("?"));
}

}  // namespace

std::string summary_table(const std::vector<json>& records, size_t earlier) {
  std::ostringstream out;
  size_t label = 8, point_w = 5;
  for (const auto& r : records) {
    label = std::max(label, r["strategy"].get<std::string>().size());
    point_w = std::max(point_w, r["point"].get<std::string>().size() + (r.value("world_size", 1) > 1 ? 4 : 0) + 1);
  }
  label = std::min<size_t>(label, 60), point_w = std::min<size_t>(point_w, 48);
  std::string baseline;
  for (const auto& r : records)
    if (r.value("role", json()) == "baseline") baseline = r["strategy"].get<std::string>();
  auto num = [](const json& j) { return j.is_number() ? j.get<double>() : NAN; };
  bool any_elsewhere = false, any_earlier = false;
  std::vector<std::string> lines;
  for (size_t n = 0; n < records.size(); ++n) {
    const json& r = records[n];
    // The baseline at this point; where it ran out of memory, its peak where it fit at the
    // nearest budget of the same point otherwise (marked '*').
    const json* base = nullptr;
    bool elsewhere = false;
    for (const auto& o : records)
      if (o["point"] == r["point"] && o.value("rank", 0) == r.value("rank", 0) && o.value("role", json()) == "baseline" &&
          o["status"] == "ok")
        base = &o;
    if (!base) {
      const std::string rest = without_budget(r["point"].get<std::string>());
      double best = INFINITY;
      for (const auto& o : records)
        if (o.value("role", json()) == "baseline" && o["status"] == "ok" && o.value("rank", 0) == r.value("rank", 0) &&
            without_budget(o["point"].get<std::string>()) == rest) {
          const double d = std::fabs(std::log(budget_of(o) == INFINITY ? 1e30 : budget_of(o)) -
                                     std::log(budget_of(r) == INFINITY ? 1e30 : budget_of(r)));
          if (d < best) best = d, base = &o, elsewhere = true;
        }
    }
    const double act = num(r.value("peak_activation_bytes", json()));
    const json step = r.value("step_ms", json());
    const double ms = step.is_object() ? step["median"].get<double>() : NAN;
    std::string act_ratio = "-", time_ratio = "-";
    if (base && !std::isnan(act)) {
      char b[32];
      std::snprintf(b, sizeof b, "%.3f%s", act / num((*base)["peak_activation_bytes"]), elsewhere ? "*" : "");
      act_ratio = b;
      std::snprintf(b, sizeof b, "%.3f%s", ms / (*base)["step_ms"]["median"].get<double>(), elsewhere ? "*" : "");
      time_ratio = b;
      any_elsewhere |= elsewhere;
    }
    std::string dropped = "-";
    if (r.contains("dropped_fraction") && r["dropped_fraction"].is_number()) {
      char b[32];
      std::snprintf(b, sizeof b, "%.1f%%", 100 * r["dropped_fraction"].get<double>());
      dropped = b;
    }
    std::string point = r["point"].get<std::string>();
    const std::string at_rank = r.value("world_size", 1) > 1 ? " r" + std::to_string(r.value("rank", 0)) : "";
    const bool old = n < earlier;
    any_earlier |= old;
    if (point.size() + at_rank.size() + 1 > point_w) point = point.substr(0, point_w - at_rank.size() - 4) + "...";
    point += at_rank + (old ? "^" : "");
    std::string strategy = r["strategy"].get<std::string>();
    if (strategy.size() > label) strategy = strategy.substr(0, label - 3) + "...";
    char line[512];
    std::snprintf(line, sizeof line, "%-*s %-*s %-6s %9lld %7s %8s %11s %11s %10s %9s %9s", int(point_w), point.c_str(),
                  int(label), strategy.c_str(), r["status"].get<std::string>().c_str(),
                  (long long)r.value("tokens_received", int64_t(0)), chunks_text(r.value("chunks", json())).c_str(),
                  dropped.c_str(), r.value("static_bytes", json()).is_number() ? fmt_bytes(num(r["static_bytes"])).c_str() : "-",
                  std::isnan(act) ? "-" : fmt_bytes(act).c_str(),
                  std::isnan(ms) ? "-" : (std::to_string(ms).substr(0, std::to_string(ms).find('.') + 2)).c_str(),
                  act_ratio.c_str(), time_ratio.c_str());
    lines.push_back(line);
  }
  char head[512];
  std::snprintf(head, sizeof head, "%-*s %-*s %-6s %9s %7s %8s %11s %11s %10s %9s %9s", int(point_w), "point", int(label),
                "strategy", "status", "s'", "chunks", "dropped", "static", "act peak", "step ms", "act/base", "time/base");
  if (!baseline.empty()) out << "ratios against " << baseline << " (the baseline) at the same point\n";
  out << head << "\n" << std::string(std::strlen(head), '-') << "\n";
  for (const auto& l : lines) out << l << "\n";
  if (any_elsewhere)
    out << "* the baseline ran out of memory at this point: against its peak and time measured at the nearest budget where "
           "it fit\n";
  if (any_earlier) {
    std::set<std::string> origins;
    for (size_t n = 0; n < earlier && n < records.size(); ++n) origins.insert(origin(records[n]));
    out << "^ measured earlier, not by this run (--resume): ";
    bool first = true;
    for (const auto& o : origins) out << (first ? "" : "; ") << o, first = false;
    out << "\n";
  }
  out << "dropped = share of assignments capacity capping dropped (- for dropless strategies); chunks = count, or "
         "min-max over layers and steps where it varies\n";
  return out.str();
}

}  // namespace memfine
