// `memfine run`: every point of a sweep (core/run/measure.h measures one), resumable, with
// progress; real ranks' records gathered by rank 0; one results record per point, strategy and rank.
#pragma once
#include <string>

#include "core/run/job.h"

namespace memfine {

// Returns the process exit code: 0 every point measured (out of memory is a result), 1 a point
// failed with an error or a strategy failed `verify`, 2 bad input.
int run_experiment(const std::string& yaml, const RunOptions& opt);

}  // namespace memfine
