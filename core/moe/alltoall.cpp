// MoE stages across real expert-parallel ranks: the all-to-all token dispatcher (dispatcher.h).
#include "core/dist/dist.h"
#include "core/moe/buffer_free.h"
#include "core/moe/dispatcher.h"
#include "core/moe/fused.h"
#include "core/moe/stages.h"
#include "core/util/modules.h"

#include <torch/csrc/autograd/custom_function.h>

#include <stdexcept>

namespace memfine {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

namespace {

// Even when nothing arrived, the outputs must stay in the autograd graph: every rank has to run
// the backward all-to-alls, or the others wait for it forever.
at::Tensor nothing_arrived(const at::Tensor& arrived) { return arrived * 0.0; }

// ATen: all arrivals grouped by expert in one buffer, the outputs concatenated and un-grouped.
at::Tensor experts_aten(const at::Tensor& arrived, const at::Tensor& by_expert, const std::vector<int64_t>& rows,
                        const LayerWeights& w, const MoeRouting& mr) {
  at::Tensor grouped = arrived.index_select(0, by_expert);
  std::vector<at::Tensor> outs;
  int64_t off = 0;
  for (size_t e = 0; e < rows.size(); off += rows[e], ++e)
    if (rows[e] > 0) outs.push_back(run_expert(mr, grouped.narrow(0, off, rows[e]), w.w_in[e], w.w_out[e]));
  if (outs.empty()) return nothing_arrived(arrived);
  at::Tensor out_grouped = at::cat(outs);
  return at::zeros_like(out_grouped).index_add(0, by_expert, out_grouped);
}

// Fused: each expert reads its rows straight from the arrivals and adds its outputs straight back.
at::Tensor experts_fused(const at::Tensor& arrived, const at::Tensor& by_expert, const std::vector<int64_t>& rows,
                         const LayerWeights& w, const MoeRouting& mr) {
  at::Tensor out = at::zeros_like(arrived);
  int64_t off = 0;
  for (size_t e = 0; e < rows.size(); off += rows[e], ++e) {
    if (rows[e] == 0) continue;
    at::Tensor idx = by_expert.narrow(0, off, rows[e]);
    scatter_add_rows_(out, run_expert(mr, gather_rows(arrived, at::Tensor(), idx), w.w_in[e], w.w_out[e]), at::Tensor(),
                      at::Tensor(), idx);
  }
  return off == 0 ? nothing_arrived(arrived) : out;
}

// Buffer-free: each expert reads its rows from the arrivals through an index and adds its output,
// weighted by the probability that travelled with the row, straight into the arrival order.
at::Tensor experts_buffer_free(const at::Tensor& arrived, const at::Tensor& p_arrived, const at::Tensor& by_expert,
                               const std::vector<int64_t>& rows, const LayerWeights& w, const MoeRouting& mr) {
  at::Tensor out = at::zeros_like(arrived);
  int64_t off = 0;
  for (size_t e = 0; e < rows.size(); off += rows[e], ++e) {
    if (rows[e] == 0) continue;
    at::Tensor idx = by_expert.narrow(0, off, rows[e]);
    ExpertRows r;
    r.src = idx, r.slot = idx, r.own = rows[e], r.keep_act = mr.expert.keep_act, r.block_rows = mr.expert.block_rows;
    out = buffer_free_expert(out, arrived, p_arrived, w.w_in[e], w.w_out[e], r).first;
  }
  if (off > 0) return out;
  // Both exchanges stay in the graph (their backward all-to-alls run on every rank), in the order
  // every rank's autograd runs them.
  at::Tensor none = nothing_arrived(arrived);
  at::Tensor p_none = p_arrived.sum() * 0.0;
  return none + p_none;
}

}  // namespace

// A range's exchange: its kept assignments ordered by expert (so by destination rank), how many
// rows go to and come from each rank (the paper's "notify"), and which token each row is. Outside
// the anonymous namespace: A2aRows, which the dispatcher's state names, holds one.
struct A2aRoute {
  at::Tensor slots, tokens, experts_of;
  std::vector<int64_t> send, recv;
};

namespace {

A2aRoute route_range(const at::Tensor& x, const MoeRouting& mr, int64_t begin, int64_t end) {
  const Dist& d = *mr.dist;
  const RankRouting& r = *mr.rank;
  const int64_t n = end - begin, k = mr.expert_ids.size(1), El = r.local_experts;
  A2aRoute a;
  at::Tensor ids = mr.expert_ids.narrow(0, begin, n).reshape(-1);
  at::Tensor keep = mr.own_keep.defined() ? mr.own_keep.narrow(0, begin, n).reshape(-1) : at::ones_like(ids, at::kBool);
  a.slots = keep.nonzero().reshape(-1);
  a.experts_of = ids.index_select(0, a.slots);
  at::Tensor order = std::get<1>(at::sort(a.experts_of, /*stable=*/true, 0, false));
  a.slots = a.slots.index_select(0, order);
  a.experts_of = a.experts_of.index_select(0, order);
  at::Tensor per_rank = at::bincount(a.experts_of.div(El, "floor"), {}, d.world());
  a.send.assign(per_rank.data_ptr<int64_t>(), per_rank.data_ptr<int64_t>() + d.world());
  a.recv = d.exchange_counts(a.send);  // notify
  // Routing is decided on the host; the indices the data needs move to its device (no-op on CPU).
  a.tokens = a.slots.div(k, "floor").to(x.device());
  return a;
}

// What arrived, grouped by local expert: the order and each expert's count.
std::pair<at::Tensor, std::vector<int64_t>> arrived_by_expert(const A2aRoute& a, const MoeRouting& mr,
                                                              const at::Device& dev) {
  const RankRouting& r = *mr.rank;
  at::Tensor arrived_experts =
      mr.dist->alltoall(a.experts_of.unsqueeze(1), a.recv, a.send).reshape(-1) - r.first_expert;
  at::Tensor by_expert = std::get<1>(at::sort(arrived_experts, /*stable=*/true, 0, false)).to(dev);
  at::Tensor counts = at::bincount(arrived_experts, {}, r.local_experts);
  return {by_expert, std::vector<int64_t>(counts.data_ptr<int64_t>(), counts.data_ptr<int64_t>() + r.local_experts)};
}

// experts on what arrived, then combine: the outputs return to their senders, weighted by router
// probability, un-permuted.
Combined experts_and_combine(const at::Tensor& arrived, const A2aRoute& a, const at::Tensor& by_expert,
                             const std::vector<int64_t>& rows, const at::Tensor& probs, const LayerWeights& w,
                             const MoeRouting& mr, int64_t n, int64_t hidden) {
  at::Tensor weights = probs.reshape(-1).index_select(0, a.slots.to(probs.device()));
  at::Tensor y = at::zeros({n, hidden}, probs.options());
  at::Tensor out_arrived =
      mr.fused ? experts_fused(arrived, by_expert, rows, w, mr) : experts_aten(arrived, by_expert, rows, w, mr);
  at::Tensor back = mr.dist->alltoall(out_arrived, a.send, a.recv);
  if (mr.fused)
    scatter_add_rows_(y, back, weights, at::Tensor(), a.tokens);
  else
    y.index_add_(0, a.tokens, back * weights.unsqueeze(1));
  return {y, at::zeros({}, probs.options())};
}

// The way back in a replay whose outputs are dead (skip_dead): no exchange forward, a placeholder
// of the rows that would arrive; backward sends their gradients back as the exchange's would. Every
// rank replays alike, so every rank skips it alike.
struct DeadExchange : torch::autograd::Function<DeadExchange> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& in, std::vector<int64_t> out_splits,
                            std::vector<int64_t> in_splits, const Dist* d) {
    int64_t rows = 0;
    for (int64_t r : out_splits) rows += r;
    ctx->saved_data["out"] = out_splits;
    ctx->saved_data["in"] = in_splits;
    ctx->saved_data["dist"] = reinterpret_cast<int64_t>(d);
    return at::zeros({1, 1}, in.options()).expand({rows, in.size(1)});
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    const auto* d = reinterpret_cast<const Dist*>(ctx->saved_data["dist"].toInt());
    at::Tensor g = d->alltoall(grad[0].contiguous(), ctx->saved_data["in"].toIntVector(),
                               ctx->saved_data["out"].toIntVector());
    return {g, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// Megatron's arrangement across ranks (MoeRouting::weighted_act, core/moe/weighted.cpp): the
// probabilities travel with the rows and weigh each expert's activation; the outputs come back and
// are added unweighted. In a replay for backward fc2, the way back and the sum are placeholders.
Combined weighted_experts_and_combine(const at::Tensor& arrived, const A2aRoute& a, const at::Tensor& by_expert,
                                      const std::vector<int64_t>& rows, const at::Tensor& probs, const LayerWeights& w,
                                      const MoeRouting& mr, int64_t n, int64_t hidden) {
  if (mr.fused || mr.expert.fn || mr.expert.buffer_free)
    throw std::invalid_argument("skip_dead on real ranks runs ATen's SwiGLU experts (kernels: aten)");
  const Dist& d = *mr.dist;
  at::Tensor weights = probs.reshape(-1).index_select(0, a.slots.to(probs.device()));
  at::Tensor p_arrived = d.alltoall(weights.unsqueeze(1), a.recv, a.send).reshape(-1);
  at::Tensor grouped = arrived.index_select(0, by_expert), p_grouped = p_arrived.index_select(0, by_expert);
  std::vector<at::Tensor> outs;
  int64_t off = 0;
  for (size_t e = 0; e < rows.size(); off += rows[e], ++e) {
    if (rows[e] == 0) continue;
    ModuleScope experts(Module::Experts);
    at::Tensor z, act;
    {
      ModuleScope fc1(Module::ExpertFc1);
      z = at::matmul(grouped.narrow(0, off, rows[e]), w.w_in[e]);
    }
    {
      ModuleScope moe_act(Module::MoeAct);
      auto halves = z.chunk(2, -1);
      act = at::silu(halves[0]) * halves[1] * p_grouped.narrow(0, off, rows[e]).unsqueeze(1);
    }
    ModuleScope fc2(Module::ExpertFc2);
    outs.push_back(mr.outputs_dead ? dead_linear(act, w.w_out[e]) : at::matmul(act, w.w_out[e]));
  }
  // Nothing arrived: both exchanges stay in the graph (their backward all-to-alls run on every rank).
  at::Tensor out_arrived;
  if (outs.empty()) {
    out_arrived = nothing_arrived(arrived) + p_arrived.sum() * 0.0;
  } else {
    at::Tensor out_grouped = at::cat(outs);
    out_arrived = at::zeros_like(out_grouped).index_add(0, by_expert, out_grouped);
  }
  if (mr.outputs_dead) {
    at::Tensor back = DeadExchange::apply(out_arrived, a.send, a.recv, &d);
    return {dead_scatter({back}, {a.tokens}, n, hidden), at::zeros({}, probs.options())};
  }
  at::Tensor back = d.alltoall(out_arrived, a.send, a.recv);
  at::Tensor y = at::zeros({n, hidden}, probs.options());
  y.index_add_(0, a.tokens, back);
  return {y, at::zeros({}, probs.options())};
}

}  // namespace

// Real ranks' prefetched range: its exchange's routing and its rows in flight.
struct A2aRows {
  A2aRoute route;
  at::Tensor by_expert;
  std::vector<int64_t> rows;
  Dist::Pending arrived;
  int64_t n = 0, hidden = 0;
};

namespace {

// Real ranks: each row goes to the rank of its expert (counts first, the paper's "notify", then
// the rows), experts run on what arrived, combine sends the outputs back and weights them.
class AllToAllDispatcher : public TokenDispatcher {
 public:
  Combined moe_range(const at::Tensor& x, const at::Tensor& probs, const LayerWeights& w, const MoeRouting& mr,
                     int64_t begin, int64_t end, const Dispatched*) const override {
    const Dist& d = *mr.dist;
    const int64_t n = end - begin;
    // dispatch: this range's kept assignments, ordered by expert (so by destination rank).
    const A2aRoute a = route_range(x, mr, begin, end);
    const at::Device dev = x.device();
    at::Tensor sent =
        mr.fused || mr.expert.buffer_free ? gather_rows(x, at::Tensor(), a.tokens) : x.index_select(0, a.tokens);
    at::Tensor arrived = d.alltoall(sent, a.recv, a.send);
    auto [by_expert, rows] = arrived_by_expert(a, mr, dev);
    if (mr.expert.buffer_free) {
      // The probabilities travel with the rows; outputs come back weighted and are added unweighted
      // (an unweighted scatter keeps nothing for backward).
      at::Tensor y = at::zeros({n, x.size(1)}, x.options());
      at::Tensor weights = probs.reshape(-1).index_select(0, a.slots.to(dev));
      at::Tensor p_arrived = d.alltoall(weights.unsqueeze(1), a.recv, a.send).reshape(-1);
      at::Tensor back = d.alltoall(experts_buffer_free(arrived, p_arrived, by_expert, rows, w, mr), a.send, a.recv);
      scatter_add_rows_(y, back, at::Tensor(), at::Tensor(), a.tokens);
      return {y, at::zeros({}, x.options())};
    }
    if (mr.weighted_act) return weighted_experts_and_combine(arrived, a, by_expert, rows, probs, w, mr, n, x.size(1));
    return experts_and_combine(arrived, a, by_expert, rows, probs, w, mr, n, x.size(1));
  }
  bool routes_locally() const override { return false; }

  std::vector<at::Tensor> rows(PrefetchedRange& p) const override { return {p.a2a->arrived.wait()}; }
  Combined from_rows(const PrefetchedRange& p, const std::vector<at::Tensor>& rows, const at::Tensor& probs,
                     const LayerWeights& w, const MoeRouting& mr) const override {
    const A2aRows& a = *p.a2a;
    return experts_and_combine(rows.at(0), a.route, a.by_expert, a.rows, probs, w, mr, a.n, a.hidden);
  }
  at::Tensor rows_grad(const PrefetchedRange& p, const std::vector<at::Tensor>& grads, const MoeRouting& mr,
                       const at::TensorOptions& options, int64_t) const override {
    const A2aRows& a = *p.a2a;
    int64_t arrived = 0;
    for (int64_t r : a.route.recv) arrived += r;
    at::NoGradGuard no_grad;
    at::Tensor g = !grads.empty() && grads[0].defined() ? grads[0] : at::zeros({arrived, a.hidden}, options);
    at::Tensor g_sent = mr.dist->alltoall(g, a.route.send, a.route.recv);  // back to their senders
    at::Tensor gx = at::zeros({a.n, a.hidden}, options);
    gx.index_add_(0, a.route.tokens, g_sent);
    return gx;
  }

 protected:
  void send_ahead(PrefetchedRange& p, const at::Tensor& x, const MoeRouting& mr, const Dispatched*) const override {
    auto a = std::make_shared<A2aRows>();
    a->route = route_range(x, mr, p.begin, p.end);
    a->n = p.end - p.begin, a->hidden = x.size(1);
    at::Tensor sent = mr.fused ? gather_rows(x, at::Tensor(), a->route.tokens) : x.index_select(0, a->route.tokens);
    a->arrived = mr.dist->alltoall_async(sent, a->route.recv, a->route.send);
    std::tie(a->by_expert, a->rows) = arrived_by_expert(a->route, mr, x.device());
    p.a2a = a;
  }
};

}  // namespace

const TokenDispatcher& alltoall_dispatcher() {
  static const AllToAllDispatcher d;
  return d;
}

}  // namespace memfine
