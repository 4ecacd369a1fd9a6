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

template <class T>
__global__ void weighted_add_kernel(const T* in, const int64_t* in_index, const int64_t* dst, const int64_t* slot,
                                    const T* probs, T* out, int64_t hidden) {
  rows::weighted_add_row(in, in_index, dst, slot, probs, out, int64_t(blockIdx.x), hidden, threadIdx.x, blockDim.x,
                         AtomicAdd<T>());
}

template <class T>
__global__ void output_grad_kernel(const T* gy, const T* peer_grads, const int64_t* src, const int64_t* slot,
                                   const T* probs, const T* peer_scale, typename rows::Acc<T>::type scale, T* out,
                                   int64_t hidden) {
  rows::output_grad_row(gy, peer_grads, src, slot, probs, peer_scale, scale, out, int64_t(blockIdx.x), hidden,
                        threadIdx.x, blockDim.x);
}

// A block's threads' partial sums, added up; thread 0 has the total.
template <class A>
__device__ A block_sum(A mine) {
  __shared__ A partial[kThreads];
  partial[threadIdx.x] = mine;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s /= 2) {
    if (int(threadIdx.x) < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  return partial[0];
}

template <class T>
__global__ void row_dot_to_slot_kernel(const T* a, const int64_t* a_index, const T* b, const int64_t* b_index,
                                       const int64_t* slot, T* out, int64_t hidden) {
  const int64_t r = int64_t(blockIdx.x);
  if (slot[r] < 0) return;  // the whole block alike
  const auto sum = block_sum(rows::row_dot_partial(a, a_index, b, b_index, r, hidden, threadIdx.x, blockDim.x));
  if (threadIdx.x == 0) out[slot[r]] = rows::Store<T>::from(sum);
}

template <class T>
__global__ void peer_dots_kernel(const T* out, const T* peer_grads, const int64_t* src,
                                 typename rows::Acc<T>::type* dots, int64_t hidden) {
  const int64_t r = int64_t(blockIdx.x);
  const auto sum = block_sum(rows::peer_dot_partial(out, peer_grads, src, r, hidden, threadIdx.x, blockDim.x));
  if (threadIdx.x == 0) dots[r] = sum;
}

template <class T>
__global__ void swiglu_kernel(const T* z, T* act, int64_t width) {
  rows::swiglu_row(z, act, int64_t(blockIdx.x), width, threadIdx.x, blockDim.x);
}

template <class T>
__global__ void swiglu_backward_kernel(const T* g, const T* z, T* gz, int64_t width) {
  rows::swiglu_backward_row(g, z, gz, int64_t(blockIdx.x), width, threadIdx.x, blockDim.x);
}

int weighted_add_rows(rows::DType t, const void* in, const int64_t* in_index, const int64_t* dst, const int64_t* slot,
                      const void* probs, void* out, int64_t n, int64_t hidden, void* stream) {
  if (n == 0) return 0;
  return rows::with_element_type<__nv_bfloat16>(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    weighted_add_kernel<T><<<dim3(unsigned(n)), kThreads, 0, as_stream(stream)>>>(
        static_cast<const T*>(in), in_index, dst, slot, static_cast<const T*>(probs), static_cast<T*>(out), hidden);
    return int(cudaGetLastError());
  });
}

int output_grad_rows(rows::DType t, const void* gy, const void* peer_grads, const int64_t* src, const int64_t* slot,
                     const void* probs, const void* peer_scale, double scale, void* out, int64_t n, int64_t hidden,
                     void* stream) {
  if (n == 0) return 0;
  return rows::with_element_type<__nv_bfloat16>(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    using A = typename rows::Acc<T>::type;
    output_grad_kernel<T><<<dim3(unsigned(n)), kThreads, 0, as_stream(stream)>>>(
        static_cast<const T*>(gy), static_cast<const T*>(peer_grads), src, slot, static_cast<const T*>(probs),
        static_cast<const T*>(peer_scale), A(scale), static_cast<T*>(out), hidden);
    return int(cudaGetLastError());
  });
}

int row_dot_to_slot(rows::DType t, const void* a, const int64_t* a_index, const void* b, const int64_t* b_index,
                    const int64_t* slot, void* out, int64_t n, int64_t hidden, void* stream) {
  if (n == 0) return 0;
  return rows::with_element_type<__nv_bfloat16>(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    row_dot_to_slot_kernel<T><<<dim3(unsigned(n)), kThreads, 0, as_stream(stream)>>>(
        static_cast<const T*>(a), a_index, static_cast<const T*>(b), b_index, slot, static_cast<T*>(out), hidden);
    return int(cudaGetLastError());
  });
}

int peer_dots(rows::DType t, const void* out, const void* peer_grads, const int64_t* src, void* dots, int64_t n,
              int64_t hidden, void* stream) {
  if (n == 0) return 0;
  return rows::with_element_type<__nv_bfloat16>(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    using A = typename rows::Acc<T>::type;
    peer_dots_kernel<T><<<dim3(unsigned(n)), kThreads, 0, as_stream(stream)>>>(
        static_cast<const T*>(out), static_cast<const T*>(peer_grads), src, static_cast<A*>(dots), hidden);
    return int(cudaGetLastError());
  });
}

int swiglu(rows::DType t, const void* z, void* act, int64_t n, int64_t width, void* stream) {
  if (n == 0) return 0;
  return rows::with_element_type<__nv_bfloat16>(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    swiglu_kernel<T><<<dim3(unsigned(n)), kThreads, 0, as_stream(stream)>>>(static_cast<const T*>(z),
                                                                              static_cast<T*>(act), width);
    return int(cudaGetLastError());
  });
}

int swiglu_backward(rows::DType t, const void* g, const void* z, void* gz, int64_t n, int64_t width, void* stream) {
  if (n == 0) return 0;
  return rows::with_element_type<__nv_bfloat16>(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    swiglu_backward_kernel<T><<<dim3(unsigned(n)), kThreads, 0, as_stream(stream)>>>(
        static_cast<const T*>(g), static_cast<const T*>(z), static_cast<T*>(gz), width);
    return int(cudaGetLastError());
  });
}

}  // namespace

const RowKernels& kernels() {
  static const RowKernels k{gather_rows,     scatter_add_rows, row_dot, weighted_add_rows, output_grad_rows,
                            row_dot_to_slot, peer_dots,        swiglu,  swiglu_backward};
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
