// MoE stages across real expert-parallel ranks (see moe_stages.h).
#include "core/dist.h"
#include "core/moe_stages.h"

namespace memfine {

Combined moe_range_alltoall(const at::Tensor& x, const at::Tensor& probs, const LayerWeights& w,
                            const MoeRouting& mr, int64_t begin, int64_t end) {
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
  at::Tensor arrived = d.alltoall(x.index_select(0, tokens), recv, send);
  at::Tensor arrived_experts = d.alltoall(experts_of.unsqueeze(1), recv, send).reshape(-1) - r.first_expert;
  // experts: group what arrived by local expert, run each, put the outputs back in arrival order.
  at::Tensor by_expert = std::get<1>(at::sort(arrived_experts, /*stable=*/true, 0, false)).to(dev);
  at::Tensor counts = at::bincount(arrived_experts, {}, El);
  at::Tensor grouped = arrived.index_select(0, by_expert);
  std::vector<at::Tensor> outs;
  int64_t off = 0;
  for (int64_t e = 0; e < El; ++e) {
    const int64_t rows = counts[e].item<int64_t>();
    if (rows > 0) outs.push_back(swiglu(grouped.narrow(0, off, rows), w.w_in[size_t(e)], w.w_out[size_t(e)]));
    off += rows;
  }
  // Even when nothing arrived, the outputs must stay in the autograd graph: every rank has to run
  // the backward all-to-alls, or the others wait for it forever.
  at::Tensor out_grouped = outs.empty() ? grouped * 0.0 : at::cat(outs);
  at::Tensor out_arrived = at::zeros_like(out_grouped).index_add(0, by_expert, out_grouped);
  // combine: outputs return to their senders, weighted by router probability, un-permuted.
  at::Tensor back = d.alltoall(out_arrived, send, recv);
  at::Tensor weights = probs.reshape(-1).index_select(0, slots.to(dev)).unsqueeze(1);
  at::Tensor y = at::zeros({n, x.size(1)}, x.options()).index_add(0, tokens, back * weights);
  return {y, at::zeros({}, x.options())};
}

}  // namespace memfine
