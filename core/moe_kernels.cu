#include <cuda_runtime.h>
#include <nccl.h>

#include "core/moe_kernels.h"

namespace memfine::cuda {
namespace {

__global__ void gather_rows_kernel(const float* __restrict__ in, const int64_t* __restrict__ index,
                                   float* __restrict__ out, int64_t rows, int64_t hidden) {
  const int64_t row = blockIdx.x;
  if (row >= rows) return;
  const float* src = in + index[row] * hidden;
  float* dst = out + row * hidden;
  for (int64_t j = threadIdx.x; j < hidden; j += blockDim.x) dst[j] = src[j];
}

__global__ void scatter_add_rows_kernel(const float* __restrict__ in, const int64_t* __restrict__ index,
                                        const float* __restrict__ weight, float* __restrict__ out, int64_t rows,
                                        int64_t hidden) {
  const int64_t row = blockIdx.x;
  if (row >= rows) return;
  const float w = weight ? weight[row] : 1.0f;
  const float* src = in + row * hidden;
  float* dst = out + index[row] * hidden;
  for (int64_t j = threadIdx.x; j < hidden; j += blockDim.x) atomicAdd(dst + j, w * src[j]);
}

int threads_for(int64_t hidden) { return hidden >= 256 ? 256 : 128; }

}  // namespace

int gather_rows(const float* in, const int64_t* index, float* out, int64_t rows, int64_t hidden, void* stream) {
  if (rows == 0) return 0;
  gather_rows_kernel<<<dim3(unsigned(rows)), threads_for(hidden), 0, static_cast<cudaStream_t>(stream)>>>(
      in, index, out, rows, hidden);
  return int(cudaGetLastError());
}

int scatter_add_rows(const float* in, const int64_t* index, const float* weight, float* out, int64_t rows,
                     int64_t hidden, void* stream) {
  if (rows == 0) return 0;
  scatter_add_rows_kernel<<<dim3(unsigned(rows)), threads_for(hidden), 0, static_cast<cudaStream_t>(stream)>>>(
      in, index, weight, out, rows, hidden);
  return int(cudaGetLastError());
}

int nccl_version() {
  int v = 0;
  ncclGetVersion(&v);
  return v;
}

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

}  // namespace memfine::cuda
