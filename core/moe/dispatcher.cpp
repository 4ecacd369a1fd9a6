#include "core/moe/dispatcher.h"

#include <ATen/core/grad_mode.h>

#include <stdexcept>

namespace memfine {

PrefetchedRange TokenDispatcher::prefetch(const at::Tensor& x, const MoeRouting& mr, int64_t begin, int64_t end,
                                          const Dispatched* routed) const {
  if (mr.weighted_act || mr.expert.buffer_free)
    throw std::invalid_argument("a prefetched range runs SwiGLU experts that store what they need");
  PrefetchedRange p;
  p.begin = begin, p.end = end;
  at::NoGradGuard no_grad;
  send_ahead(p, x.detach(), mr, routed);
  return p;
}

const TokenDispatcher& token_dispatcher(const Dist* dist) {
  return dist ? alltoall_dispatcher() : emulated_dispatcher();
}

}  // namespace memfine
