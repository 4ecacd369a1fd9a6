// `memfine table DIR`: a results folder's table (text, Markdown or CSV), as `run` and `train` end
// with it (core/record/table.h).
#include <filesystem>
#include <iostream>

#include "core/cli/commands.h"
#include "core/record/results.h"
#include "core/record/table.h"
#include "core/run/resume.h"

namespace memfine::cli {

namespace fs = std::filesystem;

namespace {

int table_of(const std::string& dir, const std::string& as, bool wide) {
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
  const Grid g = training ? train_grid(records) : run_grid(records, 0, wide);
  std::cout << (as == "markdown" ? markdown(g) : text(g));
  return 0;
}

}  // namespace

Command table_command() {
  return {"table",
          "DIR",
          "the run table of a results folder (text, Markdown or CSV)",
          R"(Prints the table of an existing results folder (DIR/results.jsonl, or DIR/train.jsonl for a
training run; DIR may also be the file), as `memfine run` (or `train`) ends with it.
)",
          {{"--markdown", "", "the same as a Markdown table"},
           {"--wide", "", "every column (static bytes; chunks and dropped always), labels in full"},
           {"--csv", "",
            "every record as one row with flat columns (config.model.hidden,\n"
            "step_ms.median, ...; lists as JSON text), for pandas and spreadsheets"}},
          1,
          1,
          [](const Args& a) {
            if (a.has("--csv") && a.has("--markdown")) throw UsageError("--csv or --markdown, not both");
            return table_of(a.operands[0], a.has("--csv") ? "csv" : a.has("--markdown") ? "markdown" : "text",
                            a.has("--wide"));
          }};
}

}  // namespace memfine::cli
