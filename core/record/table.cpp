#include "core/record/table.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <set>
#include <sstream>

#include "core/meter/memory_meter.h"
#include "core/meter/timer.h"

namespace memfine {

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
  // The verify column only where something was verified: the error and its verdict.
  bool verified_any = false;
  for (const auto& r : records) verified_any |= r.value("verified", json()).is_boolean();
  auto verified_text = [&](const json& r) -> std::string {
    const json v = r.value("verified", json());
    if (!verified_any) return "";
    if (!v.is_boolean()) return "          -";
    char b[32];
    std::snprintf(b, sizeof b, " %4s %.0e", v.get<bool>() ? "ok" : "FAIL", r["grad_max_rel_err"].get<double>());
    return b;
  };
  bool any_elsewhere = false, any_earlier = false, any_failed = false;
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
    any_failed |= r.value("verified", json()) == false;
    char line[512];
    std::snprintf(line, sizeof line, "%-*s %-*s %-6s %9lld %7s %8s %11s %11s %10s %9s %9s%s", int(point_w), point.c_str(),
                  int(label), strategy.c_str(), r["status"].get<std::string>().c_str(),
                  (long long)r.value("tokens_received", int64_t(0)), chunks_text(r.value("chunks", json())).c_str(),
                  dropped.c_str(), r.value("static_bytes", json()).is_number() ? fmt_bytes(num(r["static_bytes"])).c_str() : "-",
                  std::isnan(act) ? "-" : fmt_bytes(act).c_str(),
                  std::isnan(ms) ? "-" : (std::to_string(ms).substr(0, std::to_string(ms).find('.') + 2)).c_str(),
                  act_ratio.c_str(), time_ratio.c_str(), verified_text(r).c_str());
    lines.push_back(line);
  }
  char head[512];
  std::snprintf(head, sizeof head, "%-*s %-*s %-6s %9s %7s %8s %11s %11s %10s %9s %9s%s", int(point_w), "point", int(label),
                "strategy", "status", "s'", "chunks", "dropped", "static", "act peak", "step ms", "act/base", "time/base",
                verified_any ? "    verified" : "");
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
  if (verified_any) {
    std::set<std::string> tolerances;
    for (const auto& r : records)
      if (r.value("verified", json()).is_boolean()) {
        char b[64];
        std::snprintf(b, sizeof b, "%.0e for %s", r["verify_tolerance"].get<double>(),
                      r["config"]["dtype"].get<std::string>().c_str());
        tolerances.insert(b);
      }
    std::string tol;
    for (const auto& t : tolerances) tol += (tol.empty() ? "" : ", ") + t;
    out << "verified = loss and gradients against the reference strategy's (the plain computation; on real ranks one "
           "process computing the whole batch): largest relative error, ok within "
        << tol << (any_failed ? "; FAIL: this strategy does not compute what the reference does" : "") << "\n";
  }
  return out.str();
}

std::string predict_table(const std::vector<json>& records) {
  size_t label = 8, point_w = 5;
  for (const auto& r : records)
    label = std::max(label, r["strategy"].get<std::string>().size()), point_w = std::max(point_w, r["point"].get<std::string>().size());
  label = std::min<size_t>(label, 60), point_w = std::min<size_t>(point_w, 48);
  auto gb = [](const json& j, bool decimal) {
    if (!j.is_number()) return std::string("-");
    if (!decimal) return fmt_bytes(j.get<double>());
    char b[32];
    std::snprintf(b, sizeof b, "%.1f GB", j.get<double>() / 1e9);
    return std::string(b);
  };
  std::ostringstream out;
  char line[1024];
  std::snprintf(line, sizeof line, "%-*s %-*s %11s %11s %11s %5s  %s", int(point_w), "point", int(label), "strategy", "static",
                "activation", "total", "fits", "chunks / why");
  out << line << "\n" << std::string(std::strlen(line) + 8, '-') << "\n";
  bool any_paper = false, any_counts = false;
  for (const auto& r : records) {
    const bool paper = r.value("model", std::string()) == "paper";
    any_paper |= paper;
    any_counts |= r.value("routing", std::string()) == "counts";
    json st = paper ? json(r.value("static_gb", 0.0) * 1e9) : r.value("predicted_static_bytes", json());
    json act = paper ? json(r.value("activation_gb", 0.0) * 1e9) : r.value("predicted_activation_bytes", json());
    json total = st.is_number() && act.is_number() ? json(st.get<double>() + act.get<double>()) : json();
    if (r["status"] == "unpredicted") st = act = total = json();
    const json fits = r.value("fits", json());
    std::string why = r.value("unpredicted_why", r.value("fits_why", std::string()));
    if (why.empty() && r.contains("chunks")) {
      const json& c = r["chunks"];
      why = c.is_array() && !c.empty() && c[0].is_array() ? "per step: " + chunks_text(c) : c.dump();
    }
    std::string point = r["point"].get<std::string>(), strategy = r["strategy"].get<std::string>();
    if (point.size() > point_w) point = point.substr(0, point_w - 3) + "...";
    if (strategy.size() > label) strategy = strategy.substr(0, label - 3) + "...";
    std::snprintf(line, sizeof line, "%-*s %-*s %11s %11s %11s %5s  %s", int(point_w), point.c_str(), int(label),
                  strategy.c_str(), gb(st, paper).c_str(), gb(act, paper).c_str(), gb(total, paper).c_str(),
                  fits.is_boolean() ? (fits.get<bool>() ? "yes" : "NO") : "-", why.c_str());
    out << line << "\n";
  }
  out << "fits = static + activation within memory.budget (- without one); chunks = MACT's per layer (0: stored)";
  if (any_paper) out << "; paper-scale rows: the paper's Eq. 1-3, in GB (10^9 bytes) as the paper writes them";
  if (any_counts)
    out << "; routing from the workload's counts (the file routes too many tokens to route one by one: --json "
           "says \"routing\" per row)";
  out << "\n";
  return out.str();
}

std::string train_table(const std::vector<json>& records) {
  struct Run {
    std::string point, strategy, status = "ok", verified = "-";
    int64_t steps = 0, ended_at = -1, peak = 0, tokens = 0;
    double eval = NAN;
    std::vector<double> ms;
  };
  std::vector<Run> runs;
  auto find = [&](const json& r) -> Run& {
    for (auto& run : runs)
      if (run.point == r["point"] && run.strategy == r["strategy"]) return run;
    runs.push_back(Run{r["point"].get<std::string>(), r["strategy"].get<std::string>()});
    return runs.back();
  };
  for (const auto& r : records) {
    Run& run = find(r);
    ++run.steps;
    if (r.contains("config")) {  // the run's head
      const json& m = r["config"]["model"];
      run.tokens = m["seq"].get<int64_t>() * m["micro_batch"].get<int64_t>() * r.value("ranks", int64_t(1));
      if (r.value("verified", json()).is_boolean()) run.verified = r["verified"].get<bool>() ? "ok" : "FAIL";
    }
    if (r["status"] != "ok") run.status = r["status"].get<std::string>(), run.ended_at = r.value("step", int64_t(-1));
    if (r.value("eval_loss", json()).is_number()) run.eval = r["eval_loss"].get<double>();
    if (r.value("peak_activation_bytes", json()).is_number())
      run.peak = std::max(run.peak, r["peak_activation_bytes"].get<int64_t>());
    if (r["status"] == "ok" && r.value("step_ms", json()).is_number()) run.ms.push_back(r["step_ms"].get<double>());
  }
  size_t label = 8, point_w = 5;
  for (const auto& run : runs) label = std::max(label, run.strategy.size()), point_w = std::max(point_w, run.point.size());
  std::ostringstream out;
  char line[512];
  std::snprintf(line, sizeof line, "%-*s %-*s %-6s %6s %9s %10s %11s %10s %10s %8s", int(point_w), "point", int(label),
                "strategy", "status", "steps", "ended at", "eval loss", "act peak", "step ms", "tokens/s", "verified");
  out << line << "\n" << std::string(std::strlen(line), '-') << "\n";
  for (const auto& run : runs) {
    const double med = spread(run.ms).median;
    std::snprintf(line, sizeof line, "%-*s %-*s %-6s %6lld %9s %10s %11s %10s %10s %8s", int(point_w), run.point.c_str(),
                  int(label), run.strategy.c_str(), run.status.c_str(), (long long)run.steps,
                  run.ended_at < 0 ? "-" : ("step " + std::to_string(run.ended_at)).c_str(),
                  std::isnan(run.eval) ? "-" : std::to_string(run.eval).substr(0, 6).c_str(),
                  run.peak > 0 ? fmt_bytes(double(run.peak)).c_str() : "-",
                  run.ms.empty() ? "-" : std::to_string(med).substr(0, std::to_string(med).find('.') + 2).c_str(),
                  run.ms.empty() || run.tokens == 0 ? "-" : std::to_string(int64_t(double(run.tokens) / med * 1e3)).c_str(),
                  run.verified.c_str());
    out << line << "\n";
  }
  out << "steps = records of the run; ended at = the step it ran out of memory (or failed) at; eval loss = the last "
         "held-out loss; act peak = the largest step's (the fullest rank's on real ranks); step ms = median\n";
  return out.str();
}

}  // namespace memfine
