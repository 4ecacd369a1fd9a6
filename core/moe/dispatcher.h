// How a range's rows reach their experts and come back: one class per kind, chosen once per layer
// (token_dispatcher), as Megatron-Core's MoE layer holds one token dispatcher
// (MoEAlltoAllTokenDispatcher, MoEFlexTokenDispatcher). An emulated rank (one process: the peers'
// rows and gradients come from the routing's tables, stages.cpp) or real ranks exchanging rows
// through all-to-all (alltoall.cpp). A strategy cuts and replays ranges; which dispatcher moves them
// is the run's.
#pragma once
#include <ATen/ATen.h>

#include <memory>
#include <vector>

#include "core/moe/routing.h"

namespace memfine {

// ChunkedEP's prefetch (core/strategy/memfine/chunked_moe.cpp): a range's rows dispatched ahead of
// its experts and held outside autograd until its turn (on real ranks their all-to-all is in flight
// meanwhile); its experts and combine then run from those rows, and the gradient the rows receive
// goes back to the range's tokens as dispatch's backward would send it.
struct PrefetchedRange {
  int64_t begin = 0, end = 0;
  Dispatched d;                          // emulated: d.inputs are each local expert's rows
  std::shared_ptr<struct A2aRows> a2a;  // real ranks: the exchange's routing and rows in flight
};

class TokenDispatcher {
 public:
  virtual ~TokenDispatcher() = default;
  // dispatch -> experts -> combine for one range [begin, end) of the rank's own tokens (with the
  // peer rows whose sender position falls in it): the unit that MemFine chunks and recomputes.
  // `routed`: the range's routing from dispatch_indices where routes_locally(), else nullptr.
  virtual Combined moe_range(const at::Tensor& x_range, const at::Tensor& probs_range, const LayerWeights& w,
                             const MoeRouting& mr, int64_t begin, int64_t end, const Dispatched* routed) const = 0;
  // Whether a layer's routing is known on this process before rows move, so its chunks' routing
  // can be computed at once and its MoE run as ranges (core/moe/ranged.h); real ranks exchange
  // theirs per range, every rank calling for every range, even an empty one.
  virtual bool routes_locally() const = 0;

  // ChunkedEP's prefetch: the range's rows sent ahead (SwiGLU experts that store what they need).
  PrefetchedRange prefetch(const at::Tensor& x_range, const MoeRouting& mr, int64_t begin, int64_t end,
                           const Dispatched* routed) const;
  // The held rows (real ranks: waits for them): the tensors whose gradients backward computes.
  virtual std::vector<at::Tensor> rows(PrefetchedRange& p) const = 0;
  // experts -> combine from `rows` (rows() made leaves, in its order).
  virtual Combined from_rows(const PrefetchedRange& p, const std::vector<at::Tensor>& rows,
                             const at::Tensor& probs_range, const LayerWeights& w, const MoeRouting& mr) const = 0;
  // The range's input gradient [end - begin, hidden] from its rows' (undefined: none arrived);
  // real ranks exchange them back, every rank, even with none.
  virtual at::Tensor rows_grad(const PrefetchedRange& p, const std::vector<at::Tensor>& row_grads,
                               const MoeRouting& mr, const at::TensorOptions& options, int64_t hidden) const = 0;

 protected:
  virtual void send_ahead(PrefetchedRange& p, const at::Tensor& x_range, const MoeRouting& mr,
                          const Dispatched* routed) const = 0;
};

// The emulated rank's where `dist` is null, else real ranks' all-to-all.
const TokenDispatcher& token_dispatcher(const Dist* dist);
// Each kind (stages.cpp, alltoall.cpp).
const TokenDispatcher& emulated_dispatcher();
const TokenDispatcher& alltoall_dispatcher();

}  // namespace memfine
