#include "core/run/resume.h"

#include <algorithm>
#include <map>
#include <optional>

#include "core/record/schema.h"
#include "core/strategy/registry.h"

namespace memfine {

namespace {

void diff(const json& a, const json& b, const std::string& path, std::vector<std::string>& out, const std::string& an,
          const std::string& bn) {
  if (a.is_object() && b.is_object()) {
    std::map<std::string, bool> keys;
    for (const auto& [k, v] : a.items()) keys[k] = true;
    for (const auto& [k, v] : b.items()) keys[k] = true;
    for (const auto& [k, unused] : keys) {
      const std::string p = path.empty() ? k : path + "." + k;
      if (p == "strategies") continue;
      diff(a.contains(k) ? a[k] : json(), b.contains(k) ? b[k] : json(), p, out, an, bn);
    }
    return;
  }
  if (a != b)
    out.push_back(path + ": " + (a.is_null() ? "absent" : a.dump()) + " " + an + ", " +
                  (b.is_null() ? "absent" : b.dump()) + " " + bn);
}

}  // namespace

std::string canonical_label(const json& r) {
  const bool typed = r.contains("name") && r["name"].is_string() && r.contains("params") && r["params"].is_object();
  return canonical_label(r.value("strategy", std::string()), typed ? r["name"].get<std::string>() : "",
                         typed ? r["params"] : json());
}

std::vector<std::string> config_differences(const json& there, const json& here, const std::string& a,
                                            const std::string& b) {
  std::vector<std::string> out;
  diff(there, here, "", out, a, b);
  return out;
}

namespace {

// Training: per run (point, strategy), the next step expected, the line of each step, and whether
// the run ended (a record that is not ok is its last).
struct Run {
  int64_t next = 0;
  int ended_at = 0;
  std::map<int64_t, int> line_of;
};

void check_step(const std::string& at, int line, const RecordView& r,
                std::map<std::pair<std::string, std::string>, Run>& runs, std::vector<std::string>& problems) {
  if (!r.step) {
    problems.push_back(at + "a training record without a step");
    return;
  }
  const int64_t step = *r.step;
  Run& run = runs[{r.point, r.strategy}];
  const std::string who = r.strategy + " at '" + r.point + "'";
  if (run.line_of.count(step))
    problems.push_back(at + "step " + std::to_string(step) + " of " + who + " is recorded twice (also line " +
                       std::to_string(run.line_of[step]) + ")");
  else if (run.ended_at)
    problems.push_back(at + "step " + std::to_string(step) + " of " + who +
                       " follows the record that ended the run (line " + std::to_string(run.ended_at) + ")");
  else if (step != run.next)
    problems.push_back(at + who +
                       (run.next == 0
                            ? " starts at step " + std::to_string(step) + ", not 0"
                            : " goes from step " + std::to_string(run.next - 1) + " to step " + std::to_string(step)) +
                       ": steps are missing");
  else if (step == 0 && !r.config.is_object())
    problems.push_back(at + "step 0 of " + who + " lacks the run's head (config, environment)");
  run.line_of.emplace(step, line);
  run.next = std::max(run.next, step + 1);  // one message per gap
  if (r.status != "ok" && !run.ended_at) run.ended_at = line;
}

}  // namespace

std::vector<std::string> resume_problems(const std::string& path, const std::vector<json>& records,
                                         const std::vector<SweepPoint>& points, bool training) {
  std::vector<std::string> problems;
  std::map<std::string, json> config_of;
  std::string point_list;
  for (const auto& p : points) {
    json cj = config_to_json(p.config);
    cj.erase("strategies");
    config_of[p.id] = cj;
    point_list += (point_list.empty() ? "" : ", ") + p.id;
  }
  std::map<std::pair<std::string, std::string>, Run> runs;
  for (size_t i = 0; i < records.size() && problems.size() < 10; ++i) {
    const std::string at = path + ":" + std::to_string(i + 1) + ": ";
    RecordView r;
    try {
      r = view_of(records[i], path + ":" + std::to_string(i + 1));
    } catch (const std::exception& e) {
      problems.push_back(e.what());
      continue;
    }
    auto it = config_of.find(r.point);
    if (it == config_of.end()) {
      problems.push_back(at + "point '" + r.point + "' is not a point of this experiment (its points: " + point_list +
                         "): these are another configuration's results; --out another folder");
      continue;
    }
    if (r.config.is_object()) {
      json there = r.config;
      there.erase("strategies");
      const auto d = config_differences(there, it->second);
      if (!d.empty()) {
        std::string what;
        for (size_t k = 0; k < d.size() && k < 4; ++k) what += (k ? "; " : "") + d[k];
        if (d.size() > 4) what += "; and " + std::to_string(d.size() - 4) + " more";
        problems.push_back(at + r.strategy + " at '" + r.point + "' was measured with another configuration (" + what +
                           "): resume only the run that wrote it; --out another folder for this one");
      }
    }
    if (training) check_step(at, int(i + 1), r, runs, problems);
  }
  if (!problems.empty()) problems.push_back(path + ": nothing was measured and the file was left as it is");
  return problems;
}

}  // namespace memfine
