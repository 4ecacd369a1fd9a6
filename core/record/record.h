// One record schema. The runner fills typed results (Measured, PointRouting); this file alone
// turns them into records, the lines of results.jsonl; `memfine predict`'s lines and failure
// records start from the same head (new_record). A strategy's own statistics arrive as its
// counters (Strategy::record_counters) and are written as they are found.
#pragma once
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "core/config/config.h"

namespace memfine {

using json = nlohmann::json;

// What one strategy did at a point.
struct Measured {
  StrategySpec spec;
  std::string status = "ok", error;  // ok | oom | error
  int64_t static_bytes = 0;
  std::vector<double> ms, peaks;  // per timed step
  std::vector<int64_t> ops, host_syncs;  // per timed step: operators dispatched, reads of device values
  std::string graphs = "none";           // what its timed steps ran: "step" (a CUDA graph replayed) or "none"
  std::string graphs_why;                // graphs were asked for and it ran eagerly: why
  int64_t graph_pool_bytes = -1;         // the graph's memory pool, kept between replays
  double graph_err = -1;                 // the replay's largest relative error against the eager step
  double loss = 0;
  json counters = json::object();   // the strategy's own (Strategy::record_counters)
  json predicted_activation_bytes;  // the implementation model's, or null
  json predicted_host_bytes;        // its host peak where the strategy offloads, or null
  std::string unpredicted_why;      // why there is no prediction
  double grad_err = -1;             // verify: largest relative gradient error; -1: not checked
  double verify_tolerance = 0;      // what verify accepts for the dtype
  bool lossy = false;               // Strategy::lossy: grad_err is its result, not held to the tolerance
};

// The routing of a point as this rank saw it.
struct PointRouting {
  int64_t rank = 0, world = 1;
  std::string backend;              // real ranks' process group; empty: one process
  int64_t tokens_received = 0;      // largest s' over layers (under a schedule: and timed steps)
  int64_t tokens_received_sum = 0;  // over layers (FLOPs)
  double overload = 0;
  json per_layer = json::array(), expert_tokens = json::array(), per_step = json::array();
  int64_t expert_tokens_step = 0;
};

// What every record of a point shares, made once per point: the whole resolved config and the
// environment (git commit, machine, threads, BLAS: reading them is not free).
struct PointContext {
  json config, env;
};
PointContext point_context(const ExperimentConfig& c);

// The head every record has: experiment, point, strategy (its label, the results key), its
// registered name and role, status, error, seed, ep, the config and the environment.
json new_record(const ExperimentConfig& c, const PointContext& ctx, const std::string& point, const StrategySpec& s,
                const std::string& status, const std::string& error = "");

// The records of a measured point, one per strategy. `matmul_ceiling_flops` (0: unknown) gives
// each its share of the machine's dense matmul rate.
std::vector<json> measured_records(const SweepPoint& pt, const PointContext& ctx, const PointRouting& routing,
                                   const std::vector<Measured>& ms, double matmul_ceiling_flops);

}  // namespace memfine
