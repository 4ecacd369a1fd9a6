// `memfine plot DIR...`: figures of any results folders, by the plotting package (scripts/plots,
// matplotlib through scripts/python).
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <iostream>

#include "core/cli/commands.h"
#include "core/record/environment.h"

namespace memfine::cli {

namespace fs = std::filesystem;

namespace {

int plot_with(const std::vector<std::string>& args) {
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

}  // namespace

Command plot_command() {
  return {"plot",
          "DIR...",
          "figures of any results folders (PNG and PDF)",
          R"(Draws the figures of any results folder from its records alone (scripts/plots, matplotlib through
scripts/python): activation peak and step time per strategy at each point (out of memory marked,
capacity's dropped share on its bar, ratios against the baseline), a swept key as the x-axis with
a line per strategy, and for a training run loss and held-out loss against tokens, the peak per
step against the budget, MACT's chunk grid and s' per layer. Several folders are drawn side by side.
)",
          {{"--out", "FOLDER", "where the PNG and PDF files go (default DIR/figures)"}},
          1,
          64,
          [](const Args& a) {
            std::vector<std::string> words = a.operands;
            if (a.has("--out")) words.push_back("--out"), words.push_back(a.text("--out"));
            return plot_with(words);
          }};
}

}  // namespace memfine::cli
