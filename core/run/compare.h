// `memfine compare`: two runs of a sweep (or two strategies of one) point by point: activation
// peak and median step time as ratios, a statistical verdict on the step times from every timed
// step (a two-sided Mann-Whitney U test, as Google Benchmark's compare tool does), and what differs
// between the runs' machines, builds and configurations, so that a change's effect is not confused
// with a machine's.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace memfine {

using json = nlohmann::json;

// The two-sided p-value of a Mann-Whitney U test that `x` and `y` come from one distribution:
// exact for small samples without ties, the normal approximation (tie- and continuity-corrected)
// otherwise.
double mann_whitney_p(const std::vector<double>& x, const std::vector<double>& y);

// The comparison of `b` against `a` (records of the same experiment), as a table with notes.
// `alpha`: the test's level.
std::string compare_runs(const std::vector<json>& a, const std::vector<json>& b, const std::string& name_a,
                         const std::string& name_b, double alpha = 0.05);

// Strategy `y` against strategy `x` at each point of one run.
std::string compare_strategies(const std::vector<json>& records, const std::string& x, const std::string& y,
                               double alpha = 0.05);

// `memfine compare`: two folders, or one and two strategy labels (as written in any style); the exit code.
int compare_command(const std::vector<std::string>& dirs, const std::vector<std::string>& strategies);

}  // namespace memfine
