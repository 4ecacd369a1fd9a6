// `memfine train`: a language model trained on real text (core/workload/corpus.h) with learned
// routing, every strategy of every sweep point in turn, one record per step in DIR/train.jsonl:
// losses (the held-out one when evaluated), the router's tokens per expert and layer, s' of the
// hottest of `train.stats_ep` ranks (its overload factor is s' * stats_ep over the layer's
// assignments), the activation peak, step time and the strategy's own counters (MACT's chunks,
// capacity's dropped share). The first step's record carries the run's head: config, environment,
// strategy name and role, static bytes, stats_ep. The whole training state is checkpointed every
// `train.checkpoint_every` steps (core/train/checkpoint.h). --resume continues from the
// records, which are the truth: from the newest checkpoint at or before the last recorded step, the
// steps after it run again, not written again, each giving the loss its record holds.
#pragma once
#include <string>

#include "core/run/job.h"

namespace memfine {

// Returns the exit code: 0 ok (out of memory is a result), 1 a run failed or a strategy failed
// `verify`, 2 bad input. The options are `memfine run`'s (--out, --resume, --threads,
// --no-progress) and --trace-out.
int train_experiment(const std::string& yaml, const RunOptions& opt);

}  // namespace memfine
