#include "core/run/report.h"

#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <iostream>

#include "core/record/environment.h"
#include "core/record/results.h"
#include "core/record/table.h"
#include "core/run/resume.h"

namespace memfine {

namespace fs = std::filesystem;

int table_command(const std::string& dir, const std::string& as) {
  std::string path = dir;
  bool training = false;
  if (fs::is_directory(dir)) {
    path = (fs::path(dir) / "results.jsonl").string();
    if (!fs::exists(path) && fs::exists(fs::path(dir) / "train.jsonl")) path = (fs::path(dir) / "train.jsonl").string();
  }
  training = fs::path(path).filename() == "train.jsonl";
  std::vector<json> records;
  try {
    records = read_results(path);
  } catch (const std::exception& e) {
    std::cerr << "memfine table: " << e.what() << "\n";
    return 2;
  }
  for (auto& r : records) r["strategy"] = canonical_label(r);
  if (as == "csv") {
    std::cout << records_csv(records);
    return 0;
  }
  const Grid g = training ? train_grid(records) : run_grid(records);
  std::cout << (as == "markdown" ? markdown(g) : text(g));
  return 0;
}

int plot_command(const std::vector<std::string>& args) {
  const fs::path src = source_dir();
  const fs::path python = src / "scripts" / "python", plots = src / "scripts" / "plot.py";
  if (!fs::exists(python) || !fs::exists(plots)) {
    std::cerr << "memfine plot: the plotting scripts are not at " << plots.string() << " (this binary was built from "
              << src.string() << "; run the checkout's scripts/plot.py)\n";
    return 2;
  }
  std::vector<std::string> argv_s = {python.string(), plots.string()};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  ::execv(argv[0], argv.data());
  std::cerr << "memfine plot: cannot run " << python.string() << "\n";
  return 2;
}

}  // namespace memfine
