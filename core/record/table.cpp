#include "core/record/table.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <set>
#include <sstream>

#include "core/record/schema.h"
#include "core/util/format.h"
#include "core/util/stats.h"

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

std::string origin(const RecordView& r) {
  const json env = r.env.is_object() ? r.env : json::object();
  return env.value("device_name", std::string("?")) + ", commit " + env.value("git_commit", std::string("?")) + ", " +
         env.value("date", std::string("?"));
}

std::string cut(const std::string& s, size_t n) { return s.size() > n ? s.substr(0, n - 3) + "..." : s; }

// The verdict of `verify`: "ok 2e-07" or "FAIL 3e-02"; a lossy strategy's error, "err 3e-02" (held to
// no tolerance); "-" where it was not checked.
std::string verified_text(const RecordView& r) {
  if (r.status != "ok") return "-";  // out of memory or failed: the row's step did not run to be checked
  if (!r.verified) return r.grad_max_rel_err ? "err " + fmt_double("%.0e", *r.grad_max_rel_err) : "-";
  return std::string(*r.verified ? "ok " : "FAIL ") + fmt_double("%.0e", r.grad_max_rel_err.value_or(0.0));
}

// The note under a table with a verified column.
std::string verified_note(const std::vector<RecordView>& records) {
  std::set<std::string> tolerances;
  bool failed = false;
  for (const auto& r : records)
    if (r.verified) {
      const json cfg = r.config.is_object() ? r.config : json::object();
      tolerances.insert(fmt_double("%.0e", r.verify_tolerance.value_or(0.0)) + " for " +
                        cfg.value("dtype", std::string("?")));
      failed |= !*r.verified;
    }
  bool lossy = false;
  for (const auto& r : records) lossy |= !r.verified && r.grad_max_rel_err;
  const std::string err = lossy ? "err = a lossy strategy's largest relative error of loss and gradients against the "
                                  "plain computation: its result, held to no tolerance"
                                : "";
  if (tolerances.empty()) return err;
  std::string tol;
  for (const auto& t : tolerances) tol += (tol.empty() ? "" : ", ") + t;
  return "verified = loss and gradients against the reference strategy's (the plain computation; on real ranks one "
         "process computing the whole batch): largest relative error, ok within " +
         tol + (failed ? "; FAIL: this strategy does not compute what the reference does" : "") +
         (lossy ? "; " + err : "");
}

std::vector<RecordView> views(const std::vector<json>& records) {
  std::vector<RecordView> out;
  for (size_t i = 0; i < records.size(); ++i) out.push_back(view_of(records[i], "record " + std::to_string(i + 1)));
  return out;
}

// The baseline at `r`'s point; where it ran out of memory there, where it fit at the nearest budget
// of the same point otherwise (`elsewhere`).
const RecordView* baseline_of(const std::vector<RecordView>& rs, const RecordView& r, bool& elsewhere) {
  const RecordView* base = nullptr;
  elsewhere = false;
  // The baseline at its defaults where the run has it with other parameters too (skip_dead).
  for (const auto& o : rs)
    if (o.point == r.point && o.rank == r.rank && o.role == "baseline" && o.status == "ok" &&
        (!base || o.strategy == o.name))
      base = &o;
  if (base) return base;
  const std::string rest = without_budget(r.point);
  auto budget = [](const RecordView& x) { return x.budget_bytes.value_or(1e30); };
  double best = INFINITY;
  for (const auto& o : rs)
    if (o.role == "baseline" && o.status == "ok" && o.rank == r.rank && without_budget(o.point) == rest) {
      const double d = std::fabs(std::log(budget(o)) - std::log(budget(r)));
      if (d < best) best = d, base = &o, elsewhere = true;
    }
  return base;
}

// The timed steps spread more than this around their median ((max - min) / median): the machine was
// busy, or the steps differ; a time then says little beside another run's.
constexpr double kNoisySpread = 0.3;

bool noisy(const RecordView& r) {
  if (!r.step_ms || !(r.step_ms->median > 0)) return false;
  return (r.step_ms->max - r.step_ms->min) / r.step_ms->median > kNoisySpread;
}

// Where a sweep over a routing law's parameter stops raising the hottest rank's rows (zipf under
// top-k saturates: no expert twice per token caps a rank's share), the note that says so: the law's
// parameter is not the imbalance; s' (the overload) is.
std::string saturation_note(const std::vector<RecordView>& rs) {
  std::map<std::string, std::map<double, double>> by;  // (law, the rest of the point) -> value -> s'
  for (const auto& r : rs) {
    if (!r.tokens_received) continue;
    std::string rest, law;
    double value = NAN;
    std::stringstream parts(r.point);
    for (std::string kv; std::getline(parts, kv, ',');) {
      const size_t eq = kv.find('=');
      if (eq != std::string::npos && kv.rfind("workload.", 0) == 0 && kv.substr(0, eq) != "workload.kind") {
        char* end = nullptr;
        const std::string v = kv.substr(eq + 1);
        value = std::strtod(v.c_str(), &end);
        if (end == v.c_str()) value = NAN;
        law = kv.substr(0, eq);
      } else {
        rest += kv + ",";
      }
    }
    if (std::isnan(value)) continue;
    double& sp = by[law + "|" + rest][value];
    sp = std::max(sp, *r.tokens_received);
  }
  for (const auto& [key, curve] : by) {
    double prev_v = NAN, prev_s = NAN;
    for (const auto& [v, sp] : curve) {
      if (!std::isnan(prev_s) && sp <= prev_s)
        return key.substr(0, key.find('|')) + " " + fmt_double("%g", v) + " gave the hottest rank no more rows (s' " +
               fmt_double("%.0f", sp) + ") than " + fmt_double("%g", prev_v) + " (" + fmt_double("%.0f", prev_s) +
               "): the law saturates here; read imbalance as s' (the overload), not as the law's parameter";
      prev_v = v, prev_s = sp;
    }
  }
  return "";
}

// Which of the optional columns a table shows: all with --wide; else those that say something.
struct Columns {
  bool chunks = true, dropped = true, statics = true;
};

std::vector<std::string> run_row(const RecordView& r, const RecordView* base, bool elsewhere, bool old,
                                 const Columns& cols) {
  const double act = r.peak_activation_bytes.value_or(NAN);
  const double ms = r.raw && (*r.raw).value("step_ms", json()).is_object() ? r.step_ms->median : NAN;
  std::string act_ratio = "-", time_ratio = "-";
  if (base && !std::isnan(act)) {
    act_ratio = fmt_double("%.3f", act / base->peak_activation_bytes.value_or(NAN)) + (elsewhere ? "*" : "");
    time_ratio = fmt_double("%.3f", ms / base->step_ms->median) + (elsewhere ? "*" : "");
  }
  const json drop = r.get("dropped_fraction");
  const std::string at_rank = r.world_size > 1 ? " r" + std::to_string(r.rank) : "";
  std::vector<std::string> row = {r.point + at_rank + (old ? "^" : ""), r.strategy,
                                  r.status, std::to_string(int64_t(r.tokens_received.value_or(0)))};
  if (cols.chunks) row.push_back(chunks_text(r.get("chunks")));
  if (cols.dropped) row.push_back(drop.is_number() ? fmt_double("%.1f%%", 100 * drop.get<double>()) : "-");
  if (cols.statics) row.push_back(r.static_bytes ? fmt_bytes(*r.static_bytes) : "-");
  row.push_back(std::isnan(act) ? "-" : fmt_bytes(act));
  row.push_back(std::isnan(ms) ? "-" : fmt_double("%.1f", ms) + (noisy(r) ? "~" : ""));
  row.push_back(act_ratio);
  row.push_back(time_ratio);
  return row;
}

}  // namespace

void fit_width(Grid& g, size_t width, const std::vector<std::pair<size_t, size_t>>& cuts) {
  auto widest = [&](size_t c) {
    size_t w = c < g.header.size() ? columns(g.header[c]) : 0;
    if (c < g.units.size()) w = std::max(w, columns(g.units[c]));
    for (const auto& row : g.rows) w = std::max(w, c < row.size() ? columns(row[c]) : 0);
    return w;
  };
  size_t total = g.header.empty() ? 0 : g.header.size() - 1;
  for (size_t c = 0; c < g.header.size(); ++c) total += widest(c);
  for (const auto& [column, least] : cuts) {
    const size_t w = widest(column);
    if (total <= width || w <= least) continue;
    const size_t to = std::max(least, w - (total - width));
    for (auto& row : g.rows)
      if (column < row.size()) row[column] = cut(row[column], to);
    total -= w - widest(column);
  }
}


Grid run_grid(const std::vector<json>& records, size_t earlier, bool wide) {
  const std::vector<RecordView> rs = views(records);
  Grid g;
  Columns cols;
  bool any_noisy = false;
  if (!wide) {
    cols.statics = false;
    cols.chunks = cols.dropped = false;
    for (const auto& r : rs) {
      cols.chunks |= r.get("chunks").is_array() || r.get("chunks").is_number();
      cols.dropped |= r.get("dropped_fraction").is_number();
    }
  }
  std::string baseline;
  bool verified_any = false, offload_any = false;  // offloading's columns where a strategy offloads
  for (const auto& r : rs) {
    if (r.role == "baseline" && (baseline.empty() || r.strategy == r.name)) baseline = r.strategy;
    verified_any |= r.verified.has_value() || r.grad_max_rel_err.has_value();
    offload_any |= r.raw->contains("offload_host_peak_bytes");
  }
  const bool offload_columns = offload_any && wide;  // within 120 columns: offloading's two with --wide
  if (!baseline.empty()) g.title = "ratios against " + baseline + " (the baseline) at the same point";
  g.header = {"point", "strategy", "status", "s'"};
  if (cols.chunks) g.header.push_back("chunks");
  if (cols.dropped) g.header.push_back("dropped");
  if (cols.statics) g.header.push_back("static");
  for (const char* h : {"act peak", "step ms", "act/base", "time/base"}) g.header.push_back(h);
  if (offload_columns) g.header.push_back("host peak"), g.header.push_back("copy ms (modelled)");
  bool host_any = false;  // the host's work a step, with --wide (records before it have none)
  for (const auto& r : rs) host_any |= r.raw->contains("ops_per_step");
  const bool host_columns = host_any && wide;
  if (host_columns) g.header.push_back("ops/step"), g.header.push_back("syncs/step");
  if (verified_any) g.header.push_back("verified");
  g.left = 3;
  bool any_elsewhere = false;
  for (size_t n = 0; n < rs.size(); ++n) {
    const RecordView& r = rs[n];
    bool elsewhere = false;
    const RecordView* base = baseline_of(rs, r, elsewhere);
    any_elsewhere |= elsewhere && base && r.peak_activation_bytes;
    std::vector<std::string> row = run_row(r, base, elsewhere, n < earlier, cols);
    any_noisy |= noisy(r);
    if (offload_columns) {
      const json host = r.get("offload_host_peak_bytes"), copy = r.get("copy_ms_modelled");
      row.push_back(host.is_number() ? fmt_bytes(host.get<double>()) : "-");
      row.push_back(copy.is_number() ? fmt_double("%.2f", copy.get<double>()) : "-");
    }
    if (host_columns)
      for (const char* key : {"ops_per_step", "host_syncs_per_step"}) {
        const json v = r.get(key);
        row.push_back(v.is_number_integer() ? std::to_string(v.get<int64_t>()) : "-");
      }
    if (verified_any) row.push_back(verified_text(r));
    g.rows.push_back(row);
  }
  if (offload_columns)
    g.notes.push_back(
        "host peak = offloaded activations held in host memory at once; copy ms (modelled) = the time compute would "
        "wait for the host copies, modelled from the strategy's h2d_gbps / d2h_gbps, never measured; step ms is "
        "measured and on a CPU includes the emulation's own copying (offload_emulation_ms in the records)");
  if (host_columns)
    g.notes.push_back(
        "ops/step = operators the host dispatched in a step at the top level (autograd's included); syncs/step = "
        "reads of device values the host waited for (memfine schema: ops_per_step, host_syncs_per_step)");
  if (any_elsewhere)
    g.notes.push_back(
        "* the baseline ran out of memory at this point: against its peak and time measured at the nearest "
        "budget where it fit");
  if (earlier > 0 && !rs.empty()) {
    std::set<std::string> origins;
    for (size_t n = 0; n < earlier && n < rs.size(); ++n) origins.insert(origin(rs[n]));
    std::string o;
    for (const auto& x : origins) o += (o.empty() ? "" : "; ") + x;
    g.notes.push_back("^ measured earlier, not by this run (--resume): " + o);
  }
  if (cols.dropped || cols.chunks)
    g.notes.push_back(
        "dropped = share of assignments capacity capping dropped (- for dropless strategies); chunks = count, or "
        "min-max over layers and steps where it varies");
  if (any_noisy)
    g.notes.push_back(
        "~ its timed steps spread more than 30% around the median (max - min): the machine was busy, or the steps "
        "differ; compare within one run (memfine compare tests every timed step), not against another machine's");
  if (const std::string sat = saturation_note(rs); !sat.empty()) g.notes.push_back("! " + sat);
  if (!wide)
    g.notes.push_back(std::string("memfine table DIR --wide: every column, labels in full") +
                      (offload_any ? " (offloading's host peak and modelled copy ms among them)" : ""));
  if (verified_any) g.notes.push_back(verified_note(rs));
  if (!wide) {
    fit_width(g, kNarrowColumns, {{1, 24}, {0, 16}});
    for (auto& n : g.notes) n = fold(n, kNarrowColumns);
  }
  return g;
}

Grid train_grid(const std::vector<json>& records) {
  struct Run {
    std::string point, strategy, status = "ok", verified = "-";
    int64_t steps = 0, ended_at = -1, peak = 0, tokens = 0;
    double eval = NAN;
    std::vector<double> ms;
  };
  const std::vector<RecordView> rs = views(records);
  std::vector<Run> runs;
  auto find = [&](const RecordView& r) -> Run& {
    for (auto& run : runs)
      if (run.point == r.point && run.strategy == r.strategy) return run;
    runs.push_back(Run{r.point, r.strategy});
    return runs.back();
  };
  for (const auto& r : rs) {
    Run& run = find(r);
    ++run.steps;
    if (r.config.is_object()) {  // the run's head
      const json& m = r.config["model"];
      run.tokens = m["seq"].get<int64_t>() * m["micro_batch"].get<int64_t>() * r.raw->value("ranks", int64_t(1));
      run.verified = verified_text(r);
    }
    if (r.status != "ok") run.status = r.status, run.ended_at = r.step.value_or(-1);
    if (r.eval_loss) run.eval = *r.eval_loss;
    if (r.peak_activation_bytes) run.peak = std::max(run.peak, int64_t(*r.peak_activation_bytes));
    if (r.status == "ok" && r.step_ms) run.ms.push_back(r.step_ms->median);
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
                      std::isnan(run.eval) ? "-" : fmt_double("%.4f", run.eval),
                      run.peak > 0 ? fmt_bytes(double(run.peak)) : "-", run.ms.empty() ? "-" : fmt_double("%.1f", med),
                      run.ms.empty() || run.tokens == 0 ? "-" : fmt_double("%.0f", double(run.tokens) / med * 1e3),
                      run.verified});
  }
  if (!verified_any) {
    g.header.pop_back();
    for (auto& row : g.rows) row.pop_back();
  }
  g.notes.push_back(
      "steps = records of the run; ended at = the step it ran out of memory (or failed) at; eval loss = the "
      "last held-out loss; act peak = the largest step's (the fullest rank's on real ranks); step ms = median");
  if (verified_any) g.notes.push_back(verified_note(rs));
  return g;
}

Grid predict_grid(const std::vector<json>& records) {
  auto bytes = [](const json& j, bool decimal) {
    if (!j.is_number()) return std::string("-");
    return decimal ? fmt_double("%.1f GB", j.get<double>() / 1e9) : fmt_bytes(j.get<double>());
  };
  Grid g;
  g.header = {"point", "strategy", "static", "activation", "total", "fits", "chunks / why"};
  g.last_left = true;
  bool any_paper = false, any_counts = false;
  for (const RecordView& r : views(records)) {
    const bool paper = r.get("model") == "paper";
    any_paper |= paper;
    any_counts |= r.get("routing") == "counts";
    auto gb = [&](const char* k) { return r.get(k).is_number() ? json(r.get(k).get<double>() * 1e9) : json(0.0); };
    json st = paper ? gb("static_gb") : r.get("predicted_static_bytes");
    json act = paper ? gb("activation_gb") : r.get("predicted_activation_bytes");
    json total = st.is_number() && act.is_number() ? json(st.get<double>() + act.get<double>()) : json();
    if (r.status == "unpredicted") st = act = total = json();
    const json fits = r.get("fits");
    std::string why = r.get("unpredicted_why").is_string() ? r.get("unpredicted_why").get<std::string>()
                      : r.get("fits_why").is_string()      ? r.get("fits_why").get<std::string>()
                                                           : "";
    if (why.empty() && !r.get("chunks").is_null()) {
      const json c = r.get("chunks");
      why = c.is_array() && !c.empty() && c[0].is_array() ? "per step: " + chunks_text(c) : c.dump();
    }
    g.rows.push_back({cut(r.point, 48), cut(r.strategy, 60), bytes(st, paper), bytes(act, paper), bytes(total, paper),
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

}  // namespace memfine
