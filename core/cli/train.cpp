// `memfine train FILE.yaml`: train a MoE language model on real text (core/train/train.h).
#include "core/train/train.h"
#include "core/cli/commands.h"
#include "core/cli/run_flags.h"

namespace memfine::cli {

Command train_command() {
  return {"train",
          "FILE.yaml",
          "train a MoE language model on real text: a record per step",
          R"(Trains FILE.yaml's language model (model.vocab, a train: section) on real text with learned
routing: every strategy of every sweep point in turn, from the same weights on the same data
order. One record per step in DIR/train.jsonl: loss, evaluation loss every train.eval_every steps,
the router's tokens per layer and expert, s' of the hottest of train.stats_ep ranks (its
overload factor: s' * stats_ep over the layer's assignments), the activation peak, step time
and the strategy's counters (MACT's chunks, capacity's dropped share). The whole training state
is saved every train.checkpoint_every steps in DIR/checkpoints/; --resume continues from there
on the same data, without gap or repeat in the records. Out of memory ends that run with a
record of status "oom"; the others go on. With parallel.ep N > 1 it trains on N real ranks:
start it with memfine launch --nproc N (see memfine launch --help).
The corpus (train.corpus) defaults to Debian's 'fortunes' package (scripts/setup-deps installs it).

exit status: 0 every run trained (oom is a result), 1 a run failed, 2 bad input
)",
          {kOut, kResume, kThreads, kNoProgress, kTraceOut},
          1,
          1,
          [](const Args& a) { return train_experiment(a.operands[0], run_options(a)); }};
}

}  // namespace memfine::cli
