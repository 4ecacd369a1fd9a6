// What an experiment must satisfy beyond its YAML's types and ranges (core/config/config.h),
// checked where strategies, workloads, the model and this build are known: strategy names and
// parameters (each strategy checks its own), the workload against the model, the budget against
// the static-memory floor, and what this build can run.
#pragma once
#include <string>
#include <vector>

#include "core/config/config.h"

namespace memfine {

// load_experiment, then these checks; problems are appended to `errors` as "FILE:LINE: key: what".
// Resolves `kernels: auto`. With `runnable_here` false, a device or kernels this build lacks is
// not a problem: the memory model needs neither, so a CPU build can predict a GPU experiment.
std::vector<SweepPoint> load_and_validate(const std::string& path, std::vector<std::string>& errors,
                                          bool runnable_here = true);

}  // namespace memfine
