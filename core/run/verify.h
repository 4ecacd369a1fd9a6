// `verify: true`: every dropless strategy's loss and gradients against the plain computation, with
// a verdict against a tolerance stated per dtype. On one process the reference strategy computes
// the same step on the same state; on real ranks each rank holds its share against one process
// computing the whole global batch (every expert, every rank's tokens), as tests/test_dist.cpp does.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "core/config/config.h"

namespace memfine {

class Dist;
struct TrainState;

// The largest relative difference `verify` accepts: float64 1e-10, float32 1e-4 (sums in another
// order), bfloat16 3e-2 (8 bits of mantissa, rounded after every partial sum).
double verify_tolerance(const std::string& dtype);

// The largest relative error of each strategy's loss and gradients (max |a - b| / max |b| per
// tensor), or nullopt for a strategy that drops assignments (it computes another model). Real
// ranks: this rank's error; every rank must call it with the same strategies.
std::vector<std::optional<double>> verify_strategies(const ExperimentConfig& c, const std::vector<StrategySpec>& specs,
                                                     const Dist* dist);

// The same for one strategy on a state that has its step's data (a language model's tokens): its
// error against the reference strategy on a copy of that state. One process only.
std::optional<double> verify_on_state(const TrainState& fresh, const StrategySpec& spec);

}  // namespace memfine
