// A layer's (or a chunk's) local experts as one grouped GEMM per projection, as Megatron-Core's
// TEGroupedMLP, MegaBlocks and torchtitan run them, instead of a GEMM (and its launches) per expert.
// All experts' rows sit in one buffer, expert after expert; each layer's expert weights sit in one
// storage (pack_experts), which the GEMM reads as [experts, in, out] without a copy.
// On LibTorch with `aten::_grouped_mm` (2.8 and later; CUTLASS on sm90 in bf16) one op runs every
// group; elsewhere a stand-in with the op's outputs, buffers and saved tensors runs a GEMM per
// group, so the CPU tests check everything but the op against the loop, bytes included.
#pragma once
#include <ATen/ATen.h>

#include <string>
#include <vector>

namespace memfine {

// Rows per expert, in buffer order; `offs` (int32 group ends on the rows' device) where the op runs.
struct ExpertGroups {
  std::vector<int64_t> sizes;
  at::Tensor offs;
};

// Whether this LibTorch has `aten::_grouped_mm` and runs it natively on tensors like `like` (bf16
// on a CUDA device; the op's other paths loop over the groups themselves).
bool grouped_mm_native(const at::Tensor& like);

// Groups for `sizes`; `offs` is uploaded (one small copy) where the native op will run on `like`.
ExpertGroups expert_groups(const std::vector<int64_t>& sizes, const at::Tensor& like);

// out[rows of group g] = a[rows of group g] @ b[g]: a [rows, k], b [groups, k, n]. Differentiable.
at::Tensor grouped_mm(const at::Tensor& a, const at::Tensor& b, const ExpertGroups& g);
// out[g] = a_t[:, columns of group g] @ c[rows of group g]: a_t [k, rows], c [rows, n] -> [groups, k, n]
// (a weight's gradient in a hand-written backward). Not differentiable.
at::Tensor grouped_mm_weight_grad(const at::Tensor& a_t, const at::Tensor& c, const ExpertGroups& g);

// The packed weights (core/model/model.h: pack_experts) as one [experts, in, out] tensor over their storage (no copy); its gradient
// goes to each expert's. Throws std::logic_error where they are not packed.
at::Tensor stacked_experts(const std::vector<at::Tensor>& w);
// Rows (each [n_e, hidden]) as one [sum n_e, hidden] tensor: an alias where they lie back to back in
// one storage (a dispatch's views, or leaves made from them), else a copy; differentiable.
at::Tensor grouped_rows(const std::vector<at::Tensor>& rows);

// SwiGLU over grouped rows: what swiglu (core/model/model.h) computes per expert, saving the same.
at::Tensor swiglu_grouped(const at::Tensor& rows, const at::Tensor& w_in, const at::Tensor& w_out,
                          const ExpertGroups& g);

}  // namespace memfine
