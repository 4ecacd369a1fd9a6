// `memfine predict`: the memory models' view of an experiment, nothing run.
#pragma once
#include <string>

namespace memfine {

// A table on stdout, one row per point and strategy (core/record/table.h); with `json_lines`, one
// JSON line each instead (the record schema's head, then the model's fields). Returns the exit
// code (0 ok, 2 bad input).
int predict_experiment(const std::string& yaml, bool json_lines = false);

}  // namespace memfine
