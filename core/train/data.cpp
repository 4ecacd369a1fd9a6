#include "core/train/data.h"

#include <ATen/core/grad_mode.h>

#include "core/dist/dist.h"
#include "core/run/rank_step.h"
#include "core/util/hash.h"
#include "core/workload/corpus.h"

namespace memfine {

namespace {

// A step's tokens: inputs and next tokens of `micro_batch` sequences.
void set_tokens(TrainState& st, const at::Tensor& seqs) {
  const int64_t s = seqs.size(1) - 1;
  st.input.copy_(seqs.narrow(1, 0, s).reshape(-1));
  st.target.copy_(seqs.narrow(1, 1, s).reshape(-1));
}

uint64_t step_seed(const TrainConfig& t, int64_t step) { return mix_seed(t.data_seed, uint64_t(step) + 1); }
uint64_t eval_seed(const TrainConfig& t, int64_t batch) {
  return mix_seed(mix_seed(t.data_seed, 0xe7a1), uint64_t(batch));
}

// This rank's sequences: real ranks share one global batch of micro_batch * world sequences, rank
// r taking the r-th micro_batch of them, so N ranks see what one process with micro_batch * N would.
at::Tensor rank_batch(const at::Tensor& text, const ModelConfig& m, uint64_t seed, const Dist* d) {
  const int64_t world = d ? d->world() : 1, rank = d ? d->rank() : 0;
  return sample_sequences(text, m.micro_batch * world, m.seq, seed).narrow(0, rank * m.micro_batch, m.micro_batch);
}

}  // namespace

void set_step_tokens(TrainState& st, const Corpus& corpus, int64_t step) {
  set_tokens(st, rank_batch(corpus.train, st.cfg.model, step_seed(st.cfg.train, step), st.dist));
}

double evaluate(TrainState& st, Strategy& plain, const Corpus& corpus) {
  const TrainConfig t = st.cfg.train;
  st.cfg.train.aux_loss = 0;
  std::vector<at::Tensor>* counts = st.expert_counts;
  st.expert_counts = nullptr;
  double sum = 0;
  {
    at::NoGradGuard no_grad;
    for (int64_t b = 0; b < t.eval_batches; ++b) {
      set_tokens(st, rank_batch(corpus.validation, st.cfg.model, eval_seed(t, b), st.dist));
      sum += forward_loss(st, plain, -1).item<double>();  // real ranks: 1/world of the batch's mean
    }
  }
  st.cfg.train = t;
  st.expert_counts = counts;
  at::Tensor mean = at::tensor({sum / double(t.eval_batches)}, at::kDouble);
  if (st.dist) st.dist->allreduce_sum(mean);
  return mean.item<double>();
}

}  // namespace memfine
