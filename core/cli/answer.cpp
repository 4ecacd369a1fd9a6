// `memfine answer DIR`: which saver to use, decided by a results folder's records: at each measured
// point (its row: the hottest rank's overload), for each activation budget (a share of what
// storing everything keeps there), the fastest dropless verified strategy that fits and the
// runner-up against it with the suite's one Mann-Whitney U test over their timed steps (core/util/
// stats.h, as `memfine compare` decides). Lossy and capped strategies are answered apart: they
// compute other gradients or another model.
#include <algorithm>
#include <cmath>
#include <iostream>
#include <map>
#include <sstream>

#include "core/cli/commands.h"
#include "core/cli/results_run.h"
#include "core/record/table.h"
#include "core/util/format.h"
#include "core/util/stats.h"

namespace memfine::cli {

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

struct Entry {
  std::string strategy;
  double median_ms = 0, activation = 0;
  std::vector<double> steps;
};

// A point's key as a person reads it (as the figures say it: scripts/plots/records.py words).
std::string words(const std::string& key, const std::string& value) {
  static const std::map<std::string, std::string> names = {
      {"workload.alpha", "zipf alpha"}, {"workload.sigma", "lognormal sigma"}, {"parallel.ep", "EP"},
      {"model.seq", "sequence"},        {"model.hidden", "hidden"},           {"model.experts", "experts"},
      {"model.topk", "top-k"},          {"model.layers", "layers"},           {"model.micro_batch", "micro-batch"},
      {"workload.hot_fraction", "hot share"}, {"workload.kind", "routing"},   {"kernels", "kernels"},
      {"dtype", "dtype"}};
  if (key == "memory.budget") return "budget " + value;
  const auto it = names.find(key);
  const std::string name = it == names.end() ? key : it->second;
  char* end = nullptr;
  const double v = std::strtod(value.c_str(), &end);
  return name + " " + (end && *end == 0 && !value.empty() ? fmt_double("%g", v) : value);
}

std::string point_title(const std::string& point) {
  if (point == "base") return "one point";
  std::string out;
  std::stringstream ss(point);
  // Keys are `a.b=value`, joined by commas; a value may hold a comma only where no key follows it.
  std::vector<std::string> parts;
  for (std::string p; std::getline(ss, p, ',');) {
    if (!parts.empty() && p.find('=') == std::string::npos) parts.back() += "," + p;
    else parts.push_back(p);
  }
  for (const auto& p : parts) {
    const size_t eq = p.find('=');
    out += (out.empty() ? "" : ", ") + words(p.substr(0, eq), eq == std::string::npos ? "" : p.substr(eq + 1));
  }
  return out;
}

// The fastest entry within the budget, and the runner-up against it.
std::string cell(std::vector<Entry> ok, double budget) {
  std::vector<Entry> fits;
  for (auto& e : ok)
    if (e.activation <= budget) fits.push_back(e);
  std::stable_sort(fits.begin(), fits.end(), [](const Entry& a, const Entry& b) { return a.median_ms < b.median_ms; });
  if (fits.empty()) return "nothing here fits: more chunks (`memfine` with `chunks: auto` plans them per layer)";
  const Entry& best = fits[0];
  std::string text = "`" + best.strategy + "` " + fmt_double("%.0f", best.median_ms) + " ms, " +
                     fmt_double("%.0f", best.activation / kMiB) + " MiB";
  if (fits.size() > 1) {
    const Entry& next = fits[1];
    const double p = best.steps.size() >= kUTestMinSteps && next.steps.size() >= kUTestMinSteps
                         ? mann_whitney_p(best.steps, next.steps)
                         : 1.0;
    text += "; next `" + next.strategy + "` " + fmt_double("%.2f", next.median_ms / best.median_ms) + "x (p " +
            fmt_double("%.2f", p) + (p < 0.05 ? "" : ", a tie") + ")";
  }
  return text;
}

struct Answer {
  std::vector<double> budgets;
  Grid dropless, apart;
  json cells = json::array();
  std::vector<std::string> lossy, capped;
};

Answer answer(const std::vector<RecordView>& views, const std::vector<double>& budgets) {
  Answer a;
  a.budgets = budgets;
  std::vector<std::string> header = {"overload (point)"};
  for (double b : budgets) header.push_back("budget " + fmt_double("%g", 100 * b) + "%");
  a.dropless.header = a.apart.header = header;
  a.dropless.left = a.apart.left = header.size();
  // Points in the order the records meet them, each strategy once: on real ranks its hottest rank.
  std::vector<std::string> points;
  std::map<std::string, std::vector<const RecordView*>> by_point;
  for (const auto& v : views) {
    auto& at = by_point[v.point];
    if (at.empty()) points.push_back(v.point);
    auto same = std::find_if(at.begin(), at.end(), [&](const RecordView* x) { return x->strategy == v.strategy; });
    if (same == at.end()) at.push_back(&v);
    else if (v.peak_activation_bytes.value_or(0) > (*same)->peak_activation_bytes.value_or(0)) *same = &v;
  }
  for (const auto& point : points) {
    const RecordView* ref = nullptr;
    std::vector<Entry> ok, other;
    for (const RecordView* v : by_point[point]) {  // in the records' order: ties keep it
      if (v->role == "reference" && v->status == "ok" && !ref) ref = v;
      if (v->status != "ok" || !v->step_ms || !v->peak_activation_bytes) continue;
      const bool drops = !v->get("dropped_fraction").is_null();
      const bool lossy = !v->verified && v->grad_max_rel_err.has_value();
      const Entry e{v->strategy, v->step_ms->median, *v->peak_activation_bytes, v->step_ms_all};
      if (drops || lossy) {
        other.push_back(e);
        auto& list = drops ? a.capped : a.lossy;
        if (std::find(list.begin(), list.end(), v->strategy) == list.end()) list.push_back(v->strategy);
      } else if (v->verified.value_or(false)) {
        ok.push_back(e);
      }
    }
    if (!ref || !ref->peak_activation_bytes) continue;
    const json overload = ref->raw->value("overload_factor", json());
    const std::string head =
        (overload.is_number() ? fmt_double("%.1f", overload.get<double>()) + "x" : std::string("-")) + " (" +
        point_title(point) + ")";
    std::vector<std::string> row = {head}, apart = {head};
    for (double b : budgets) {
      const double bytes = b * *ref->peak_activation_bytes;
      row.push_back(cell(ok, bytes));
      apart.push_back(cell(other, bytes));
      a.cells.push_back({{"point", point}, {"overload", overload}, {"budget_share", b}, {"budget_bytes", bytes},
                         {"answer", row.back()}, {"apart", apart.back()}});
    }
    a.dropless.rows.push_back(row);
    if (!other.empty()) a.apart.rows.push_back(apart);
  }
  std::sort(a.lossy.begin(), a.lossy.end());
  std::sort(a.capped.begin(), a.capped.end());
  return a;
}

std::string csv_cell(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

std::vector<double> budgets_of(const std::string& text) {
  std::vector<double> out;
  std::stringstream ss(text);
  for (std::string b; std::getline(ss, b, ',');) {
    char* end = nullptr;
    const double v = std::strtod(b.c_str(), &end);
    if (b.empty() || *end != 0 || !(v > 0) || v > 10)
      throw UsageError("--budgets: '" + b + "' is not a share of what storing everything keeps (0 < x <= 10)");
    out.push_back(v);
  }
  if (out.empty()) throw UsageError("--budgets: at least one share");
  return out;
}

int answer_of(const std::string& dir, const std::vector<double>& budgets, const std::string& as) {
  Run run;
  try {
    run = read_run(dir, "answer");
  } catch (const std::exception& e) {
    std::cerr << "memfine answer: " << e.what() << "\n";
    return 2;
  }
  const Answer a = answer(run.views, budgets);
  if (a.dropless.rows.empty()) {
    std::cerr << "memfine answer: " << run.path
              << ": no point has a verified reference record (role: reference, status ok) to size the budgets "
                 "against: run the sweep with `verify: true` and a reference strategy\n";
    return 2;
  }
  if (as == "json") {
    for (const auto& c : a.cells) std::cout << c.dump() << "\n";
    return 0;
  }
  if (as == "csv") {
    std::cout << "point,overload,budget_share,answer,apart\n";
    for (const auto& c : a.cells)
      std::cout << csv_cell(c["point"]) << "," << (c["overload"].is_number() ? c["overload"].dump() : "") << ","
                << c["budget_share"].dump() << "," << csv_cell(c["answer"]) << "," << csv_cell(c["apart"]) << "\n";
    return 0;
  }
  std::cout << markdown(a.dropless);
  if (!a.apart.rows.empty()) {
    std::string who;
    for (const auto& s : a.lossy) who += (who.empty() ? "" : ", ") + ("`" + s + "`");
    for (const auto& s : a.capped) who += (who.empty() ? "" : ", ") + ("`" + s + "`");
    std::cout << "\nApart, as they compute other gradients (lossy storage) or another model (capacity capping): "
              << who << "\n\n"
              << markdown(a.apart);
  }
  std::cout << "\nRows: the hottest rank's overload (its rows s' over a balanced share) at each point of "
            << run.path
            << "; columns: the activation memory spared, a share of what the reference (storing everything) keeps "
               "there; each cell: the fastest verified dropless strategy that fits (median step), then the runner-up "
               "against it, Mann-Whitney U over their timed steps (p < 0.05: a real difference; else a tie).\n";
  return 0;
}

}  // namespace

Command answer_command() {
  return {"answer",
          "DIR",
          "which saver to use: the decision table of a results folder's sweep",
          R"(Answers "which saver should I use?" from a results folder (DIR/results.jsonl, or the file) of a
sweep with several strategies and a reference (`verify: true`): a row per measured point (the
hottest rank's overload), a column per activation budget (a share of what storing everything
keeps there); each cell the fastest verified dropless strategy that fits and the runner-up against
it with a Mann-Whitney U test over their timed steps. Lossy storage and capacity capping are
answered apart. README.md's "Which saver should I use?" is this table of results/cpu/savers_2026.

exit status: 0, or 2 for a folder without records to answer from.
)",
          {{"--budgets", "LIST", "the columns: shares of what storing everything keeps (default 1,0.5,0.25,0.125)"},
           {"--csv", "", "a row per point and budget instead"},
           {"--json", "", "one JSON line per point and budget instead"}},
          1,
          1,
          [](const Args& a) {
            if (a.has("--csv") && a.has("--json")) throw UsageError("--csv or --json, not both");
            return answer_of(a.operands[0], budgets_of(a.text("--budgets", "1,0.5,0.25,0.125")),
                             a.has("--csv") ? "csv" : a.has("--json") ? "json" : "markdown");
          }};
}

}  // namespace memfine::cli
