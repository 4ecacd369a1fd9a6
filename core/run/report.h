// `memfine table` and `memfine plot`: what an existing results folder holds, as a table (text,
// Markdown, CSV) or as figures (the plotting package, scripts/plots, through scripts/python).
#pragma once
#include <string>
#include <vector>

namespace memfine {

// `as`: "text", "markdown" or "csv". Returns the exit code.
int table_command(const std::string& dir, const std::string& as);

// Runs the plotting package on `args` (folders and --out); returns its exit code.
int plot_command(const std::vector<std::string>& args);

}  // namespace memfine
