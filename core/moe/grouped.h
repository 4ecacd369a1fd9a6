// A layer's (or a range's) local experts as one grouped GEMM per projection, as Megatron-Core's
// TEGroupedMLP, MegaBlocks and torchtitan run them, instead of a GEMM (and its launches) per expert.
// All experts' rows sit in one buffer, expert after expert; each layer's expert weights sit in one
// storage (pack_experts), read as [experts, in, out] without a copy. The ranged MoE's operators
// (core/moe/range_ops.h) call these: LibTorch's `aten::_grouped_mm` where it runs natively (2.8 and
// later; CUTLASS on sm90 in bf16), else a product per group.
#pragma once
#include <ATen/ATen.h>

namespace memfine {

// Whether this LibTorch has `aten::_grouped_mm` and runs it natively on tensors like `like` (bf16
// on a CUDA device; the op's other paths loop over the groups themselves).
bool grouped_mm_native(const at::Tensor& like);
// LibTorch's op itself (where grouped_mm_native says it runs): `offs` the groups' int32 ends on the
// device; out[rows of g] = a[rows of g] @ b[g] for a [rows, k], b [groups, k, n]; and for a 2D b
// [k', rows] (a weight's gradient, a [k, rows]): out[g] = a[:, columns of g] @ b[rows of g].
at::Tensor native_grouped_mm(const at::Tensor& a, const at::Tensor& b, const at::Tensor& offs);

// Elsewhere, into `out` [rows, n]: a product per group (a [rows, k], b [groups, k, n]).
void grouped_products_into(at::Tensor& out, const at::Tensor& a, const at::Tensor& b, at::IntArrayRef sizes);
// grad[g] += a_t[:, columns of group g] @ c[rows of group g], a product per group, in place.
void grouped_weight_grads_add_(at::Tensor& grad, const at::Tensor& a_t, const at::Tensor& c, at::IntArrayRef sizes);

}  // namespace memfine
