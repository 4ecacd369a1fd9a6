#include "core/cli/run_flags.h"

#include <ctime>
#include <iostream>

#include "core/record/environment.h"
#include "core/run/validate.h"

namespace memfine::cli {

const Flag kOut{"--out", "DIR", "results folder (default: a new folder results/runs/<device>/<name>/<date-time>/)"};
const Flag kResume{"--resume", "", "continue DIR's records (without --out: the experiment's newest folder)"};
const Flag kThreads{
    "--threads", "N", "LibTorch intra-op threads (0 = all cores); overrides the YAML's `threads`", 1, true, 0, 1024};
const Flag kNoProgress{"--no-progress", "", "no progress bar on stderr"};
const Flag kProfile{"--profile", "DIR",
                    "after each point's timed steps, one more step of each strategy under LibTorch's\n"
                    "profiler, its trace written to DIR/<experiment>.<point>.<strategy>.json (Perfetto,\n"
                    "scripts/trace_summary.py); that step is not in the records. GPU builds only"};
const Flag kMemoryHistory{"--memory-history", "DIR",
                          "after each point's timed steps, one more step of each strategy with the CUDA\n"
                          "allocator's history recorded (every allocation and its C++ frames), written to\n"
                          "DIR/<experiment>.<point>.<strategy>.pickle for scripts/memory_history.py (what is\n"
                          "alive at the peak); not in the records. GPU builds only"};
const Flag kTraceOut{"--trace-out", "CSV",
                     "write the first run's routing (first point, first strategy) as\n"
                     "step,layer,expert,tokens: the trace workload's format, which replays it at any\n"
                     "size (workload: {kind: trace, trace: CSV, schedule: trace}) in memfine run,\n"
                     "memfine predict or on a GPU"};

RunOptions run_options(const Args& a) {
  RunOptions o;
  o.out_dir = a.text("--out");
  o.resume = a.has("--resume");
  o.threads = a.integer("--threads", -1);
  o.progress = !a.has("--no-progress");
  o.trace_out = a.text("--trace-out");
  o.profile_dir = a.text("--profile");
  o.history_dir = a.text("--memory-history");
  return o;
}

std::vector<SweepPoint> load_or_say(const std::string& yaml, bool& ok) {
  std::vector<std::string> errors;
  auto points = load_and_validate(yaml, errors);
  for (const auto& e : errors) std::cerr << e << "\n";
  ok = errors.empty();
  return points;
}

std::map<std::string, std::string> made_stamp() {
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return {{"git_commit", git_commit()}, {"date", date}};
}

}  // namespace memfine::cli
