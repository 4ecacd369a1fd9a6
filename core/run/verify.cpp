#include "core/run/verify.h"

#include <algorithm>
#include <cmath>

#include "core/dist/dist.h"
#include "core/run/rank_step.h"
#include "core/strategy/registry.h"

namespace memfine {

double verify_tolerance(const std::string& dtype) {
  return dtype == "float64" ? 1e-10 : dtype == "bfloat16" ? 3e-2 : 1e-4;
}

namespace {

// On the tensors' own device: a GPU step's gradients are a billion values at real shapes, too many
// to bring to the CPU per strategy. Float64 there too, so the CPU's verdicts are unchanged.
double rel_err(const at::Tensor& got, const at::Tensor& want) {
  const at::Tensor a = got.detach().to(at::kDouble), b = want.detach().to(got.device(), at::kDouble);
  const double scale = b.abs().max().item<double>(), diff = (a - b).abs().max().item<double>();
  return diff == 0 ? 0 : diff / std::max(scale, 1e-300);
}

// One step without the update; the loss.
double step_of(TrainState& st, const StrategySpec& spec) {
  auto s = make_strategy(spec);
  return train_step(st, *s, 0, false);
}

StrategySpec reference_spec() {
  const std::string ref = strategy_of_role(Role::Reference);
  if (ref.empty()) throw std::logic_error("verify: no strategy is registered as the reference");
  return StrategySpec{ref};
}

// `got` on this rank against the whole batch computed in one process: replicated weights alike,
// this rank's experts against the same global experts, its tokens' input gradient against its
// slice (the layout tests/test_dist.cpp checks).
double rank_err(const TrainState& got, double got_loss, const TrainState& ref, double ref_loss, int rank) {
  double worst = std::abs(got_loss - ref_loss) / std::max(std::abs(ref_loss), 1e-300);
  const int64_t El = got.cfg.model.experts / got.cfg.ep;
  for (size_t l = 0; l < ref.model.layers.size(); ++l) {
    const auto& g = got.model.layers[l];
    const auto& r = ref.model.layers[l];
    const auto gr = g.replicated(), rr = r.replicated();
    for (size_t i = 0; i < rr.size(); ++i) worst = std::max(worst, rel_err(gr[i].grad(), rr[i].grad()));
    for (int64_t e = 0; e < El; ++e) {
      worst = std::max(worst, rel_err(g.w_in[size_t(e)].grad(), r.w_in[size_t(rank * El + e)].grad()));
      worst = std::max(worst, rel_err(g.w_out[size_t(e)].grad(), r.w_out[size_t(rank * El + e)].grad()));
    }
  }
  worst = std::max(worst, rel_err(got.model.final_norm.grad(), ref.model.final_norm.grad()));
  if (got.input.requires_grad()) {
    const int64_t T = got.input.size(0);
    worst = std::max(worst, rel_err(got.input.grad(), ref.input.grad().narrow(0, rank * T, T)));
  }
  return worst;
}

// What a step gives a gradient: the parameters, and the input where it takes one.
std::vector<at::Tensor> with_gradients(const TrainState& st) {
  auto out = st.model.parameters();
  if (st.input.requires_grad()) out.push_back(st.input);
  return out;
}

double state_err(const TrainState& got, double got_loss, const TrainState& ref, double ref_loss) {
  double worst = std::abs(got_loss - ref_loss) / std::max(std::abs(ref_loss), 1e-300);
  const auto pa = with_gradients(got), pb = with_gradients(ref);
  for (size_t i = 0; i < pa.size(); ++i) worst = std::max(worst, rel_err(pa[i].grad(), pb[i].grad()));
  return worst;
}

bool dropless(const StrategySpec& spec) { return make_strategy(spec)->dropless(); }

// A copy of the point's state whose input takes a gradient (its gradient is compared too).
std::unique_ptr<TrainState> with_input_grad(const TrainState& fresh) {
  auto st = copy_train_state(fresh);
  st->input.requires_grad_(st->input.is_floating_point());
  return st;
}

}  // namespace

Verifier::Verifier(const TrainState& fresh, const Dist* dist) : fresh_(fresh), dist_(dist) {
  ref_ = dist ? make_global_reference(fresh.cfg, true) : with_input_grad(fresh);
  ref_loss_ = step_of(*ref_, reference_spec());
}

Verifier::~Verifier() = default;

std::optional<double> Verifier::error_of(const StrategySpec& spec) const {
  if (!dropless(spec)) return std::nullopt;
  auto st = with_input_grad(fresh_);
  const double loss = step_of(*st, spec);  // real ranks: the global batch's, summed over the ranks
  return dist_ ? rank_err(*st, loss, *ref_, ref_loss_, dist_->rank()) : state_err(*st, loss, *ref_, ref_loss_);
}

double replay_error(TrainState& st, Strategy& s, StepGraph& graph, int64_t step) {
  s.begin_step(step);
  const double want_loss = forward_backward(st, s, step).item<double>();
  const auto params = with_gradients(st);
  std::vector<at::Tensor> want;
  for (const auto& p : params) want.push_back(p.grad().clone());
  const double loss = graph.replay().item<double>();
  double worst = std::abs(loss - want_loss) / std::max(std::abs(want_loss), 1e-300);
  for (size_t i = 0; i < params.size(); ++i) worst = std::max(worst, rel_err(params[i].grad(), want[i]));
  return worst;
}

std::optional<double> verify_on_state(const TrainState& fresh, const StrategySpec& spec) {
  if (!dropless(spec)) return std::nullopt;
  auto ref = copy_train_state(fresh);
  const double ref_loss = step_of(*ref, reference_spec());
  auto st = copy_train_state(fresh);
  const double loss = step_of(*st, spec);
  return state_err(*st, loss, *ref, ref_loss);
}

}  // namespace memfine
