// `verify: true`: every dropless strategy's loss and gradients against the plain computation, with
// a verdict against a tolerance stated per dtype. On one process the reference strategy computes
// the same step on a copy of the point's state; on real ranks each rank holds its share against one
// process computing the whole global batch (every expert, every rank's tokens), as
// tests/test_dist.cpp does. The reference is computed once per point, whatever the strategies.
#pragma once
#include <memory>
#include <optional>
#include <string>

#include "core/config/config.h"

namespace memfine {

class Dist;
class StepGraph;
class Strategy;
struct TrainState;

// The largest relative difference `verify` accepts: float64 1e-10, float32 1e-4 (sums in another
// order), bfloat16 3e-2 (8 bits of mantissa, rounded after every partial sum).
double verify_tolerance(const std::string& dtype);

class Verifier {
 public:
  // `fresh`: the point's state before any step (its weights, data and routing); real ranks: this
  // rank's, and every rank makes its verifier alike (the reference is a collective-free process of
  // the global batch).
  Verifier(const TrainState& fresh, const Dist* dist);
  ~Verifier();
  // A strategy's largest relative error of loss and gradients (max |a - b| / max |b| per tensor)
  // against the reference, on a copy of the fresh state; nullopt for one that drops assignments
  // (it computes another model). Throws what its step throws (out of memory where it plans).
  std::optional<double> error_of(const StrategySpec& spec) const;

 private:
  const TrainState& fresh_;
  const Dist* dist_;
  std::unique_ptr<TrainState> ref_;
  double ref_loss_ = 0;
};

// `graphs: step`: the captured pass replayed against the same step run eagerly on the same state,
// neither updating: the largest relative error of loss and gradients (same kernels, same order:
// expected zero). The gradients left are the replay's.
double replay_error(TrainState& st, Strategy& s, StepGraph& graph, int64_t step);

// One strategy on a state that has its step's data (a language model's tokens), one process.
std::optional<double> verify_on_state(const TrainState& fresh, const StrategySpec& spec);

}  // namespace memfine
