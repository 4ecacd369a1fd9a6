// The operators a MoE range runs (core/moe/ranged.h), registered with LibTorch's dispatcher as
// `memfine::moe_*`: one operator a stage, whatever the experts' count, so that a chunk costs the
// host a few dispatches (each counted as one by core/meter/host_work.h, as LibTorch's own are).
// The row work is the fused row kernels' (core/moe/kernels.h: the GPU's, or their host reference
// on a CPU); the experts' products one grouped GEMM each (LibTorch's `_grouped_mm` where it runs
// natively, else a product per expert inside the operator). None is differentiable: the range's
// autograd function calls them forward and backward.
//
// A range's buffer rows, expert after expert, are indexed from `begin` in the layer's arrays:
// src[r] is a token (>= 0), a peer table row (<= -2) or zero (-1); slot[r] the flat probability a
// token's row is weighed by (-1 none). Remote assignments likewise from `remote_begin`.
#pragma once
#include <ATen/ATen.h>

#include <cstdint>

namespace memfine::ops {

// rows[r] = x[src], peer_inputs[table row] or 0, for `count` rows.
at::Tensor moe_gather(const at::Tensor& x, const at::Tensor& table, const at::Tensor& src, int64_t begin,
                      int64_t count);
// out[rows of g] = a[rows of g] @ b[g] (trans_b: b[g]^T); b [groups, k, n] (trans_b: [groups, n, k]);
// `offs` (int32 group ends on a's device) where the native op runs, else undefined.
at::Tensor moe_grouped_mm(const at::Tensor& a, const at::Tensor& b, const at::Tensor& offs, at::IntArrayRef sizes,
                          bool trans_b);
// grad[g] += a[rows of g]^T @ c[rows of g], in place (a weight's gradient into its .grad).
void moe_grouped_wgrad_(at::Tensor& grad, const at::Tensor& a, const at::Tensor& c, const at::Tensor& offs,
                        at::IntArrayRef sizes);
// SwiGLU's activation of z = [a | b]: SiLU(a) * b; and its backward.
at::Tensor moe_swiglu(const at::Tensor& z);
at::Tensor moe_swiglu_backward(const at::Tensor& g, const at::Tensor& z);
// y[token] += prob * out[r] for the range's own rows, and prob * remote[key] for its remote assignments.
void moe_combine_(at::Tensor& y, const at::Tensor& out, const at::Tensor& probs, const at::Tensor& src,
                  const at::Tensor& slot, int64_t begin, const at::Tensor& remote, const at::Tensor& remote_key,
                  const at::Tensor& remote_token, const at::Tensor& remote_slot, int64_t remote_begin,
                  int64_t remote_count);
// acc += sum over the peers' rows of dot(out[r], peer_grads[table row]) / norm: the loss term that
// sends the peers their outputs' gradients.
void moe_peer_loss_(at::Tensor& acc, const at::Tensor& out, const at::Tensor& peer_grads, const at::Tensor& src,
                    int64_t begin, double norm);
// The experts' output gradient: a token's row prob * gy[token], a peer's g_peer / norm * peer_grads[key].
at::Tensor moe_output_grad(const at::Tensor& gy, const at::Tensor& probs, const at::Tensor& peer_grads,
                           const at::Tensor& g_peer, double norm, const at::Tensor& src, const at::Tensor& slot,
                           int64_t begin, int64_t count);
// The probabilities' gradient, into gp [tokens, topk]: dot(out[r], gy[token]) at each own row's
// slot, dot(remote[key], gy[token]) at each remote assignment's.
void moe_probs_grad_(at::Tensor& gp, const at::Tensor& out, const at::Tensor& gy, const at::Tensor& src,
                     const at::Tensor& slot, int64_t begin, const at::Tensor& remote, const at::Tensor& remote_key,
                     const at::Tensor& remote_token, const at::Tensor& remote_slot, int64_t remote_begin,
                     int64_t remote_count);
// gx[token] += g_rows[r] for the range's token rows (dispatch's backward).
void moe_scatter_grad_(at::Tensor& gx, const at::Tensor& g_rows, const at::Tensor& src, int64_t begin);

}  // namespace memfine::ops
