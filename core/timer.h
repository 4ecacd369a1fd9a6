// One timer for the suite: wall-clock milliseconds, and the summary reported for repeated steps.
#pragma once
#include <algorithm>
#include <chrono>
#include <vector>

namespace memfine {

class Timer {
 public:
  Timer() : t0_(std::chrono::steady_clock::now()) {}
  double elapsed_ms() const {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0_).count();
  }

 private:
  std::chrono::steady_clock::time_point t0_;
};

struct Spread {
  double median = 0, min = 0, max = 0;
};

inline Spread spread(std::vector<double> v) {
  if (v.empty()) return {};
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  const double med = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  return {med, v.front(), v.back()};
}

}  // namespace memfine
