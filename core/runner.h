// The experiment runner: every point of a sweep, every strategy of a point, interleaved step by
// step so their ratios are fair on a noisy machine; one results record per point and strategy.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/results.h"

namespace memfine {

struct RunOptions {
  std::string out_dir;   // empty: results/<device class>/<experiment name>
  bool resume = false;
  int64_t threads = -1;  // -1: as the YAML says
  bool progress = true;
};

// Measures one point; `skip` lists strategy labels already recorded; `tick` is called after each
// step of each strategy (progress). Returns one record per measured strategy.
// With `dist`, this process is one real rank of the expert-parallel group (every rank calls it
// with the same point) and the records are this rank's.
class Dist;
std::vector<json> measure_point(const SweepPoint& point, const std::vector<std::string>& skip,
                                const std::function<void()>& tick, const Dist* dist = nullptr);

// `memfine run`: returns the process exit code (0 ok, 1 some point failed, 2 bad input).
int run_experiment(const std::string& yaml, const RunOptions& opt);

// `memfine launch --nproc N`: starts N local ranks of `memfine run` (RANK, WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT on loopback) and reports the first that fails.
int launch_experiment(const std::string& self, int nproc, const std::vector<std::string>& run_args);

// `memfine predict`: one JSON line per point and strategy on stdout, nothing run.
int predict_experiment(const std::string& yaml);

// Sets LibTorch's intra-op threads (0 = all cores) and returns the count in effect.
int64_t apply_threads(int64_t threads);

// The summary table printed after a run.
std::string summary_table(const std::vector<json>& records);

}  // namespace memfine
