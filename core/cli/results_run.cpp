#include "core/cli/results_run.h"

#include <filesystem>
#include <set>
#include <stdexcept>

#include "core/record/results.h"
#include "core/run/resume.h"

namespace memfine::cli {

Run read_run(const std::string& dir_or_file, const std::string& command) {
  namespace fs = std::filesystem;
  Run run;
  run.path = fs::is_directory(dir_or_file) ? (fs::path(dir_or_file) / "results.jsonl").string() : dir_or_file;
  run.records = read_results(run.path);
  for (auto& r : run.records) r["strategy"] = canonical_label(r);
  std::set<std::string> runs;  // one experiment and seed: a folder is one run
  for (size_t i = 0; i < run.records.size(); ++i) {
    run.views.push_back(view_of(run.records[i], run.path + ":" + std::to_string(i + 1)));
    const RecordView& v = run.views.back();
    runs.insert("'" + v.experiment + "' seed " + (v.config.is_object() ? v.config.value("seed", json()).dump() : "?"));
  }
  if (runs.size() > 1) {
    std::string list;
    for (const auto& r : runs) list += (list.empty() ? "" : ", ") + r;
    throw std::runtime_error(run.path + ": holds the records of " + std::to_string(runs.size()) + " runs (" + list +
                             "); " + command + " takes one run a folder");
  }
  return run;
}

}  // namespace memfine::cli
