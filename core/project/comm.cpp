#include "core/project/comm.h"

#include <cmath>
#include <set>

namespace memfine {

namespace {
double ring_steps(const Link& l, int64_t steps, int64_t ranks, double bytes) {
  return ranks <= 1 ? 0 : double(steps) * (l.alpha + bytes / double(ranks) / l.beta);
}
}  // namespace

double all_to_all_time(const Link& l, int64_t ranks, double bytes) { return ring_steps(l, ranks - 1, ranks, bytes); }
double all_reduce_time(const Link& l, int64_t ranks, double bytes) {
  return ring_steps(l, 2 * (ranks - 1), ranks, bytes);
}
double reduce_scatter_time(const Link& l, int64_t ranks, double bytes) {
  return ring_steps(l, ranks - 1, ranks, bytes);
}
double all_gather_time(const Link& l, int64_t ranks, double bytes) { return ring_steps(l, ranks - 1, ranks, bytes); }
double send_time(const Link& l, double bytes) { return l.alpha + bytes / l.beta; }

double experts_reached(double experts, double k, double groups, bool consecutive) {
  if (groups <= 1) return groups;
  if (!consecutive) return groups * (1 - std::pow(1 - 1 / groups, k));
  const int64_t E = int64_t(experts), K = int64_t(k), G = int64_t(groups);
  double sum = 0;
  for (int64_t t = 0; t < E; ++t) {
    std::set<int64_t> hit;
    for (int64_t j = 0; j < K; ++j) hit.insert((t * K + j) % E * G / E);
    sum += double(hit.size());
  }
  return sum / double(E);
}

}  // namespace memfine
