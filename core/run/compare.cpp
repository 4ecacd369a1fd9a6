#include "core/run/compare.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <numeric>
#include <set>

#include "core/meter/memory_meter.h"
#include "core/meter/timer.h"
#include "core/record/results.h"
#include "core/record/table.h"
#include "core/run/resume.h"

namespace memfine {

namespace fs = std::filesystem;

namespace {

// The fewest steps per side for which an exact two-sided U test can reach p < 0.05.
constexpr size_t kMinSteps = 4;

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

// Number of arrangements of n1 + n2 items giving each U: counts[n1][n2][u] by the recursion
// f(n1, n2, u) = f(n1 - 1, n2, u - n2) + f(n1, n2 - 1, u).
std::vector<double> u_counts(size_t n1, size_t n2) {
  std::vector<std::vector<std::vector<double>>> f(n1 + 1, std::vector<std::vector<double>>(n2 + 1));
  for (size_t i = 0; i <= n1; ++i)
    for (size_t j = 0; j <= n2; ++j) {
      f[i][j].assign(i * j + 1, 0.0);
      if (i == 0 || j == 0) {
        f[i][j][0] = 1;
        continue;
      }
      for (size_t u = 0; u <= i * j; ++u)
        f[i][j][u] = (u >= j ? f[i - 1][j][u - j] : 0) + (u <= (i * (j - 1)) ? f[i][j - 1][u] : 0);
    }
  return f[n1][n2];
}

}  // namespace

double mann_whitney_p(const std::vector<double>& x, const std::vector<double>& y) {
  const size_t n1 = x.size(), n2 = y.size();
  if (n1 == 0 || n2 == 0) return 1;
  std::vector<std::pair<double, int>> all;
  for (double v : x) all.emplace_back(v, 0);
  for (double v : y) all.emplace_back(v, 1);
  std::sort(all.begin(), all.end());
  // Ranks, ties sharing their mean rank.
  std::vector<double> rank(all.size());
  double ties = 0;
  bool tied = false;
  for (size_t i = 0; i < all.size();) {
    size_t j = i;
    while (j + 1 < all.size() && all[j + 1].first == all[i].first) ++j;
    const double t = double(j - i + 1);
    if (t > 1) tied = true, ties += t * t * t - t;
    for (size_t k = i; k <= j; ++k) rank[k] = (double(i + j) / 2) + 1;
    i = j + 1;
  }
  double r1 = 0;
  for (size_t i = 0; i < all.size(); ++i)
    if (all[i].second == 0) r1 += rank[i];
  const double u1 = r1 - double(n1 * (n1 + 1)) / 2, u = std::min(u1, double(n1 * n2) - u1);
  if (!tied && n1 <= 30 && n2 <= 30) {
    const std::vector<double> counts = u_counts(n1, n2);
    const double total = std::accumulate(counts.begin(), counts.end(), 0.0);
    double tail = 0;
    for (size_t k = 0; k <= size_t(u) && k < counts.size(); ++k) tail += counts[k];
    return std::min(1.0, 2 * tail / total);
  }
  const double n = double(n1 + n2), mean = double(n1 * n2) / 2;
  const double sd = std::sqrt(double(n1 * n2) / 12 * ((n + 1) - ties / (n * (n - 1))));
  if (sd == 0) return 1;
  const double z = (std::fabs(u1 - mean) - 0.5) / sd;
  return std::min(1.0, std::erfc(std::max(z, 0.0) / std::sqrt(2.0)));
}

namespace {

std::vector<double> steps_of(const json& r) {
  return r.value("step_ms_all", json::array()).is_array() ? r["step_ms_all"].get<std::vector<double>>()
                                                          : std::vector<double>{};
}

// One row: `b` against `a`.
std::vector<std::string> row_of(const std::string& point, const std::string& what, const json& a, const json& b,
                                double alpha, int& differ, int& too_few) {
  auto peak = [](const json& r) { return r.value("peak_activation_bytes", json()); };
  auto med = [](const json& r) {
    return r.value("step_ms", json()).is_object() ? r["step_ms"]["median"].get<double>() : NAN;
  };
  if (a["status"] != "ok" || b["status"] != "ok")
    return {point, what, a["status"].get<std::string>(), b["status"].get<std::string>(), "-", "-", "-", "-", "-",
            "-",   "-"};
  const double pa = peak(a).get<double>(), pb = peak(b).get<double>(), ma = med(a), mb = med(b);
  const std::vector<double> xa = steps_of(a), xb = steps_of(b);
  std::string verdict;
  double p = NAN;
  if (xa.size() < kMinSteps || xb.size() < kMinSteps) {
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
          pa == pb ? "same" : fmt("%.3fx", pb / pa),
          fmt("%.1f", ma),
          fmt("%.1f", mb),
          fmt("%.3fx", mb / ma),
          std::isnan(p) ? "-" : fmt("%.3f", p),
          verdict,
          fmt("%d", int(std::min(xa.size(), xb.size())))};
}

std::string key_of(const json& r) {
  return r["point"].get<std::string>() + "|" + r["strategy"].get<std::string>() + "|" +
         std::to_string(r.value("rank", 0));
}

std::vector<std::string> header(const std::string& a, const std::string& b) {
  return {"point",   "strategy",   "peak " + a, "peak " + b, "peak ratio", "ms " + a,
          "ms " + b, "time ratio", "p",         "verdict",   "steps"};
}

std::string notes(double alpha, int differ, int too_few) {
  std::string n =
      "ratios are B / A (B: the second); ms = median step time; p = two-sided Mann-Whitney U test over every "
      "timed step (step_ms_all) that the two come from one distribution; verdict at p < " +
      fmt("%.2f", alpha) + " (faster / slower), else no difference; peaks are exact on a CPU (same = to the byte)";
  if (too_few)
    n += "\n" + std::to_string(too_few) + " row(s) had fewer than " + std::to_string(kMinSteps) +
         " timed steps on a side: no verdict is possible (raise `repeats`)";
  if (differ > 1)
    n += "\n" + std::to_string(differ) + " row(s) differ at the " + fmt("%.2f", alpha) +
         " level: with many rows, some differ by chance (about " + fmt("%.0f", 100 * alpha) + "% of those that do not)";
  return n;
}

// What differs between the runs: machine, build and configuration (strategies aside).
std::vector<std::string> differences(const std::vector<json>& a, const std::vector<json>& b) {
  auto head = [](const std::vector<json>& rs) {
    for (const auto& r : rs)
      if (r.contains("env")) return r;
    return json::object();
  };
  const json ha = head(a), hb = head(b);
  std::vector<std::string> out;
  for (const char* k : {"device_name", "hostname", "git_commit", "libtorch", "threads", "blas", "omp_wait_policy"}) {
    const json x = ha.value("env", json::object()).value(k, json()),
               y = hb.value("env", json::object()).value(k, json());
    if (x != y) out.push_back(std::string("env.") + k + ": " + x.dump() + " in A, " + y.dump() + " in B");
  }
  json ca = ha.value("config", json::object()), cb = hb.value("config", json::object());
  for (const auto& d : config_differences(ca, cb, "in A", "in B")) out.push_back("config." + d);
  return out;
}

std::vector<json> read_dir(const std::string& p) {
  const std::string path = fs::is_directory(p) ? (fs::path(p) / "results.jsonl").string() : p;
  std::vector<json> rs = read_results(path);
  for (auto& r : rs) r["strategy"] = canonical_label(r);
  return rs;
}

}  // namespace

std::string compare_runs(const std::vector<json>& a, const std::vector<json>& b, const std::string& name_a,
                         const std::string& name_b, double alpha) {
  std::map<std::string, const json*> in_b;
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
    const std::string at_rank = r.value("world_size", 1) > 1 ? " r" + std::to_string(r.value("rank", 0)) : "";
    g.rows.push_back(row_of(r["point"].get<std::string>() + at_rank, r["strategy"].get<std::string>(), r, *it->second,
                            alpha, differ, too_few));
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
      g.notes.push_back("at " + point + " every strategy is " + *v.begin() + " (" + fmt("%.2f", range[point].first) +
                        "-" + fmt("%.2f", range[point].second) +
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

std::string compare_strategies(const std::vector<json>& records, const std::string& x, const std::string& y,
                               double alpha) {
  Grid g;
  g.header = header("A", "B");
  int differ = 0, too_few = 0;
  std::map<std::string, std::pair<const json*, const json*>> at;
  std::vector<std::string> order;
  for (const auto& r : records) {
    const std::string k =
        r["point"].get<std::string>() + (r.value("world_size", 1) > 1 ? " r" + std::to_string(r.value("rank", 0)) : "");
    if (std::find(order.begin(), order.end(), k) == order.end()) order.push_back(k);
    if (r["strategy"] == x) at[k].first = &r;
    if (r["strategy"] == y) at[k].second = &r;
  }
  for (const auto& k : order)
    if (at[k].first && at[k].second)
      g.rows.push_back(row_of(k, y + " / " + x, *at[k].first, *at[k].second, alpha, differ, too_few));
  if (g.rows.empty()) throw std::runtime_error("no point has both '" + x + "' and '" + y + "'");
  g.title = "A: " + x + "\nB: " + y + " (the same run: interleaved steps, the same machine)";
  g.notes.push_back(notes(alpha, differ, too_few));
  return text(g);
}

int compare_command(const std::vector<std::string>& dirs, const std::vector<std::string>& strategies) {
  std::vector<std::string> canonical;
  for (const auto& s : strategies) canonical.push_back(canonical_label(json{{"strategy", s}}));
  if (strategies.size() == 2 && dirs.size() == 1) {
    std::cout << compare_strategies(read_dir(dirs[0]), canonical[0], canonical[1]);
    return 0;
  }
  if (strategies.empty() && dirs.size() == 2) {
    std::cout << compare_runs(read_dir(dirs[0]), read_dir(dirs[1]), dirs[0], dirs[1]);
    return 0;
  }
  throw std::invalid_argument("compare needs two results folders, or one and --strategies X Y");
}

}  // namespace memfine
