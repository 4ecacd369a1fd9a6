// The fused row kernels on the GPU: one block per row, its threads across the row's columns; the
// per-row code is core/moe/rows.h, shared with the host reference.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#ifdef MEMFINE_NCCL
#include <nccl.h>
#endif

#include <type_traits>

#include "core/moe/kernels.h"

namespace memfine::cuda {
namespace {

template <class T>
struct AtomicAdd {
  __device__ void operator()(T* p, typename rows::Acc<T>::type v) const { atomicAdd(p, rows::Store<T>::from(v)); }
};

template <class T>
__global__ void gather_kernel(const T* in, const T* table, const int64_t* src, const T* weight, T* out,
                              int64_t hidden) {
  rows::gather_row(in, table, src, weight, out, int64_t(blockIdx.x), hidden, threadIdx.x, blockDim.x);
}

template <class T>
__global__ void scatter_add_kernel(const T* in, const int64_t* src, const int64_t* dst, const T* weight, T* out,
                                   int64_t hidden) {
  rows::scatter_add_row(in, src, dst, weight, out, int64_t(blockIdx.x), hidden, threadIdx.x, blockDim.x,
                        AtomicAdd<T>());
}

constexpr int kThreads = 256;

template <class T>
__global__ void row_dot_kernel(const T* a, const int64_t* a_index, const T* b, const int64_t* b_index, T* out,
                               int64_t hidden) {
  using A = typename rows::Acc<T>::type;
  __shared__ A partial[kThreads];
  partial[threadIdx.x] =
      rows::row_dot_partial(a, a_index, b, b_index, int64_t(blockIdx.x), hidden, threadIdx.x, blockDim.x);
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s /= 2) {
    if (int(threadIdx.x) < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = rows::Store<T>::from(partial[0]);
}

cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

int gather_rows(rows::DType t, const void* in, const void* table, const int64_t* src, const void* weight, void* out,
                int64_t n, int64_t hidden, void* stream) {
  if (n == 0) return 0;
  return rows::with_element_type<__nv_bfloat16>(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    gather_kernel<T><<<dim3(unsigned(n)), kThreads, 0, as_stream(stream)>>>(
        static_cast<const T*>(in), static_cast<const T*>(table), src, static_cast<const T*>(weight),
        static_cast<T*>(out), hidden);
    return int(cudaGetLastError());
  });
}

int scatter_add_rows(rows::DType t, const void* in, const int64_t* src, const int64_t* dst, const void* weight,
                     void* out, int64_t n, int64_t hidden, void* stream) {
  if (n == 0) return 0;
  return rows::with_element_type<__nv_bfloat16>(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    scatter_add_kernel<T><<<dim3(unsigned(n)), kThreads, 0, as_stream(stream)>>>(
        static_cast<const T*>(in), src, dst, static_cast<const T*>(weight), static_cast<T*>(out), hidden);
    return int(cudaGetLastError());
  });
}

int row_dot(rows::DType t, const void* a, const int64_t* a_index, const void* b, const int64_t* b_index, void* out,
            int64_t n, int64_t hidden, void* stream) {
  if (n == 0) return 0;
  return rows::with_element_type<__nv_bfloat16>(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    row_dot_kernel<T><<<dim3(unsigned(n)), kThreads, 0, as_stream(stream)>>>(
        static_cast<const T*>(a), a_index, static_cast<const T*>(b), b_index, static_cast<T*>(out), hidden);
    return int(cudaGetLastError());
  });
}

}  // namespace

const RowKernels& kernels() {
  static const RowKernels k{gather_rows, scatter_add_rows, row_dot};
  return k;
}

int nccl_version() {
  int v = 0;
#ifdef MEMFINE_NCCL
  ncclGetVersion(&v);
#endif
  return v;
}

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

}  // namespace memfine::cuda
