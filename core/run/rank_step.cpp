#include "core/run/rank_step.h"

#include <ATen/CPUGeneratorImpl.h>

#include "core/meter/memory_meter.h"
#include "core/workload/workload.h"

namespace memfine {

namespace {
// A rank's input and target (`what` 1 and 2), the same whichever process draws them.
at::Tensor rank_data(const ExperimentConfig& c, int64_t rank, uint64_t what) {
  if (c.model.vocab > 0)
    return at::zeros({c.model.tokens()}, at::TensorOptions(at::kLong).device(options_of(c).device()));
  at::Generator gen = at::detail::createCPUGenerator(mix_seed(mix_seed(c.seed, 7000 + uint64_t(rank)), what));
  return at::randn({c.model.tokens(), c.model.hidden}, gen, at::TensorOptions().dtype(at::kDouble)).to(options_of(c));
}
}  // namespace

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
  st->input = rank_data(c, st->rank.rank, 1).requires_grad_(input_requires_grad);
  st->target = rank_data(c, st->rank.rank, 2);
  st->adam = std::make_unique<Adam>(st->model.parameters());
  return st;
}

std::unique_ptr<TrainState> copy_train_state(const TrainState& src) {
  auto st = std::make_unique<TrainState>();
  st->cfg = src.cfg;
  st->dist = src.dist;
  st->model = src.model.clone();
  st->rank = src.rank.clone();
  st->input = src.input.detach().clone();
  if (src.input.requires_grad()) st->input.requires_grad_(true);
  st->target = src.target.clone();
  st->adam = std::make_unique<Adam>(st->model.parameters());
  return st;
}

std::unique_ptr<TrainState> make_rank_state(const ExperimentConfig& c, const Dist& dist, bool input_requires_grad) {
  ExperimentConfig rc = c;
  rc.rank = dist.rank();
  auto st = make_train_state(rc, input_requires_grad);
  st->dist = &dist;
  st->rank.real = true;
  return st;
}

std::unique_ptr<TrainState> make_global_reference(const ExperimentConfig& c, bool input_requires_grad) {
  auto st = std::make_unique<TrainState>();
  ExperimentConfig g = c;
  g.ep = 1;
  g.rank = 0;
  g.model.micro_batch = c.model.micro_batch * c.ep;
  st->cfg = g;
  st->model = make_model(g, 0);                // all experts; weights are drawn per global expert
  EmulatedRank er = make_emulated_rank(c, 0);  // for its tables; routing replaced below
  for (int64_t l = 0; l < c.model.layers; ++l) {
    RankRouting& r = er.layers[size_t(l)];
    r.rank = 0, r.ep = 1, r.first_expert = 0, r.local_experts = c.model.experts;
    r.own_experts = global_routing(c, l);  // every rank's tokens, in rank order
    r.own_key = at::zeros_like(r.own_experts);
    r.peer_pos = r.peer_rank = r.peer_expert = r.peer_key = at::zeros({0}, at::kLong);
    r.peer_score = at::zeros({0}, at::kDouble);
    r.tokens_received = r.own_experts.numel();
  }
  st->rank = std::move(er);
  std::vector<at::Tensor> in, tg;
  for (int64_t r = 0; r < c.ep; ++r) in.push_back(rank_data(c, r, 1)), tg.push_back(rank_data(c, r, 2));
  st->input = at::cat(in).requires_grad_(input_requires_grad);
  st->target = at::cat(tg);
  st->adam = std::make_unique<Adam>(st->model.parameters());
  return st;
}

at::Tensor forward_loss(TrainState& st, Strategy& s, int64_t step) {
  const bool lm = st.model.cfg.vocab > 0;
  at::Tensor h = lm ? embed_tokens(st.model, st.input) : st.input;
  at::Tensor aux = at::zeros({}, h.options());
  if (st.expert_counts) st.expert_counts->assign(size_t(st.model.cfg.layers), at::Tensor());
  for (int64_t l = 0; l < st.model.cfg.layers; ++l) {
    LayerInput in{&st.cfg, &st.model, &st.model.layers[size_t(l)], &st.rank, l, step, st.dist, st.expert_counts};
    LayerOutput out = s.run_layer(h, in);
    h = out.hidden;
    aux = aux + out.aux_loss;
  }
  // Real ranks: each holds 1/world of the global batch's mean loss. The router's auxiliary loss
  // is each rank's own over its tokens (as Megatron computes it per micro-batch), averaged the same
  // way; emulated peers' loss terms (the other part of `aux`) are zero there.
  const double share = st.dist ? 1.0 / double(st.dist->world()) : 1.0;
  if (lm) return (next_token_loss(st.model, h, st.target) + aux) * share;
  at::Tensor diff = rms_norm(h, st.model.final_norm) - st.target;
  return (diff.pow(2).mean() + aux) * share;
}

at::Tensor forward_backward(TrainState& st, Strategy& s, int64_t step) {
  st.adam->zero_grad();
  if (st.input.requires_grad() && st.input.grad().defined()) st.input.mutable_grad().zero_();
  at::Tensor loss = forward_loss(st, s, step);
  at::Tensor value = loss.detach();  // read after backward: no wait for the device in between
  loss.backward();
  return value;
}

double train_step(TrainState& st, Strategy& s, int64_t step, bool update) {
  // One pass: gradients from zero, forward, backward; the loss's value.
  auto pass = [&] { return forward_backward(st, s, step).item<double>(); };
  MemoryMeter& meter = MemoryMeter::get(st.cfg.device);
  const int64_t origin = meter.current_bytes();
  s.begin_step(step);
  double loss_value = pass();
  // A strategy whose pass could not hold what it needed (Paged Stash's overflow) has the step run
  // again, once, its own way; on real ranks every rank does if any asks. Its two passes are each
  // measured; the step's peak is the larger.
  bool again = s.finish_pass();
  if (st.dist) again = st.dist->allreduce_max(at::tensor({int64_t(again)}, at::kLong)).item<int64_t>() > 0;
  if (again) {
    const int64_t first = meter.peak_bytes();
    meter.reset_peak();
    s.begin_rerun();
    loss_value = pass();
    s.finish_pass();
    const int64_t second = meter.peak_bytes();
    meter.raise_peak(first);
    s.note_passes(first - origin, second - origin);
  }
  if (st.dist) {
    // Everything but the experts is replicated over the ranks: its gradient is the sum of theirs.
    for (const auto& layer : st.model.layers)
      for (const auto& p : layer.replicated()) st.dist->allreduce_sum(p.mutable_grad());
    st.dist->allreduce_sum(st.model.final_norm.mutable_grad());
    if (st.model.embed.defined()) st.dist->allreduce_sum(st.model.embed.mutable_grad());
    at::Tensor l = at::tensor({loss_value}, at::kDouble);
    st.dist->allreduce_sum(l);
    loss_value = l.item<double>();
  }
  if (update) st.adam->step();
  return loss_value;
}

void capture_train_step(TrainState& st, Strategy& s, int64_t step, StepGraph& graph) {
  graph.capture([&] {
    s.begin_step(step);
    return forward_backward(st, s, step);
  });
}

double replay_train_step(TrainState& st, StepGraph& graph, bool update) {
  const at::Tensor loss = graph.replay();
  if (update) st.adam->step();
  return loss.item<double>();
}

}  // namespace memfine
