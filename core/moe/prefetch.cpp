// ChunkedEP's prefetched ranges (core/moe/stages.h: PrefetchedRange): on one process the rows are
// dispatched at once and held; on real ranks their all-to-all is issued and left in flight
// (core/moe/alltoall.cpp).
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include "core/moe/stages.h"

namespace memfine {

// Real ranks (core/moe/alltoall.cpp).
std::shared_ptr<A2aRows> a2a_prefetch(const at::Tensor& x, const MoeRouting& mr, int64_t begin, int64_t end);
at::Tensor a2a_prefetched_rows(A2aRows& p);
Combined a2a_from_rows(const A2aRows& p, const at::Tensor& arrived, const at::Tensor& probs, const LayerWeights& w,
                       const MoeRouting& mr);
at::Tensor a2a_rows_grad(const A2aRows& p, const at::Tensor& g_arrived, const MoeRouting& mr,
                         const at::TensorOptions& options);

PrefetchedRange prefetch_range(const at::Tensor& x, const MoeRouting& mr, int64_t begin, int64_t end,
                               const Dispatched* routed) {
  if (mr.weighted_act || mr.expert.buffer_free)
    throw std::invalid_argument("a prefetched range runs SwiGLU experts that store what they need");
  PrefetchedRange p;
  p.begin = begin, p.end = end;
  at::NoGradGuard no_grad;
  if (mr.dist) {
    p.a2a = a2a_prefetch(x.detach(), mr, begin, end);
    return p;
  }
  p.d = dispatch(x.detach(), mr, routed ? *routed : dispatch_indices(mr, begin, end, x.device()));
  return p;
}

std::vector<at::Tensor> PrefetchedRange::rows() {
  if (a2a) return {a2a_prefetched_rows(*a2a)};
  return d.inputs;
}

Combined moe_from_rows(const PrefetchedRange& p, const std::vector<at::Tensor>& rows, const at::Tensor& probs,
                       const LayerWeights& w, const MoeRouting& mr) {
  if (p.a2a) return a2a_from_rows(*p.a2a, rows.at(0), probs, w, mr);
  Dispatched d = p.d;
  d.inputs = rows;
  return combine(experts(d, w, mr), d, probs, mr);
}

at::Tensor rows_grad_to_tokens(const PrefetchedRange& p, const std::vector<at::Tensor>& grads, const MoeRouting& mr,
                               const at::TensorOptions& options, int64_t hidden) {
  if (p.a2a) return a2a_rows_grad(*p.a2a, grads.empty() ? at::Tensor() : grads[0], mr, options);
  // dispatch's backward: each expert's own rows add their gradient into their tokens' (the peers'
  // rows came from their senders, whose gradients the emulation seeds).
  at::NoGradGuard no_grad;
  at::Tensor g = at::zeros({p.end - p.begin, hidden}, options);
  for (size_t e = 0; e < p.d.own_rows.size() && e < grads.size(); ++e)
    if (grads[e].defined() && p.d.own_rows[e] > 0)
      g.index_add_(0, p.d.own_token[e], grads[e].narrow(0, 0, p.d.own_rows[e]));
  return g;
}

}  // namespace memfine
