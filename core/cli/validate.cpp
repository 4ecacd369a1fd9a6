// `memfine validate FILE.yaml`: an experiment (or a project file) checked without running it.
#include <iostream>

#include "core/cli/commands.h"
#include "core/cli/run_flags.h"
#include "core/project/check.h"
#include "core/project/published.h"

namespace memfine::cli {

namespace {

int validate(const Args& a) {
  const std::string file = a.operands[0];
  if (is_project_file(file)) {
    try {
      const ProjectConfig pc = load_project(file, default_presets_dir(file));
      load_published(pc);  // a validation case's figures: read apart, checked alike
      std::cout << file << ": valid project file, " << pc.model_name << " on " << pc.gpus << " x " << pc.hardware.name
                << ", " << pc.strategies.size() << " strategies\n";
      return 0;
    } catch (const std::invalid_argument& e) {
      std::cerr << e.what() << "\n";
      return 2;
    }
  }
  bool ok = false;
  const auto points = load_or_say(file, ok);
  if (!ok) return 2;
  std::cout << file << ": valid, " << points.size() << " point(s) x " << points[0].config.strategies.size()
            << " strategies\n";
  return 0;
}

}  // namespace

Command validate_command() {
  return {"validate",
          "FILE.yaml",
          "check an experiment file without running it",
          R"(Checks FILE.yaml and every point of its sweep without running anything. Prints one line per
problem on stderr, as FILE:LINE: key.path: what is wrong, and exits 2; exits 0 when valid. A project
file (`memfine project`'s: it names a `hardware`) is checked as one.
)",
          {},
          1,
          1,
          validate};
}

}  // namespace memfine::cli
