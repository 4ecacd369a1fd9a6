// Goodput, the fault-tolerance part of `memfine project`: how much of a layout's speed survives
// failures and restarts. Each formula is the published one, with its source; times are in hours
// unless a name says otherwise.
//   Young (CACM 17(9), 1974): the checkpoint interval sqrt(2 delta M).
//   Daly (Future Generation Computer Systems 22(3), 2006): a higher-order interval and the expected
//   wall time of a job that checkpoints every tau and restarts after each failure.
//   Kokolis et al. (Meta, HPCA 2025, arXiv 2410.21680): the expected effective training time ratio
//   (ETTR) of a job on N nodes that each fail at rate r_f, and its optimal checkpoint interval.
#pragma once
#include <string>
#include <vector>

namespace memfine {

// Young's interval: sqrt(2 * delta * M), delta the checkpoint write time, M the job's mean time
// between failures.
double young_interval(double delta, double mtbf);

// Daly's interval: sqrt(2 delta M) [1 + (1/3) sqrt(delta/2M) + (1/9) delta/2M] - delta for
// delta < 2M, else M.
double daly_interval(double delta, double mtbf);

// Daly's expected wall time of a job needing `solve` hours without failures, checkpointing every
// `tau` (writing for `delta`), restarting in `restart` after each failure:
// M e^(R/M) (e^((tau + delta)/M) - 1) solve / tau.
double daly_wall_time(double solve, double tau, double delta, double restart, double mtbf);

// A cluster's reliability: failures per node and hour, and what a failure costs.
struct Reliability {
  std::string name;          // the preset's name, or "" for one written out
  double node_failure_rate;  // failures per node per hour
  std::string source;        // where the rate comes from
};
// The published rates: Llama 3's 419 unexpected interruptions in 54 days on 16,384 H100 (2,048
// nodes of 8), Meta's RSC-1 (6.50) and RSC-2 (2.34) failures per 1000 node-days (servers of 8 A100).
// Each counts servers of this many GPUs, and a written rate is read the same way: failures and
// checkpoint writes count such nodes, not a preset's NVLink domain (a GB200 rack joins 72).
constexpr int64_t kReliabilityNodeGpus = 8;
const std::vector<Reliability>& reliability_presets();
// A preset by name; throws std::invalid_argument listing the names otherwise.
const Reliability& reliability_preset(const std::string& name);

// The job's mean time to failure: 1 / (nodes * r_f).
double job_mttf(int64_t nodes, double node_failure_rate);

// Kokolis et al.'s expected ETTR: (1 - N r_f (u0 + dt/2)) / (1 + w/dt), u0 the restart overhead,
// w the checkpoint write time, dt the interval; 0 where failures leave no progress.
double expected_ettr(int64_t nodes, double node_failure_rate, double restart, double write, double interval);
// Their optimal interval: sqrt(2 w / (N r_f)).
double optimal_checkpoint_interval(int64_t nodes, double node_failure_rate, double write);

// How often to checkpoint a job that fails every `mttf` hours on average, by each formula, and
// what it keeps (`memfine checkpoint`).
struct CheckpointPlan {
  double mttf = 0, write = 0, restart = 0;  // hours
  double young = 0, daly = 0;               // intervals, hours (Kokolis et al.'s optimum is Young's)
  double ettr = 0;                          // Kokolis et al.'s expected ETTR at Young's interval
  double daly_efficiency = 0;               // solve time over Daly's expected wall time at Daly's interval
};
CheckpointPlan checkpoint_plan(double mttf, double write, double restart);

// What failures leave of a layout's speed, at the optimal interval.
struct Goodput {
  double mttf = 0;          // the job's, hours
  double interval = 0;      // the checkpoint interval, hours
  double ettr = 0;          // expected effective training time ratio
  double tokens_per_s = 0;  // goodput: ETTR x the failure-free tokens per second
};
Goodput goodput(int64_t nodes, double node_failure_rate, double restart, double write, double tokens_per_s);

}  // namespace memfine
