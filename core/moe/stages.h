// The MoE stages, named as in Megatron-Core: route (model.h), dispatch, experts, combine.
// Strategies change how these run (stored, recomputed, chunked, capped), never their math.
// Every call handles the token range [begin, end) of the rank's own tokens plus the peer rows
// whose sender position falls in that range: a chunk in MemFine's sense (sender-side split).
// These are the emulated rank's (one process); a layer runs them through its token dispatcher
// (dispatcher.h), which real ranks replace with all-to-all.
#pragma once
#include <ATen/ATen.h>

#include <vector>

#include "core/moe/routing.h"

namespace memfine {

// The expert on its gathered rows, as the routing's ExpertPath says (every path calls it).
at::Tensor run_expert(const MoeRouting& mr, const at::Tensor& rows, const at::Tensor& w_in, const at::Tensor& w_out);

// dispatch's routing alone: which rows each local expert takes and where its outputs go (no rows
// are copied; `inputs` stays empty).
Dispatched dispatch_indices(const MoeRouting& mr, int64_t begin, int64_t end, const at::Device& device);
// The same for consecutive ranges [bounds[c], bounds[c + 1]) (a layer's chunks) at once: one pass
// over the routing on the host and one upload to the device, so that a loop over the chunks
// neither sorts again per chunk nor waits for the device between them (a blocking upload to a
// GPU waits for every kernel queued before it). The indices are views of that one upload.
std::vector<Dispatched> dispatch_indices(const MoeRouting& mr, const std::vector<int64_t>& bounds,
                                         const at::Device& device);
// dispatch: permute the range's tokens by local expert and receive the peers' rows.
Dispatched dispatch(const at::Tensor& x_range, const MoeRouting& mr, int64_t begin, int64_t end);
// The same with the range's routing already computed (dispatch_indices).
Dispatched dispatch(const at::Tensor& x_range, const MoeRouting& mr, Dispatched routed);
// experts: each local expert's SwiGLU on its rows.
std::vector<at::Tensor> experts(const Dispatched& d, const LayerWeights& w, const MoeRouting& mr);
// combine: weight own rows by router probability and un-permute into [end - begin, hidden]; the
// outputs computed for peers go back to them (their loss term, see PeerSink in stages.cpp).
Combined combine(const std::vector<at::Tensor>& outputs, const Dispatched& d, const at::Tensor& probs_range,
                 const MoeRouting& mr);

// The emulated peers' loss term for the rows this rank computed for them (their gradients come
// back seeded); `value` false: its value is not computed (a replay for backward).
at::Tensor peer_sink(const at::Tensor& out, const at::Tensor& keys, const at::Tensor* grads, double norm,
                     bool value = true);

// Megatron's arrangement (MoeRouting::weighted_act): experts whose activation the own rows'
// probabilities weigh, and the combine that adds them as they are (core/moe/weighted.cpp).
std::vector<at::Tensor> experts_weighted(const Dispatched& d, const LayerWeights& w, const MoeRouting& mr,
                                         const at::Tensor& probs_range);
Combined combine_unweighted(const std::vector<at::Tensor>& outputs, const Dispatched& d, const at::Tensor& probs_range,
                            const MoeRouting& mr);
// A replay's dead parts (outputs_dead): act @ w and rows added into their tokens' places, the values
// not computed (placeholders), their backward as the real ones'.
at::Tensor dead_linear(const at::Tensor& act, const at::Tensor& w);
at::Tensor dead_scatter(const std::vector<at::Tensor>& rows, const std::vector<at::Tensor>& tokens, int64_t n,
                        int64_t hidden);

}  // namespace memfine
