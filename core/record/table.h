// The console reporter: the table `memfine run` prints after a run (and `memfine table` of a
// results folder), one row per point and strategy. It only reads records.
#pragma once
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace memfine {

using json = nlohmann::json;

// The table printed after a run: ratios against the strategy of Role::Baseline (where it ran out
// of memory, against it at the nearest budget of the same point where it fit, marked), the dropped
// share, the chunk choice; the first `earlier` records (from before a --resume) are marked with
// the machine and commit they came from.
std::string summary_table(const std::vector<json>& records, size_t earlier = 0);

// The table `memfine train` prints at its end: per point and strategy, the steps recorded, the step
// it ran out of memory at, the last held-out loss, the largest activation peak, the median step time
// and tokens per second (the whole job's on real ranks).
std::string train_table(const std::vector<json>& records);

// `memfine predict`'s table: per point and strategy, the predicted static, activation and total
// bytes, whether they fit the budget, MACT's chunks per layer, and why a strategy is not predicted
// or does not fit.
std::string predict_table(const std::vector<json>& records);

}  // namespace memfine
