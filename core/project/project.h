// `memfine project FILE.yaml`: for a model (a preset or its keys), a cluster (hardware preset, GPU
// count) and a search space, every layout x registered strategy estimated (core/project/estimate.h),
// ranked by goodput, with why each rejected one fails. The imbalance is an input: a routing law of
// the experiment files (zipf, lognormal, hot, trace: the hottest expert-parallel rank's s' over
// its balanced share, per layout's EP) or an overload factor given outright (a percentile of s').
#pragma once
#include <map>
#include <vector>

#include "core/project/check.h"
#include "core/project/estimate.h"

namespace memfine {

// The hottest expert-parallel rank's received rows over its balanced share, for `ep` ranks, from
// the law's draw per MoE layer (core/workload), or the given factor: the largest over the layers
// (what one layer's working set holds at its hottest rank) and their mean (what the step waits for:
// each layer waits for its own hottest rank). What a rank keeps until backward is the sum of what
// it received in each of its layers, and the layers' hot ranks are drawn apart, so the rank that
// keeps the most holds its layers' mean share (`held`), between the two.
struct Overload {
  double worst = 1, mean = 1;
  std::vector<std::vector<double>> shares;  // per MoE layer, each rank's rows over its share; empty: given
  // The largest mean share any rank holds over a pipeline rank's `layers` MoE layers (disjoint runs
  // of the stack); given outright, the mean (which bounds it: no rank's mean exceeds the mean of the
  // layers' hottest).
  double held(int64_t layers) const;
};
Overload project_overload(const ProjectConfig& c, int64_t ep);

struct ProjectResult {
  std::vector<Estimate> ranked;        // fitting, dropless first, best goodput first
  std::vector<Estimate> rejected;      // each with its reason
  int64_t layouts = 0;                 // layouts tried (before strategies)
  std::map<int64_t, Overload> overload;  // the hottest rank's s' over its share, by EP
};
ProjectResult run_project(const ProjectConfig& c);

}  // namespace memfine
