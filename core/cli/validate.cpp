// `memfine validate FILE.yaml...`: experiments (or project files) checked without running them.
#include <algorithm>
#include <iostream>

#include "core/cli/commands.h"
#include "core/cli/run_flags.h"
#include "core/project/check.h"
#include "core/project/published.h"

namespace memfine::cli {

namespace {

int validate_one(const std::string& file) {
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

// Every file is checked, a folder of them in one start of the program; any invalid one fails it.
int validate(const Args& a) {
  int code = 0;
  for (const std::string& file : a.operands) code = std::max(code, validate_one(file));
  return code;
}

}  // namespace

Command validate_command() {
  return {"validate",
          "FILE.yaml...",
          "check experiment files without running them",
          R"(Checks each FILE.yaml and every point of its sweep without running anything. Prints one line per
problem on stderr, as FILE:LINE: key.path: what is wrong, and exits 2 when any file has one; exits 0
when all are valid. A project file (`memfine project`'s: it names a `hardware`) is checked as one.
)",
          {},
          1,
          4096,
          validate};
}

}  // namespace memfine::cli
