// What a training step reads and how a run is evaluated: each step's sequences (the same for every
// strategy, and on real ranks each rank's share of one global batch), and the held-out loss.
#pragma once
#include <ATen/ATen.h>

#include <cstdint>

#include "core/config/config.h"

namespace memfine {

class Dist;
class Strategy;
struct Corpus;
struct TrainState;

// Step `step`'s tokens set into `st` (inputs and next tokens of its sequences).
void set_step_tokens(TrainState& st, const Corpus& corpus, int64_t step);

// Mean next-token loss over the fixed held-out batches (no auxiliary loss, no gradients); real
// ranks evaluate their shares of each batch together.
double evaluate(TrainState& st, Strategy& plain, const Corpus& corpus);

}  // namespace memfine
