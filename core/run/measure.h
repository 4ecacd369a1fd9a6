// Measures one point of a sweep: every strategy of it, interleaved step by step so that their
// ratios are fair on a noisy machine. Typed results only; core/record/record.h writes them.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "core/config/config.h"
#include "core/record/record.h"
#include "core/run/job.h"

namespace memfine {

class Dist;

struct PointResult {
  PointRouting routing;
  std::vector<Measured> strategies;
};

// `skip` lists strategy labels already recorded; `tick` is called after each step of each
// strategy (progress); `opt`'s profile_dir and history_dir: a trace or the allocator's history of
// one more step of each (core/meter/profile.h). With `dist`, this process is one real rank of the expert-parallel group
// (every rank calls it with the same point) and the results are this rank's.
PointResult measure_point(const SweepPoint& point, const std::vector<std::string>& skip,
                          const std::function<void()>& tick, const Dist* dist = nullptr,
                          const RunOptions* opt = nullptr);

}  // namespace memfine
