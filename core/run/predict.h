// `memfine predict`: the memory models' view of an experiment, nothing run.
#pragma once
#include <string>

namespace memfine {

// One JSON line per point and strategy on stdout (the record schema's head, then the model's
// fields); returns the exit code (0 ok, 2 bad input).
int predict_experiment(const std::string& yaml);

}  // namespace memfine
