#include "core/project/goodput.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace memfine {

double young_interval(double delta, double mtbf) { return std::sqrt(2 * delta * mtbf); }

double daly_interval(double delta, double mtbf) {
  if (delta >= 2 * mtbf) return mtbf;
  const double q = delta / (2 * mtbf);
  return std::sqrt(2 * delta * mtbf) * (1 + std::sqrt(q) / 3 + q / 9) - delta;
}

double daly_wall_time(double solve, double tau, double delta, double restart, double mtbf) {
  return mtbf * std::exp(restart / mtbf) * std::expm1((tau + delta) / mtbf) * solve / tau;
}

const std::vector<Reliability>& reliability_presets() {
  static const std::vector<Reliability> presets = {
      {"llama3", 419.0 / (54 * 24) / 2048,
       "Llama 3 (arXiv 2407.21783, 3.3.4): 419 unexpected interruptions in 54 days on 16,384 H100, 2,048 nodes"},
      {"rsc1", 6.50 / 1000 / 24, "Meta RSC-1 (arXiv 2410.21680): 6.50 failures per 1000 node-days (16k A100)"},
      {"rsc2", 2.34 / 1000 / 24, "Meta RSC-2 (arXiv 2410.21680): 2.34 failures per 1000 node-days (8k A100)"},
  };
  return presets;
}

const Reliability& reliability_preset(const std::string& name) {
  std::string names;
  for (const auto& p : reliability_presets()) {
    if (p.name == name) return p;
    names += (names.empty() ? "" : ", ") + p.name;
  }
  throw std::invalid_argument("unknown reliability preset '" + name + "' (one of: " + names + ")");
}

double job_mttf(int64_t nodes, double node_failure_rate) { return 1 / (double(nodes) * node_failure_rate); }

double expected_ettr(int64_t nodes, double node_failure_rate, double restart, double write, double interval) {
  const double lost = double(nodes) * node_failure_rate * (restart + interval / 2);
  return std::max(0.0, (1 - lost) / (1 + write / interval));
}

double optimal_checkpoint_interval(int64_t nodes, double node_failure_rate, double write) {
  return std::sqrt(2 * write / (double(nodes) * node_failure_rate));
}

CheckpointPlan checkpoint_plan(double mttf, double write, double restart) {
  CheckpointPlan c;
  c.mttf = mttf, c.write = write, c.restart = restart;
  c.young = young_interval(write, mttf);
  c.daly = daly_interval(write, mttf);
  // One "node" failing at 1 / MTTF: the job's rate, as Kokolis et al.'s N r_f.
  c.ettr = expected_ettr(1, 1 / mttf, restart, write, c.young);
  c.daly_efficiency = 1 / daly_wall_time(1, c.daly, write, restart, mttf);
  return c;
}

Goodput goodput(int64_t nodes, double node_failure_rate, double restart, double write, double tokens_per_s) {
  Goodput g;
  g.mttf = job_mttf(nodes, node_failure_rate);
  g.interval = optimal_checkpoint_interval(nodes, node_failure_rate, write);
  g.ettr = expected_ettr(nodes, node_failure_rate, restart, write, g.interval);
  g.tokens_per_s = g.ettr * tokens_per_s;
  return g;
}

}  // namespace memfine
