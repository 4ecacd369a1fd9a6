// `memfine keys [WHICH]`: a key reference made from the declarations (experiments/README.md's are
// this output; a test holds them to it).
#include <iostream>

#include "core/cli/commands.h"
#include "core/config/sections.h"
#include "core/project/config.h"

namespace memfine::cli {

namespace {

const std::vector<std::string> kReferences = {"experiment", "project", "hardware"};

}  // namespace

Command keys_command() {
  std::string which;
  for (const auto& k : kReferences) which += (which.empty() ? "" : ", ") + k;
  return {
      "keys",
      "[WHICH]",
      "every key of an experiment file (or of a project file, a hardware preset)",
      "Prints every key of a file with its type, range, default and meaning, as a Markdown table:\n"
      "WHICH is one of " +
          which +
          " (default experiment; a model preset's keys are the\nexperiment's model.* keys). experiments/README.md's "
          "key references are this output.\n",
      {},
      0,
      1,
      [which](const Args& a) {
        const std::string asked = a.operands.empty() ? "experiment" : a.operands[0];
        if (std::find(kReferences.begin(), kReferences.end(), asked) == kReferences.end())
          throw UsageError("keys: '" + asked + "' is not one of " + which);
        std::cout << (asked == "experiment" ? experiment_key_reference() : project_key_reference(asked));
        return 0;
      }};
}

}  // namespace memfine::cli
