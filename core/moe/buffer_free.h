// Buffer-free experts, after MoEBlaze (arXiv 2601.05296) and SonicMoE (Dao-AILab/sonic-moe):
// dispatch builds index structures only, and no [tokens x topk, hidden] routed copy of the tokens
// exists. Each expert runs as two autograd functions:
//   up:   z = x[rows] @ W_in, reading its rows through an index (on the CPU into a transient
//         buffer, freed before the second GEMM: the fused host ops cannot feed a GEMM in place),
//         keeping only the index (x itself is the layer's, kept anyway);
//   down: out = (SiLU(a) * b) @ W_out for z = [a | b], weighted by the router probability and
//         added straight into the tokens' rows; it keeps z (and SiLU(a) * b with keep_act).
// Backward recomputes SiLU(a) * b, never expands the output gradient into a kept per-(token,
// slot) buffer, and takes the router-probability gradient as a row reduction,
// dp = rowsum((dy[token] W_out^T) * (SiLU(a) * b)), so the expert outputs are not kept either.
// On real ranks the rows that arrived through the all-to-all are a buffer of their own, kept once
// per rank (moe_range_alltoall); the probabilities travel with them so the weighting stays fused.
#pragma once
#include <ATen/ATen.h>

#include "core/moe/stages.h"

namespace memfine {

// z = x[src] @ w_in; src as in rows.h (>= 0: a row of x, <= -2: a row of `table`).
at::Tensor buffer_free_up(const at::Tensor& x, const at::Tensor& table, const at::Tensor& src, const at::Tensor& w_in);

// What one expert's down projection adds, and where.
struct DownRows {
  // Rows [0, own) belong to this range's tokens: row r is weighted by probs[slot[r]] and added to
  // y[dst[r]]. Rows [own, rows) went to emulated peers: their outputs leave through the peers'
  // loss term, sum(out[r] * peer_grads[-2 - dst[r]]) / loss_norm (see PeerSink in stages.cpp).
  at::Tensor slot, dst;
  int64_t own = 0;
  const at::Tensor* peer_grads = nullptr;
  double loss_norm = 1;
  bool keep_act = false;
};

// y[dst] += probs[slot] * ((SiLU(a) * b) @ w_out) in place; returns {y, the peers' loss term}.
std::pair<at::Tensor, at::Tensor> buffer_free_down(at::Tensor& y, const at::Tensor& z, const at::Tensor& probs,
                                                   const at::Tensor& w_out, const DownRows& rows);

// dispatch -> experts -> combine for one range of an emulated rank, buffer-free.
Combined moe_range_buffer_free(const at::Tensor& x_range, const at::Tensor& probs_range, const LayerWeights& w,
                               const MoeRouting& mr, int64_t begin, int64_t end);

}  // namespace memfine
