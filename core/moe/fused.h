// dispatch's gather and combine's weighted scatter-add as single ops (autograd functions over the
// row kernels of core/moe/kernels.h): each expert's input is written once, straight from the tokens,
// the peers' rows and zero padding (ATen gathers, then concatenates: twice), and combine adds the
// weighted expert outputs into the tokens without a weighted copy. On a CUDA device they run the GPU kernels (CUDA
// builds), on the CPU the host reference; `kernels: aten` keeps the ATen version (index_select, cat, mul, index_add).
#pragma once
#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "core/moe/rows.h"

namespace memfine {

struct RowKernels;  // core/moe/kernels.h

// The row kernels' element type for `t` (float, double, bfloat16; else std::invalid_argument).
rows::DType row_type(const at::Tensor& t);
// The row kernels for tensors on `out`'s device, and the stream to run them on (null on the host).
const RowKernels& kernels_for(const at::Tensor& out, void*& stream);

// Whether this build runs the fused ops on `device` ("cpu" always; "cuda" with the kernels linked).
bool fused_kernels_available(const std::string& device);

// rows[r] = x[src[r]] for src[r] >= 0, table[-2 - src[r]] for src[r] <= -2, zeros for -1
// (see core/moe/rows.h). Differentiable in x; the table (the emulated peers' rows) is a constant.
at::Tensor gather_rows(const at::Tensor& x, const at::Tensor& table, const at::Tensor& src);

// combine, in place: y[dst[r]] += weight[r] * rows[src ? src[r] : r] (src undefined: row r;
// weight undefined: 1).
// One call per expert (and one for the remote experts' rows), as ATen's index_add_, so backward
// holds one expert's gradients at a time. Differentiable in y, rows and weight; returns y.
at::Tensor scatter_add_rows_(at::Tensor& y, const at::Tensor& rows, const at::Tensor& weight, const at::Tensor& src,
                             const at::Tensor& dst);

// The same row kernels without autograd, into tensors the caller made (the buffer-free experts'
// own autograd functions use them): see RowKernels in kernels.h for what each computes.
void gather_rows_into(const at::Tensor& in, const at::Tensor& table, const at::Tensor& src, const at::Tensor& weight,
                      at::Tensor& out);
void scatter_add_rows_into(const at::Tensor& in, const at::Tensor& src, const at::Tensor& dst, const at::Tensor& weight,
                           at::Tensor& out);
void row_dot_into(const at::Tensor& a, const at::Tensor& a_index, const at::Tensor& b, const at::Tensor& b_index,
                  at::Tensor& out);

}  // namespace memfine
