// Buffer-free experts, after MoEBlaze (arXiv 2601.05296) and SonicMoE (Dao-AILab/sonic-moe):
// dispatch builds index structures only, and no [tokens x topk, hidden] routed copy of the tokens
// exists. Each expert is one autograd function that keeps only its first GEMM's output z = [a | b]
// (and SiLU(a) * b with keep_act) and its row indices; x is the layer's, kept anyway.
//   forward:  per block of rows, z = x[rows] @ W_in (the rows read through their index into a
//             transient block: the host ops cannot feed a GEMM in place), then
//             out = (SiLU(a) * b) @ W_out weighted by the router probability and added straight
//             into the tokens' rows;
//   backward: per block of rows, the output gradient read from the tokens' rows, SiLU(a) * b
//             recomputed, the router-probability gradient as a row reduction,
//             dp = rowsum((dy W_out^T) * (SiLU(a) * b)), z's gradient, the rows read again for
//             W_in's gradient, and the input gradient added straight back into the tokens' rows.
// Working in blocks of rows is what the GPU kernels do with tiles: no intermediate of the whole
// expert's rows exists but z. On real ranks the rows that arrived through the all-to-all are a
// buffer of their own, kept once per rank (the all-to-all dispatcher, alltoall.cpp); the probabilities travel with them
// so the weighting stays fused.
#pragma once
#include <ATen/ATen.h>

#include "core/moe/routing.h"

namespace memfine {

// One expert's rows and where its outputs go.
struct ExpertRows {
  // Row r reads x[src[r]] (src >= 0) or row -2 - src[r] of `table` (the emulated peers' inputs).
  // Rows [0, own) belong to the range's tokens: weighted by probs[slot[r]] and added to y[src[r]].
  // Rows [own, rows) went to emulated peers: their outputs leave through the peers' loss term,
  // sum(out[r] * peer_grads[-2 - src[r]]) / loss_norm (see PeerSink in stages.cpp).
  at::Tensor src, slot;
  int64_t own = 0;
  at::Tensor table;  // may be undefined (no peers)
  const at::Tensor* peer_grads = nullptr;
  double loss_norm = 1;
  bool keep_act = false;
  int64_t block_rows = 256;
};

// y[src[:own]] += probs[slot] * ((SiLU(a) * b) @ w_out) for z = x[src] @ w_in, in place; returns
// {y, the peers' loss term}. w_in and w_out must be the parameters themselves (they outlive the
// step): backward accumulates their gradients straight into their .grad.
std::pair<at::Tensor, at::Tensor> buffer_free_expert(at::Tensor& y, const at::Tensor& x, const at::Tensor& probs,
                                                     const at::Tensor& w_in, const at::Tensor& w_out,
                                                     const ExpertRows& rows);

// dispatch -> experts -> combine for one range of an emulated rank, buffer-free, on the range's
// routing `d` (dispatch_indices).
Combined moe_range_buffer_free(const at::Tensor& x_range, const at::Tensor& probs_range, const LayerWeights& w,
                               const MoeRouting& mr, const Dispatched& d);

}  // namespace memfine
