#include "core/project/comm.h"

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

}  // namespace memfine
