#include "core/train_step.h"

#include <ATen/CPUGeneratorImpl.h>

#include "core/workload.h"

namespace memfine {

int64_t TrainState::static_bytes() const {
  int64_t n = 0;
  for (const auto& p : model.parameters()) n += int64_t(p.nbytes() + (p.grad().defined() ? p.grad().nbytes() : 0));
  return n + adam->state_bytes() + int64_t(input.nbytes() + target.nbytes()) + rank.input_bytes();
}

std::unique_ptr<TrainState> make_train_state(const ExperimentConfig& c, bool input_requires_grad) {
  auto st = std::make_unique<TrainState>();
  st->cfg = c;
  st->rank = make_emulated_rank(c, c.rank);
  st->model = make_model(c, st->rank.rank);
  const auto opt = options_of(c);
  auto draw = [&](uint64_t what) {
    at::Generator gen = at::detail::createCPUGenerator(mix_seed(mix_seed(c.seed, 7000 + uint64_t(st->rank.rank)), what));
    return at::randn({c.model.tokens(), c.model.hidden}, gen, at::TensorOptions().dtype(at::kDouble)).to(opt);
  };
  st->input = draw(1).requires_grad_(input_requires_grad);
  st->target = draw(2);
  st->adam = std::make_unique<Adam>(st->model.parameters());
  return st;
}

at::Tensor forward_loss(TrainState& st, Strategy& s, int64_t step) {
  at::Tensor h = st.input;
  at::Tensor aux = at::zeros({}, st.input.options());
  for (int64_t l = 0; l < st.model.cfg.layers; ++l) {
    LayerInput in{&st.cfg, &st.model, &st.model.layers[size_t(l)], &st.rank, l, step};
    LayerOutput out = s.run_layer(h, in);
    h = out.hidden;
    aux = aux + out.aux_loss;
  }
  at::Tensor diff = rms_norm(h, st.model.final_norm) - st.target;
  return diff.pow(2).mean() + aux;
}

double train_step(TrainState& st, Strategy& s, int64_t step, bool update) {
  st.adam->zero_grad();
  if (st.input.requires_grad() && st.input.grad().defined()) st.input.mutable_grad().zero_();
  s.begin_step(step);
  double loss_value;
  {
    at::Tensor loss = forward_loss(st, s, step);
    loss_value = loss.item<double>();
    loss.backward();
  }
  if (update) st.adam->step();
  return loss_value;
}

}  // namespace memfine
