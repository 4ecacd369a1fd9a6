// CUDA kernels for the memory-critical MoE stages, on raw device pointers (no torch headers, so
// nvcc compiles them even where LibTorch has no CUDA). Row-major [rows, hidden] float buffers.
#pragma once
#include <cstdint>

namespace memfine::cuda {

// dispatch: out[i, :] = in[index[i], :] for i < rows (gather tokens into expert order).
int gather_rows(const float* in, const int64_t* index, float* out, int64_t rows, int64_t hidden, void* stream);

// combine: out[index[i], :] += weight[i] * in[i, :] (weighted scatter-add back to token order).
int scatter_add_rows(const float* in, const int64_t* index, const float* weight, float* out, int64_t rows,
                     int64_t hidden, void* stream);

// The NCCL version the kernels were linked with (keeps the NCCL link honest), e.g. 22803.
int nccl_version();

// Number of visible CUDA devices (0 where there is no GPU or driver).
int device_count();

}  // namespace memfine::cuda
