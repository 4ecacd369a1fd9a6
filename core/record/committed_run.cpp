#include "core/record/committed_run.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>

#include "core/record/environment.h"
#include "core/record/results.h"

namespace memfine {

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// Beyond this factor a run's speed differs from the committed one's by more than the several
// percent that runs on one quiet machine differ by (core/meter/README.md's noise rule).
constexpr double kFactor = 1.3;

double median_ms(const json& r) {
  const json& s = r.value("step_ms", json());
  return s.is_object() && s.contains("median") && s["median"].is_number() ? s["median"].get<double>() : 0;
}

}  // namespace

std::string committed_speed_note(const std::vector<json>& fresh, const std::string& written) {
  if (fresh.empty() || !fresh[0].contains("env") || !fresh[0].contains("experiment")) return "";
  const json& env = fresh[0]["env"];
  const std::string device = env.value("device", "cpu");
  const fs::path committed =
      fs::path(source_dir()) / "results" / device_class(device) / fresh[0]["experiment"].get<std::string>() / "results.jsonl";
  std::error_code ec;
  if (!fs::exists(committed, ec) || fs::equivalent(committed, written, ec)) return "";
  std::vector<json> theirs;
  try {
    theirs = read_results(committed.string());
  } catch (const std::exception&) {
    return "";  // a committed file this build cannot read says nothing about this run's speed
  }
  // The same point, strategy and rank under the same configuration on the same machine class.
  std::map<std::string, const json*> by_key;
  for (const auto& r : theirs) {
    if (r.value("status", "") != "ok" || !r.contains("env") || r["env"].value("device_name", "") != env.value("device_name", ""))
      continue;
    by_key[r.value("point", "") + "\n" + r.value("strategy", "") + "\n" + std::to_string(r.value("rank", 0))] = &r;
  }
  std::vector<double> ratios;
  std::string commit;
  for (const auto& r : fresh) {
    auto it = by_key.find(r.value("point", "") + "\n" + r.value("strategy", "") + "\n" + std::to_string(r.value("rank", 0)));
    if (it == by_key.end() || r.value("status", "") != "ok" || r.value("config", json()) != it->second->value("config", json()))
      continue;
    const double a = median_ms(r), b = median_ms(*it->second);
    if (a > 0 && b > 0) ratios.push_back(a / b);
    commit = (*it->second)["env"].value("git_commit", "?");
  }
  if (ratios.empty()) return "";
  std::nth_element(ratios.begin(), ratios.begin() + long(ratios.size() / 2), ratios.end());
  const double ratio = ratios[ratios.size() / 2];
  if (ratio <= kFactor && ratio >= 1 / kFactor) return "";
  char text[64];
  std::snprintf(text, sizeof text, "%.2fx", ratio);
  return "against the committed run of this experiment (" + fs::relative(committed, source_dir(), ec).string() +
         ", commit " + commit + ", " + env.value("device_name", "this machine class") + "), steps here took " + text +
         " as long (median over " + std::to_string(ratios.size()) + " matching records): this machine is " +
         (ratio > 1 ? "busier or slower" : "quieter or faster") +
         " than when that run was measured; ratios within this run stay comparable, times across runs do not\n";
}

}  // namespace memfine
