// The experiment runner: every point of a sweep (core/run/measure.h measures one), resume, progress,
// real ranks' records gathered by rank 0; one results record per point, strategy and rank.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "core/config/config.h"

namespace memfine {

struct RunOptions {
  std::string out_dir;   // empty: results/<device class>/<experiment name>
  bool resume = false;
  int64_t threads = -1;  // -1: as the YAML says
  bool progress = true;
  std::string trace_out;  // memfine train: write the routing of the first run as a stepped trace CSV
};

// `memfine run`: returns the process exit code (0 ok, 1 some point failed, 2 bad input).
int run_experiment(const std::string& yaml, const RunOptions& opt);

}  // namespace memfine
