// `memfine compare A [B]`: two runs of a sweep (or two strategies of one) point by point: activation
// peak and median step time as ratios, a statistical verdict on the step times from every timed
// step (core/util/stats.h), and what differs between the runs' machines, builds and
// configurations, so that a change's effect is not confused with a machine's.
#include "core/cli/commands.h"
#include "core/cli/results_run.h"
#include "core/util/stats.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <numeric>
#include <set>

#include "core/record/results.h"
#include "core/record/schema.h"
#include "core/record/table.h"
#include "core/run/resume.h"
#include "core/util/format.h"

namespace memfine::cli {

namespace fs = std::filesystem;

namespace {

// One row: `b` against `a`.
std::vector<std::string> row_of(const std::string& point, const std::string& what, const RecordView& a,
                                const RecordView& b, double alpha, int& differ, int& too_few) {
  if (a.status != "ok" || b.status != "ok") return {point, what, a.status, b.status, "-", "-", "-", "-", "-", "-", "-"};
  const double pa = a.peak_activation_bytes.value_or(NAN), pb = b.peak_activation_bytes.value_or(NAN);
  const double ma = a.step_ms ? a.step_ms->median : NAN, mb = b.step_ms ? b.step_ms->median : NAN;
  const std::vector<double>&xa = a.step_ms_all, &xb = b.step_ms_all;
  std::string verdict;
  double p = NAN;
  if (xa.size() < kUTestMinSteps || xb.size() < kUTestMinSteps) {
    verdict = "too few steps";
    ++too_few;
  } else {
    p = mann_whitney_p(xa, xb);
    verdict = p < alpha ? (mb < ma ? "faster" : "slower") : "no difference";
    differ += p < alpha;
  }
  return {point,
          what,
          fmt_bytes(pa),
          fmt_bytes(pb),
          pa == pb ? "same" : fmt_double("%.3fx", pb / pa),
          fmt_double("%.1f", ma),
          fmt_double("%.1f", mb),
          fmt_double("%.3fx", mb / ma),
          std::isnan(p) ? "-" : fmt_double("%.3f", p),
          verdict,
          fmt_double("%d", int(std::min(xa.size(), xb.size())))};
}

std::string key_of(const RecordView& r) { return r.point + "|" + r.strategy + "|" + std::to_string(r.rank); }

std::vector<std::string> header(const std::string& a, const std::string& b) {
  return {"point",   "strategy",   "peak " + a, "peak " + b, "peak ratio", "ms " + a,
          "ms " + b, "time ratio", "p",         "verdict",   "steps"};
}

std::string notes(double alpha, int differ, int too_few) {
  std::string n =
      "ratios are B / A (B: the second); ms = median step time; p = two-sided Mann-Whitney U test over every "
      "timed step (step_ms_all) that the two come from one distribution; verdict at p < " +
      fmt_double("%.2f", alpha) +
      " (faster / slower), else no difference; peaks are exact on a CPU (same = to the byte)";
  if (too_few)
    n += "\n" + std::to_string(too_few) + " row(s) had fewer than " + std::to_string(kUTestMinSteps) +
         " timed steps on a side: no verdict is possible (raise `repeats`)";
  if (differ > 1)
    n += "\n" + std::to_string(differ) + " row(s) differ at the " + fmt_double("%.2f", alpha) +
         " level: with many rows, some differ by chance (about " + fmt_double("%.0f", 100 * alpha) +
         "% of those that do not)";
  return n;
}

// What differs between the runs: machine, build and configuration (strategies aside), over every
// pair of records the two have in common, each difference said once.
std::vector<std::string> differences(const std::vector<RecordView>& a, const std::vector<RecordView>& b) {
  std::map<std::string, const RecordView*> in_b;
  for (const auto& r : b) in_b[key_of(r)] = &r;
  std::vector<std::string> out;
  std::set<std::string> said;
  auto say = [&](const std::string& d) {
    if (said.insert(d).second) out.push_back(d);
  };
  for (const auto& ra : a) {
    const auto it = in_b.find(key_of(ra));
    if (it == in_b.end()) continue;
    const RecordView& rb = *it->second;
    for (const char* k :
         {"device_name", "hostname", "git_commit", "libtorch", "build", "threads", "blas", "omp_wait_policy"}) {
      const json x = ra.env.is_object() ? ra.env.value(k, json()) : json(),
                 y = rb.env.is_object() ? rb.env.value(k, json()) : json();
      if (x != y) say(std::string("env.") + k + ": " + x.dump() + " in A, " + y.dump() + " in B");
    }
    const json ca = ra.config.is_object() ? ra.config : json::object(),
               cb = rb.config.is_object() ? rb.config : json::object();
    for (const auto& d : config_differences(ca, cb, "in A", "in B")) say("config." + d);
  }
  return out;
}

std::string compare_runs(const std::vector<RecordView>& a, const std::vector<RecordView>& b, const std::string& name_a,
                         const std::string& name_b, double alpha = 0.05) {
  std::map<std::string, const RecordView*> in_b;
  for (const auto& r : b) in_b[key_of(r)] = &r;
  Grid g;
  g.header = header("A", "B");
  int differ = 0, too_few = 0, missing = 0;
  for (const auto& r : a) {
    auto it = in_b.find(key_of(r));
    if (it == in_b.end()) {
      ++missing;
      continue;
    }
    const std::string at_rank = r.world_size > 1 ? " r" + std::to_string(r.rank) : "";
    g.rows.push_back(row_of(r.point + at_rank, r.strategy, r, *it->second, alpha, differ, too_few));
  }
  g.title = "A: " + name_a + "\nB: " + name_b;
  g.notes.push_back(notes(alpha, differ, too_few));
  // A point where every strategy moved the same way: the machine's speed, not the strategies'.
  std::map<std::string, std::set<std::string>> verdicts;
  std::map<std::string, std::pair<double, double>> range;
  for (const auto& row : g.rows) {
    verdicts[row[0]].insert(row[9]);
    const double r = std::atof(row[7].c_str());
    auto& [lo, hi] = range.emplace(row[0], std::make_pair(r, r)).first->second;
    lo = std::min(lo, r), hi = std::max(hi, r);
  }
  for (const auto& [point, v] : verdicts)
    if (v.size() == 1 && (*v.begin() == "faster" || *v.begin() == "slower") && g.rows.size() > 1)
      g.notes.push_back("at " + point + " every strategy is " + *v.begin() + " (" +
                        fmt_double("%.2f", range[point].first) + "-" + fmt_double("%.2f", range[point].second) +
                        "x): the machine's speed changed between the runs; compare "
                        "strategies within one run (--strategies), whose steps interleave");
  if (missing)
    g.notes.push_back(std::to_string(missing) + " record(s) of A have no match in B (point, strategy, rank)");
  const auto diff = differences(a, b);
  g.notes.push_back(diff.empty() ? "A and B: same machine, build and configuration (as their records say)"
                                 : "what differs between A and B (a difference here can explain one above):");
  for (const auto& d : diff) g.notes.push_back("  " + d);
  return text(g);
}

std::string compare_strategies(const std::vector<RecordView>& records, const std::string& x, const std::string& y,
                               double alpha = 0.05) {
  Grid g;
  g.header = header("A", "B");
  int differ = 0, too_few = 0;
  std::map<std::string, std::pair<const RecordView*, const RecordView*>> at;
  std::vector<std::string> order;
  for (const auto& r : records) {
    const std::string k = r.point + (r.world_size > 1 ? " r" + std::to_string(r.rank) : "");
    if (std::find(order.begin(), order.end(), k) == order.end()) order.push_back(k);
    if (r.strategy == x) at[k].first = &r;
    if (r.strategy == y) at[k].second = &r;
  }
  for (const auto& k : order)
    if (at[k].first && at[k].second)
      g.rows.push_back(row_of(k, y + " / " + x, *at[k].first, *at[k].second, alpha, differ, too_few));
  if (g.rows.empty()) {
    std::string labels;
    std::set<std::string> seen;
    for (const auto& r : records)
      if (seen.insert(r.strategy).second) labels += (labels.empty() ? "" : ", ") + r.strategy;
    throw std::runtime_error("no point has both '" + x + "' and '" + y + "' (the strategies these records have: " +
                             labels + "; a strategy is named by its label, parameters included)");
  }
  g.title = "A: " + x + "\nB: " + y + " (the same run: interleaved steps, the same machine)";
  g.notes.push_back(notes(alpha, differ, too_few));
  return text(g);
}

int compare(const std::vector<std::string>& dirs, const std::vector<std::string>& strategies) {
  std::vector<std::string> canonical;
  for (const auto& s : strategies) canonical.push_back(canonical_label(json{{"strategy", s}}));
  if (!((strategies.size() == 2 && dirs.size() == 1) || (strategies.empty() && dirs.size() == 2)))
    throw std::invalid_argument("compare needs two results folders, or one and --strategies X Y");
  std::vector<Run> runs;
  try {
    for (const auto& d : dirs) runs.push_back(read_run(d, "compare"));  // each Run's views point into its own records
  } catch (const std::runtime_error& e) {
    std::cerr << "memfine compare: " << e.what() << "\n";
    return 2;
  }
  if (dirs.size() == 1)
    std::cout << compare_strategies(runs[0].views, canonical[0], canonical[1]);
  else
    std::cout << compare_runs(runs[0].views, runs[1].views, dirs[0], dirs[1]);
  return 0;
}

}  // namespace

Command compare_command() {
  return {"compare",
          "A [B]",
          "two runs, or two strategies of one, with a verdict",
          R"(Compares two results folders A and B of one experiment point by point (point, strategy and
rank), or two strategies X and Y within one folder (--strategies): activation peak and median
step time as B / A, and a verdict on the step times from every timed step (step_ms_all): a
two-sided Mann-Whitney U test, faster or slower at p < 0.05, else no difference; it needs 4 or
more timed steps per side (repeats). Then what differs between A and B: machine, commit,
LibTorch, threads, BLAS, configuration, so that a change's effect is not taken for a machine's.
)",
          {{"--strategies", "X Y", "compare strategy Y with X within folder A (labels as the table shows them)", 2}},
          1,
          2,
          [](const Args& a) {
            if (a.has("--strategies") != (a.operands.size() == 1))
              throw UsageError("compare needs two results folders, or one and --strategies X Y");
            return compare(a.operands, a.has("--strategies") ? a.flags.at("--strategies") : std::vector<std::string>{});
          }};
}

}  // namespace memfine::cli
