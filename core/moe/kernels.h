// The fused MoE row kernels (dispatch's gather, combine's weighted scatter-add and the router-weight
// gradient), on raw pointers and without torch headers, so nvcc compiles them even where LibTorch
// has no CUDA. Two implementations share the per-row code of rows.h: memfine::cuda runs on the
// GPU (kernels.cu), memfine::host on the CPU (kernels_host.cpp: the reference the GPU is
// checked against, and what `kernels: fused` runs on a CPU device). Row-major [rows, hidden] buffers
// of one element type; index arrays are int64. Calls return 0 or a CUDA error code.
#pragma once
#include <cstdint>

#include "core/moe/rows.h"

namespace memfine {

// The three ops of one implementation. `stream` is a cudaStream_t for the GPU's (null: the default
// stream) and ignored by the host's.
struct RowKernels {
  // out[r] = weight[r] * (src[r] >= 0 ? in[src[r]] : src[r] == -1 ? 0 : table[-2 - src[r]]); weight may be null.
  int (*gather_rows)(rows::DType t, const void* in, const void* table, const int64_t* src, const void* weight,
                     void* out, int64_t rows, int64_t hidden, void* stream);
  // out[dst[r]] += weight[r] * in[src ? src[r] : r]; rows with dst[r] < 0 are skipped.
  int (*scatter_add_rows)(rows::DType t, const void* in, const int64_t* src, const int64_t* dst, const void* weight,
                          void* out, int64_t rows, int64_t hidden, void* stream);
  // out[r] = dot(a[a_index ? a_index[r] : r], b[b_index ? b_index[r] : r]).
  int (*row_dot)(rows::DType t, const void* a, const int64_t* a_index, const void* b, const int64_t* b_index, void* out,
                 int64_t rows, int64_t hidden, void* stream);
  // A MoE range's rows (rows.h): out[dst[r]] += probs[slot[r]] * in[in_index ? in_index[r] : r].
  int (*weighted_add_rows)(rows::DType t, const void* in, const int64_t* in_index, const int64_t* dst,
                           const int64_t* slot, const void* probs, void* out, int64_t rows, int64_t hidden,
                           void* stream);
  // out[r] = the experts' output gradient of row r (rows::output_grad_row).
  int (*output_grad_rows)(rows::DType t, const void* gy, const void* peer_grads, const int64_t* src,
                          const int64_t* slot, const void* probs, const void* peer_scale, double scale, void* out,
                          int64_t rows, int64_t hidden, void* stream);
  // out[slot[r]] = dot(a[a_index ? a_index[r] : r], b[b_index[r]]) for rows with slot >= 0.
  int (*row_dot_to_slot)(rows::DType t, const void* a, const int64_t* a_index, const void* b, const int64_t* b_index,
                         const int64_t* slot, void* out, int64_t rows, int64_t hidden, void* stream);
  // dots[r] = rows::peer_dot_partial over the whole row, in the accumulation type (float, or double
  // for double rows).
  int (*peer_dots)(rows::DType t, const void* out, const void* peer_grads, const int64_t* src, void* dots,
                   int64_t rows, int64_t hidden, void* stream);
  // act = SiLU(a) * b of z = [a | b], and its backward into gz; `width` is act's.
  int (*swiglu)(rows::DType t, const void* z, void* act, int64_t rows, int64_t width, void* stream);
  int (*swiglu_backward)(rows::DType t, const void* g, const void* z, void* gz, int64_t rows, int64_t width,
                         void* stream);
};

namespace host {
const RowKernels& kernels();
}  // namespace host

namespace cuda {
const RowKernels& kernels();
// The NCCL version the kernels were linked with (keeps the NCCL link honest), e.g. 22803; 0 for a
// GPU build that found no NCCL to link.
int nccl_version();
// Number of visible CUDA devices (0 where there is no GPU or driver).
int device_count();
}  // namespace cuda

}  // namespace memfine
