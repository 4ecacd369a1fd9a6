#include "core/util/stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

namespace memfine {

Spread spread(std::vector<double> v) {
  if (v.empty()) return {};
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  const double med = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  return {med, v.front(), v.back()};
}

namespace {

// Number of arrangements of n1 + n2 items giving each U: counts[n1][n2][u] by the recursion
// f(n1, n2, u) = f(n1 - 1, n2, u - n2) + f(n1, n2 - 1, u).
std::vector<double> u_counts(size_t n1, size_t n2) {
  std::vector<std::vector<std::vector<double>>> f(n1 + 1, std::vector<std::vector<double>>(n2 + 1));
  for (size_t i = 0; i <= n1; ++i)
    for (size_t j = 0; j <= n2; ++j) {
      f[i][j].assign(i * j + 1, 0.0);
      if (i == 0 || j == 0) {
        f[i][j][0] = 1;
        continue;
      }
      for (size_t u = 0; u <= i * j; ++u)
        f[i][j][u] = (u >= j ? f[i - 1][j][u - j] : 0) + (u <= (i * (j - 1)) ? f[i][j - 1][u] : 0);
    }
  return f[n1][n2];
}

}  // namespace

double mann_whitney_p(const std::vector<double>& x, const std::vector<double>& y) {
  const size_t n1 = x.size(), n2 = y.size();
  if (n1 == 0 || n2 == 0) return 1;
  std::vector<std::pair<double, int>> all;
  for (double v : x) all.emplace_back(v, 0);
  for (double v : y) all.emplace_back(v, 1);
  std::sort(all.begin(), all.end());
  // Ranks, ties sharing their mean rank.
  std::vector<double> rank(all.size());
  double ties = 0;
  bool tied = false;
  for (size_t i = 0; i < all.size();) {
    size_t j = i;
    while (j + 1 < all.size() && all[j + 1].first == all[i].first) ++j;
    const double t = double(j - i + 1);
    if (t > 1) tied = true, ties += t * t * t - t;
    for (size_t k = i; k <= j; ++k) rank[k] = (double(i + j) / 2) + 1;
    i = j + 1;
  }
  double r1 = 0;
  for (size_t i = 0; i < all.size(); ++i)
    if (all[i].second == 0) r1 += rank[i];
  const double u1 = r1 - double(n1 * (n1 + 1)) / 2, u = std::min(u1, double(n1 * n2) - u1);
  if (!tied && n1 <= 30 && n2 <= 30) {
    const std::vector<double> counts = u_counts(n1, n2);
    const double total = std::accumulate(counts.begin(), counts.end(), 0.0);
    double tail = 0;
    for (size_t k = 0; k <= size_t(u) && k < counts.size(); ++k) tail += counts[k];
    return std::min(1.0, 2 * tail / total);
  }
  const double n = double(n1 + n2), mean = double(n1 * n2) / 2;
  const double sd = std::sqrt(double(n1 * n2) / 12 * ((n + 1) - ties / (n * (n - 1))));
  if (sd == 0) return 1;
  const double z = (std::fabs(u1 - mean) - 0.5) / sd;
  return std::min(1.0, std::erfc(std::max(z, 0.0) / std::sqrt(2.0)));
}

}  // namespace memfine
