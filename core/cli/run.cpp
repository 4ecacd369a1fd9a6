// `memfine run FILE.yaml`: measure an experiment's sweep (core/run/runner.h).
#include "core/cli/commands.h"
#include "core/cli/run_flags.h"
#include "core/run/runner.h"

namespace memfine::cli {

Command run_command() {
  return {"run",
          "FILE.yaml",
          "measure an experiment's sweep: a record per point and strategy",
          R"(Runs every sweep point of FILE.yaml. For each point the strategies run interleaved, step by step
(warmup steps, then `repeats` timed steps), so their ratios are fair on a noisy machine.
A point that exceeds memory.budget is recorded with status "oom"; the sweep goes on.
--resume skips recorded points and repairs a torn last line; a file written under another
configuration is refused, naming the keys that differ.

exit status: 0 all points measured (oom is a result), 1 a point failed or did not verify, 2 bad input
)",
          {kOut, kResume, kThreads, kNoProgress, kProfile, kMemoryHistory},
          1,
          1,
          [](const Args& a) { return run_experiment(a.operands[0], run_options(a)); }};
}

}  // namespace memfine::cli
