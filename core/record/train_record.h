// A training run's records: one per step. The first carries the head every record has (the
// config, the environment, the strategy) and what holds for the whole run; the others name their
// run and step and hold what changes.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "core/record/record.h"

namespace memfine {

// What holds for a whole run, in its first step's record.
struct TrainedRun {
  int64_t static_bytes = 0;  // real ranks: rank 0's (the ranks hold alike)
  int64_t stats_ep = 1;      // the rank count the routing statistics are taken over
  int64_t ranks = 0;         // real ranks' world size; 0: one process
  double grad_err = -1;      // verify's largest relative gradient error on step 0; -1: not checked
  double verify_tolerance = 0;
};

// One step, as the loop saw it (real ranks: the slowest rank's time, the fullest rank's peak).
struct TrainedStep {
  int64_t step = 0;
  std::string status = "ok", error;  // ok | oom | error
  double loss = 0, lr = 0, ms = 0;
  int64_t peak = -1;  // -1: not measured
  int64_t ops = -1, host_syncs = -1;  // the host's work in the step (core/meter/host_work.h); -1: not counted
  json expert_tokens = json::array(), tokens_received_per_layer = json::array();
  json counters = json::object();  // the strategy's own, as `run` writes them
  std::optional<double> eval_loss;
};

json trained_step_record(const ExperimentConfig& c, const PointContext& ctx, const std::string& point,
                         const StrategySpec& s, const TrainedRun& run, const TrainedStep& step);

}  // namespace memfine
