// The statistics the suite's reports use: a sample's median and range, and whether two samples of
// step times come from one distribution (a two-sided Mann-Whitney U test, as Google Benchmark's
// compare tool does).
#pragma once
#include <vector>

namespace memfine {

struct Spread {
  double median = 0, min = 0, max = 0;
};
Spread spread(std::vector<double> v);

// The two-sided p-value of a Mann-Whitney U test that `x` and `y` come from one distribution:
// exact for small samples without ties, the normal approximation (tie- and continuity-corrected)
// otherwise.
double mann_whitney_p(const std::vector<double>& x, const std::vector<double>& y);

// The fewest values a side for which the exact two-sided test can reach p < 0.05.
constexpr size_t kUTestMinSteps = 4;

}  // namespace memfine
