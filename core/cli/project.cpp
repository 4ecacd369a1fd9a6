// `memfine project FILE.yaml...`: will it fit, how fast, how much survives failures, at cluster scale
// (core/project/).
#include <iostream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/cli/commands.h"
#include "core/cli/project_run.h"
#include "core/cli/run_flags.h"
#include "core/project/report.h"

namespace memfine::cli {

int project_file(const Args& a) {
  // Every file is read before any is projected: one with problems stops them all, and nothing is
  // written for the others.
  std::vector<std::pair<ProjectConfig, Published>> files;
  int code = 0;
  for (const std::string& file : a.operands) {
    try {
      ProjectConfig pc = load_project(file, a.text("--presets", default_presets_dir(file)));
      Published published = load_published(pc);
      files.emplace_back(std::move(pc), std::move(published));
    } catch (const std::invalid_argument& e) {
      std::cerr << e.what() << "\n";
      code = 2;
    }
  }
  if (code != 0) return code;
  for (size_t i = 0; i < files.size(); ++i) {
    auto& [pc, published] = files[i];
    pc.gpus = a.integer("--gpus", pc.gpus);  // the parser held both to the file's own ranges
    pc.global_batch = a.integer("--global-batch", pc.global_batch);
    const ProjectResult r = run_project(pc);
    if (a.has("--json")) {
      std::map<std::string, std::string> stamp = made_stamp();
      stamp["file"] = a.operands[i];  // which of the files a line projects
      std::cout << project_json(pc, r, published, stamp);
    } else {
      std::cout << (i > 0 ? "\n" : "") << project_table(pc, r, a.has("--wide"));
    }
  }
  return 0;
}

Command project_command() {
  return {"project",
          "FILE.yaml...",
          "will it fit, how fast, how much survives failures: layouts x strategies at cluster scale",
          R"(Projects a whole model (a preset of experiments/project/models.yaml or its keys) on a cluster (a
hardware preset and a GPU count) for every layout of the file's search space (TP, PP with its
virtual stages, EP with expert TP, DP, CP, micro-batch) x registered strategy (each from its shape: what it keeps,
recomputes, chunks, offloads or drops; MACT's chunks chosen by what fits), under the file's routing
imbalance: the hottest GPU's memory and whether it fits, the step time in parts (compute,
recomputation, exposed communication, pipeline bubble), tokens per second per GPU beside the
balanced figure, model TFLOP/s (recomputation not counted) and goodput (ETTR at the optimal
checkpoint interval x tokens per second), ranked by goodput, with why the rest were rejected.
Nothing is run; each part's model prints its assumptions. experiments/README.md lists the keys.
Several files are projected in one start, each in turn (--gpus and --global-batch apply to each);
every file is read first, and one with problems stops them all.

exit status: 0, or 2 for a file with problems (FILE:LINE: key.path: problem).
)",
          {{"--json", "", "one JSON line per layout and strategy (fitting ones ranked first) instead"},
           {"--wide", "", "every column (memory and the step in parts, TFLOP/s, ETTR), labels in full"},
           {"--gpus", "N", "the cluster's GPU count instead of the file's (a sweep over cluster sizes)", 1, true, 1,
            int64_t(1) << 24},
           {"--global-batch", "N", "sequences per step instead of the file's", 1, true, 1, int64_t(1) << 30},
           {"--presets", "DIR",
            "where the model and hardware presets are (default: the file's folder's project/, or the folder "
            "itself or its parent where models.yaml is)"}},
          1,
          4096,
          project_file};
}

}  // namespace memfine::cli
