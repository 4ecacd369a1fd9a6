#include "core/record/table.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <set>
#include <sstream>

#include "core/meter/memory_meter.h"
#include "core/meter/timer.h"

namespace memfine {

namespace {

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

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

double num(const json& j) { return j.is_number() ? j.get<double>() : NAN; }

std::string cut(const std::string& s, size_t n) { return s.size() > n ? s.substr(0, n - 3) + "..." : s; }

// The verdict of `verify`: "ok 2e-07" or "FAIL 3e-02"; "-" where it was not checked.
std::string verified_text(const json& r) {
  const json v = r.value("verified", json());
  if (!v.is_boolean()) return "-";
  return std::string(v.get<bool>() ? "ok " : "FAIL ") + fmt("%.0e", r.value("grad_max_rel_err", 0.0));
}

// The note under a table with a verified column.
std::string verified_note(const std::vector<json>& records) {
  std::set<std::string> tolerances;
  bool failed = false;
  for (const auto& r : records)
    if (r.value("verified", json()).is_boolean()) {
      const json& cfg = r.value("config", json::object());
      tolerances.insert(fmt("%.0e", r.value("verify_tolerance", 0.0)) + " for " + cfg.value("dtype", std::string("?")));
      failed |= r["verified"] == false;
    }
  if (tolerances.empty()) return "";
  std::string tol;
  for (const auto& t : tolerances) tol += (tol.empty() ? "" : ", ") + t;
  return "verified = loss and gradients against the reference strategy's (the plain computation; on real ranks one "
         "process computing the whole batch): largest relative error, ok within " +
         tol + (failed ? "; FAIL: this strategy does not compute what the reference does" : "");
}

}  // namespace

std::string text(const Grid& g) {
  std::vector<size_t> w(g.header.size(), 0);
  for (size_t c = 0; c < g.header.size(); ++c) w[c] = g.header[c].size();
  for (const auto& row : g.rows)
    for (size_t c = 0; c < row.size() && c < w.size(); ++c) w[c] = std::max(w[c], row[c].size());
  auto line = [&](const std::vector<std::string>& cells) {
    std::string s;
    for (size_t c = 0; c < w.size(); ++c) {
      const std::string cell = c < cells.size() ? cells[c] : "";
      const std::string pad(w[c] - std::min(w[c], cell.size()), ' ');
      const bool text_column = c < g.left || (g.last_left && c + 1 == w.size());
      s += (c ? " " : "") + (text_column ? cell + pad : pad + cell);
    }
    while (!s.empty() && s.back() == ' ') s.pop_back();
    return s + "\n";
  };
  std::string out = g.title.empty() ? "" : g.title + "\n";
  const std::string head = line(g.header);
  out += head + std::string(head.size() - 1, '-') + "\n";
  for (const auto& row : g.rows) out += line(row);
  for (const auto& n : g.notes) out += n + "\n";
  return out;
}

std::string markdown(const Grid& g) {
  auto esc = [](std::string s) {
    for (size_t i = 0; (i = s.find('|', i)) != std::string::npos; i += 2) s.replace(i, 1, "\\|");
    return s;
  };
  std::string out = g.title.empty() ? "" : g.title + "\n\n";
  out += "|";
  for (const auto& h : g.header) out += " " + esc(h) + " |";
  out += "\n|";
  for (size_t c = 0; c < g.header.size(); ++c)
    out += c < g.left || (g.last_left && c + 1 == g.header.size()) ? "---|" : "---:|";
  out += "\n";
  for (const auto& row : g.rows) {
    out += "|";
    for (const auto& cell : row) out += " " + esc(cell) + " |";
    out += "\n";
  }
  if (!g.notes.empty()) out += "\n";
  for (const auto& n : g.notes) out += n + "\n\n";
  return out;
}

Grid run_grid(const std::vector<json>& records, size_t earlier) {
  Grid g;
  std::string baseline;
  bool verified_any = false;
  for (const auto& r : records) {
    if (r.value("role", json()) == "baseline") baseline = r["strategy"].get<std::string>();
    verified_any |= r.value("verified", json()).is_boolean();
  }
  if (!baseline.empty()) g.title = "ratios against " + baseline + " (the baseline) at the same point";
  g.header = {"point",  "strategy", "status",  "s'",       "chunks",   "dropped",
              "static", "act peak", "step ms", "act/base", "time/base"};
  bool offload_any = false;  // offloading's columns where a strategy offloads
  for (const auto& r : records) offload_any |= r.contains("offload_host_peak_bytes");
  if (offload_any) g.header.push_back("host peak"), g.header.push_back("copy ms (modelled)");
  if (verified_any) g.header.push_back("verified");
  g.left = 3;
  bool any_elsewhere = false, any_earlier = false;
  for (size_t n = 0; n < records.size(); ++n) {
    const json& r = records[n];
    // The baseline at this point; where it ran out of memory, its peak where it fit at the
    // nearest budget of the same point otherwise (marked '*').
    const json* base = nullptr;
    bool elsewhere = false;
    for (const auto& o : records)
      if (o["point"] == r["point"] && o.value("rank", 0) == r.value("rank", 0) &&
          o.value("role", json()) == "baseline" && o["status"] == "ok")
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
      act_ratio = fmt("%.3f", act / num((*base)["peak_activation_bytes"])) + (elsewhere ? "*" : "");
      time_ratio = fmt("%.3f", ms / (*base)["step_ms"]["median"].get<double>()) + (elsewhere ? "*" : "");
      any_elsewhere |= elsewhere;
    }
    const json drop = r.value("dropped_fraction", json());
    const bool old = n < earlier;
    any_earlier |= old;
    const std::string at_rank = r.value("world_size", 1) > 1 ? " r" + std::to_string(r.value("rank", 0)) : "";
    std::vector<std::string> row = {
        cut(r["point"].get<std::string>(), 44) + at_rank + (old ? "^" : ""),
        cut(r["strategy"].get<std::string>(), 60),
        r["status"].get<std::string>(),
        std::to_string(r.value("tokens_received", int64_t(0))),
        chunks_text(r.value("chunks", json())),
        drop.is_number() ? fmt("%.1f%%", 100 * drop.get<double>()) : "-",
        r.value("static_bytes", json()).is_number() ? fmt_bytes(num(r["static_bytes"])) : "-",
        std::isnan(act) ? "-" : fmt_bytes(act),
        std::isnan(ms) ? "-" : fmt("%.1f", ms),
        act_ratio,
        time_ratio};
    if (offload_any) {
      const json host = r.value("offload_host_peak_bytes", json()), copy = r.value("copy_ms_modelled", json());
      row.push_back(host.is_number() ? fmt_bytes(num(host)) : "-");
      row.push_back(copy.is_number() ? fmt("%.2f", copy.get<double>()) : "-");
    }
    if (verified_any) row.push_back(verified_text(r));
    g.rows.push_back(row);
  }
  if (offload_any)
    g.notes.push_back(
        "host peak = offloaded activations held in host memory at once; copy ms (modelled) = the time compute would "
        "wait for the host copies, modelled from the strategy's h2d_gbps / d2h_gbps, never measured; step ms is "
        "measured and on a CPU includes the emulation's own copying (offload_emulation_ms in the records)");
  if (any_elsewhere)
    g.notes.push_back(
        "* the baseline ran out of memory at this point: against its peak and time measured at the nearest "
        "budget where it fit");
  if (any_earlier) {
    std::set<std::string> origins;
    for (size_t n = 0; n < earlier && n < records.size(); ++n) origins.insert(origin(records[n]));
    std::string o;
    for (const auto& x : origins) o += (o.empty() ? "" : "; ") + x;
    g.notes.push_back("^ measured earlier, not by this run (--resume): " + o);
  }
  g.notes.push_back(
      "dropped = share of assignments capacity capping dropped (- for dropless strategies); chunks = count, or "
      "min-max over layers and steps where it varies");
  if (verified_any) g.notes.push_back(verified_note(records));
  return g;
}

Grid train_grid(const std::vector<json>& records) {
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
      run.verified = verified_text(r);
    }
    if (r["status"] != "ok") run.status = r["status"].get<std::string>(), run.ended_at = r.value("step", int64_t(-1));
    if (r.value("eval_loss", json()).is_number()) run.eval = r["eval_loss"].get<double>();
    if (r.value("peak_activation_bytes", json()).is_number())
      run.peak = std::max(run.peak, r["peak_activation_bytes"].get<int64_t>());
    if (r["status"] == "ok" && r.value("step_ms", json()).is_number()) run.ms.push_back(r["step_ms"].get<double>());
  }
  Grid g;
  g.header = {"point",     "strategy", "status",  "steps",    "ended at",
              "eval loss", "act peak", "step ms", "tokens/s", "verified"};
  g.left = 3;
  bool verified_any = false;
  for (const auto& run : runs) {
    const double med = spread(run.ms).median;
    verified_any |= run.verified != "-";
    g.rows.push_back({run.point, run.strategy, run.status, std::to_string(run.steps),
                      run.ended_at < 0 ? "-" : "step " + std::to_string(run.ended_at),
                      std::isnan(run.eval) ? "-" : fmt("%.4f", run.eval),
                      run.peak > 0 ? fmt_bytes(double(run.peak)) : "-", run.ms.empty() ? "-" : fmt("%.1f", med),
                      run.ms.empty() || run.tokens == 0 ? "-" : fmt("%.0f", double(run.tokens) / med * 1e3),
                      run.verified});
  }
  if (!verified_any) {
    g.header.pop_back();
    for (auto& row : g.rows) row.pop_back();
  }
  g.notes.push_back(
      "steps = records of the run; ended at = the step it ran out of memory (or failed) at; eval loss = the "
      "last held-out loss; act peak = the largest step's (the fullest rank's on real ranks); step ms = median");
  if (verified_any) g.notes.push_back(verified_note(records));
  return g;
}

Grid predict_grid(const std::vector<json>& records) {
  auto bytes = [](const json& j, bool decimal) {
    if (!j.is_number()) return std::string("-");
    return decimal ? fmt("%.1f GB", j.get<double>() / 1e9) : fmt_bytes(j.get<double>());
  };
  Grid g;
  g.header = {"point", "strategy", "static", "activation", "total", "fits", "chunks / why"};
  g.last_left = true;
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
    g.rows.push_back({cut(r["point"].get<std::string>(), 48), cut(r["strategy"].get<std::string>(), 60),
                      bytes(st, paper), bytes(act, paper), bytes(total, paper),
                      fits.is_boolean() ? (fits.get<bool>() ? "yes" : "NO") : "-", why});
  }
  std::string note =
      "fits = static + activation within memory.budget (- without one); chunks = MACT's per layer (0: stored)";
  if (any_paper) note += "; paper-scale rows: the paper's Eq. 1-3, in GB (10^9 bytes) as the paper writes them";
  if (any_counts)
    note +=
        "; routing from the workload's counts (the file routes too many tokens to route one by one: --json says "
        "\"routing\" per row)";
  g.notes.push_back(note);
  return g;
}

std::string records_csv(const std::vector<json>& records) {
  // Flat columns: nested objects by dotted key, lists and the rest as JSON text.
  std::vector<std::map<std::string, std::string>> rows;
  std::vector<std::string> order;
  std::set<std::string> seen;
  std::function<void(const json&, const std::string&, std::map<std::string, std::string>&)> flatten =
      [&](const json& j, const std::string& key, std::map<std::string, std::string>& row) {
        if (j.is_object()) {  // an empty one adds no column
          for (const auto& [k, v] : j.items()) flatten(v, key.empty() ? k : key + "." + k, row);
          return;
        }
        row[key] = j.is_string() ? j.get<std::string>() : j.is_null() ? "" : j.dump();
        if (seen.insert(key).second) order.push_back(key);
      };
  for (const auto& r : records) {
    rows.emplace_back();
    flatten(r, "", rows.back());
  }
  // The head first, in the records' order; then the rest by name (config and env last).
  const std::vector<std::string> head = {"experiment", "point", "strategy", "name",      "role",
                                         "status",     "error", "rank",     "world_size"};
  std::vector<std::string> cols;
  for (const auto& h : head)
    if (seen.count(h)) cols.push_back(h);
  std::vector<std::string> rest;
  for (const auto& k : order)
    if (std::find(head.begin(), head.end(), k) == head.end()) rest.push_back(k);
  std::stable_sort(rest.begin(), rest.end(), [](const std::string& a, const std::string& b) {
    auto late = [](const std::string& s) { return s.rfind("config.", 0) == 0 || s.rfind("env.", 0) == 0; };
    if (late(a) != late(b)) return !late(a);
    return a < b;
  });
  cols.insert(cols.end(), rest.begin(), rest.end());
  auto quote = [](const std::string& s) {
    if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
    std::string q = "\"";
    for (char ch : s) q += ch == '"' ? std::string("\"\"") : std::string(1, ch);
    return q + "\"";
  };
  std::string out;
  for (size_t c = 0; c < cols.size(); ++c) out += (c ? "," : "") + quote(cols[c]);
  out += "\n";
  for (const auto& row : rows) {
    for (size_t c = 0; c < cols.size(); ++c) {
      auto it = row.find(cols[c]);
      out += (c ? "," : "") + (it == row.end() ? std::string() : quote(it->second));
    }
    out += "\n";
  }
  return out;
}

}  // namespace memfine
