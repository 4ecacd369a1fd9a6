// What `memfine run` and `memfine train` share before they measure (and `launch` before it starts
// ranks): the file loaded and validated, the job joined (real ranks), one rank per expert-parallel
// rank checked once, the results folder resolved and opened by rank 0, a resumed file's records
// checked against the file's points, and each point's thread count resolved.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "core/config/config.h"
#include "core/record/results.h"

namespace memfine {

class Dist;

struct RunOptions {
  std::string out_dir;   // empty: a new folder results/runs/<device class>/<name>/<date-time>
  bool resume = false;   // without out_dir: the newest such folder of the experiment
  int64_t threads = -1;  // -1: as the YAML says
  bool progress = true;
  std::string trace_out;  // memfine train: write the routing of the first run as a stepped trace CSV
  std::string profile_dir;  // memfine run: a trace of one extra step per point and strategy (core/meter/profile.h)
  std::string history_dir;  // memfine run: the allocator's history of one extra step per point and strategy
};

enum class Command { Run, Train };

struct Job {
  std::string yaml;
  Command command = Command::Run;
  std::vector<SweepPoint> points;        // threads resolved (the YAML's, or --threads; 0: all cores)
  std::unique_ptr<Dist> dist;            // null: one process
  bool writer = true;                    // rank 0: reads and writes the records
  std::string dir;                       // the results folder (rank 0's; every rank knows it)
  std::unique_ptr<ResultsFile> results;  // rank 0's; null on the other ranks
  // What rank 0 found recorded, on every rank: (point, strategy label, step; -1 for run's records)
  // and its status.
  std::map<std::tuple<std::string, std::string, int64_t>, std::string> recorded;
  size_t earlier = 0;  // records that were there before this run (--resume)
  ~Job();
  bool has(const std::string& point, const std::string& label, int64_t step = -1) const {
    return recorded.count({point, label, step}) > 0;
  }
  std::string status(const std::string& point, const std::string& label, int64_t step = -1) const {
    auto it = recorded.find({point, label, step});
    return it == recorded.end() ? "" : it->second;
  }
  const char* name() const { return command == Command::Run ? "run" : "train"; }
};

// Starts a job; null after saying why on stderr (`code`: the exit status, 2 for bad input).
std::unique_ptr<Job> start_job(Command command, const std::string& yaml, const RunOptions& opt, int& code);

// Why `world` ranks cannot run `points` ("" when they can): one rank per expert-parallel rank,
// one device. `world` 0: one process, not started by a launcher; `launched`: WORLD_SIZE is set.
std::string ranks_problem(const std::vector<SweepPoint>& points, int world, bool launched);

// The folder a run writes when --out is not given: results/runs/<device class>/<name>/<date-time>
// for a new run, the newest of them for --resume ("" when there is none).
std::string default_results_dir(const ExperimentConfig& c, bool resume);

// LibTorch's intra-op thread count a setting means (0: all cores).
int64_t resolve_threads(int64_t threads);

}  // namespace memfine
