// MoE stages across real expert-parallel ranks (see core/moe/stages.h).
#include "core/dist/dist.h"
#include "core/moe/buffer_free.h"
#include "core/moe/fused.h"
#include "core/moe/stages.h"

#include <stdexcept>

namespace memfine {

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

Combined moe_range_alltoall(const at::Tensor& x, const at::Tensor& probs, const LayerWeights& w, const MoeRouting& mr,
                            int64_t begin, int64_t end) {
  if (mr.weighted_act)
    throw std::invalid_argument("skip_dead runs on emulated ranks only: real ranks combine in their own arrangement");
  const Dist& d = *mr.dist;
  const RankRouting& r = *mr.rank;
  const int64_t n = end - begin, k = mr.expert_ids.size(1), El = r.local_experts;
  // dispatch: this range's kept assignments, ordered by expert (so by destination rank).
  at::Tensor ids = mr.expert_ids.narrow(0, begin, n).reshape(-1);
  at::Tensor keep = mr.own_keep.defined() ? mr.own_keep.narrow(0, begin, n).reshape(-1) : at::ones_like(ids, at::kBool);
  at::Tensor slots = keep.nonzero().reshape(-1);
  at::Tensor experts_of = ids.index_select(0, slots);
  at::Tensor order = std::get<1>(at::sort(experts_of, /*stable=*/true, 0, false));
  slots = slots.index_select(0, order);
  experts_of = experts_of.index_select(0, order);
  at::Tensor per_rank = at::bincount(experts_of.div(El, "floor"), {}, d.world());
  std::vector<int64_t> send(per_rank.data_ptr<int64_t>(), per_rank.data_ptr<int64_t>() + d.world());
  const std::vector<int64_t> recv = d.exchange_counts(send);  // notify
  // Routing is decided on the host; the indices the data needs move to its device (no-op on CPU).
  const at::Device dev = x.device();
  at::Tensor tokens = slots.div(k, "floor").to(dev);
  at::Tensor sent =
      mr.fused || mr.expert.buffer_free ? gather_rows(x, at::Tensor(), tokens) : x.index_select(0, tokens);
  at::Tensor arrived = d.alltoall(sent, recv, send);
  at::Tensor arrived_experts = d.alltoall(experts_of.unsqueeze(1), recv, send).reshape(-1) - r.first_expert;
  // experts: run each local expert on the rows that arrived for it, outputs in arrival order.
  at::Tensor by_expert = std::get<1>(at::sort(arrived_experts, /*stable=*/true, 0, false)).to(dev);
  at::Tensor counts = at::bincount(arrived_experts, {}, El);
  std::vector<int64_t> rows(counts.data_ptr<int64_t>(), counts.data_ptr<int64_t>() + El);
  at::Tensor weights = probs.reshape(-1).index_select(0, slots.to(dev));
  at::Tensor y = at::zeros({n, x.size(1)}, x.options());
  if (mr.expert.buffer_free) {
    // The probabilities travel with the rows; outputs come back weighted and are added unweighted
    // (an unweighted scatter keeps nothing for backward).
    at::Tensor p_arrived = d.alltoall(weights.unsqueeze(1), recv, send).reshape(-1);
    at::Tensor back = d.alltoall(experts_buffer_free(arrived, p_arrived, by_expert, rows, w, mr), send, recv);
    scatter_add_rows_(y, back, at::Tensor(), at::Tensor(), tokens);
    return {y, at::zeros({}, x.options())};
  }
  at::Tensor out_arrived =
      mr.fused ? experts_fused(arrived, by_expert, rows, w, mr) : experts_aten(arrived, by_expert, rows, w, mr);
  // combine: outputs return to their senders, weighted by router probability, un-permuted.
  at::Tensor back = d.alltoall(out_arrived, send, recv);
  if (mr.fused)
    scatter_add_rows_(y, back, weights, at::Tensor(), tokens);
  else
    y.index_add_(0, tokens, back * weights.unsqueeze(1));
  return {y, at::zeros({}, x.options())};
}

}  // namespace memfine
