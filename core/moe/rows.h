// The per-row work of the fused dispatch and combine, written once for both the host (reference,
// CPU runs, tests) and the CUDA kernels (kernels.cu): the GPU spreads a row's columns over a
// block's threads (j0 = thread, dj = block size), the host walks them in order (j0 = 0, dj = 1).
// No torch and no CUDA headers here, so the host build and nvcc see the same index arithmetic.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#include <cuda_bf16.h>
#define MEMFINE_HD __host__ __device__
#else
#define MEMFINE_HD
#endif

namespace memfine::rows {

// Source rows of a gather: >= 0 is a row of the input, -1 a zero row (padding), <= -2 is row
// (-2 - index) of a second table (the emulated peers' hidden states).
constexpr int64_t kZeroRow = -1;
MEMFINE_HD inline int64_t table_row(int64_t index) { return -2 - index; }
MEMFINE_HD inline int64_t encode_table_row(int64_t row) { return -2 - row; }

// The element types the kernels take (what the tensors hold).
enum class DType { f32, f64, bf16 };

// Calls f with a null pointer of the element type `t` names; Bf16 is the caller's bfloat16 storage
// type (HostBf16 on the host, __nv_bfloat16 on the GPU). Returns f's result, or -1 for no type.
template <class Bf16, class F>
int with_element_type(DType t, F f) {
  switch (t) {
    case DType::f32:
      return f(static_cast<float*>(nullptr));
    case DType::f64:
      return f(static_cast<double*>(nullptr));
    case DType::bf16:
      return f(static_cast<Bf16*>(nullptr));
  }
  return -1;
}

// bfloat16 storage on the host: the upper half of a float, rounded to nearest even on store
// (as ATen's c10::BFloat16 does), so host and ATen agree bit for bit on conversions.
struct HostBf16 {
  uint16_t bits;
};
inline float to_acc(HostBf16 v) {
  uint32_t u = uint32_t(v.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
MEMFINE_HD inline float to_acc(float v) { return v; }
MEMFINE_HD inline double to_acc(double v) { return v; }
#ifdef __CUDACC__
__device__ inline float to_acc(__nv_bfloat16 v) { return __bfloat162float(v); }
#endif

template <class T>
struct Store;
template <>
struct Store<float> {
  MEMFINE_HD static float from(float a) { return a; }
};
template <>
struct Store<double> {
  MEMFINE_HD static double from(double a) { return a; }
};
template <>
struct Store<HostBf16> {
  static HostBf16 from(float a) {
    uint32_t u;
    std::memcpy(&u, &a, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return {uint16_t((u >> 16) | 0x40)};  // NaN stays NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return {uint16_t(u >> 16)};
  }
};
#ifdef __CUDACC__
template <>
struct Store<__nv_bfloat16> {
  __device__ static __nv_bfloat16 from(float a) { return __float2bfloat16_rn(a); }
};
#endif

// Accumulation type: float for float and bfloat16 (as ATen's reductions), double for double.
template <class T>
struct Acc {
  using type = float;
};
template <>
struct Acc<double> {
  using type = double;
};

// dispatch forward, combine backward: out[r, :] = weight[r] * source_row(src[r]) (weight may be null).
template <class T>
MEMFINE_HD inline void gather_row(const T* in, const T* table, const int64_t* src, const T* weight, T* out, int64_t r,
                                  int64_t hidden, int64_t j0, int64_t dj) {
  using A = typename Acc<T>::type;
  const int64_t s = src[r];
  T* dst = out + r * hidden;
  if (s == kZeroRow) {
    for (int64_t j = j0; j < hidden; j += dj) dst[j] = Store<T>::from(A(0));
    return;
  }
  const T* row = s >= 0 ? in + s * hidden : table + table_row(s) * hidden;
  if (!weight) {
    for (int64_t j = j0; j < hidden; j += dj) dst[j] = row[j];
    return;
  }
  const A w = A(to_acc(weight[r]));
  for (int64_t j = j0; j < hidden; j += dj) dst[j] = Store<T>::from(w * A(to_acc(row[j])));
}

// combine forward, dispatch backward: out[dst[r], :] += weight[r] * in[src ? src[r] : r, :].
// Rows with dst < 0 (padding) are skipped. `add(p, v)` is an atomic add on the GPU.
template <class T, class Add>
MEMFINE_HD inline void scatter_add_row(const T* in, const int64_t* src, const int64_t* dst, const T* weight, T* out,
                                       int64_t r, int64_t hidden, int64_t j0, int64_t dj, Add add) {
  using A = typename Acc<T>::type;
  const int64_t d = dst[r];
  if (d < 0) return;
  const T* row = in + (src ? src[r] : r) * hidden;
  T* target = out + d * hidden;
  const A w = weight ? A(to_acc(weight[r])) : A(1);
  for (int64_t j = j0; j < hidden; j += dj) add(target + j, w * A(to_acc(row[j])));
}

// combine backward for the router weights: this thread's share of dot(a[a_index[r]], b[b_index[r]]).
template <class T>
MEMFINE_HD inline typename Acc<T>::type row_dot_partial(const T* a, const int64_t* a_index, const T* b,
                                                        const int64_t* b_index, int64_t r, int64_t hidden, int64_t j0,
                                                        int64_t dj) {
  using A = typename Acc<T>::type;
  const T* x = a + (a_index ? a_index[r] : r) * hidden;
  const T* y = b + (b_index ? b_index[r] : r) * hidden;
  A sum = A(0);
  for (int64_t j = j0; j < hidden; j += dj) sum += A(to_acc(x[j])) * A(to_acc(y[j]));
  return sum;
}

// A MoE range's buffer rows (core/moe/ranged.h): row r comes from src[r] (a token row, a peer
// table row or zero, as gather_row reads it), and a token's row is weighed by the probability at
// slot[r] of the flat [tokens * topk] probabilities (-1: none, a peer's or padding row).

// combine: out[dst[r]] += probs[slot[r]] * in[in_index ? in_index[r] : r], rows with slot < 0
// skipped (a range's own rows: in = the experts' outputs, dst = src; remote rows: in = the
// outputs that came back, in_index = their table rows).
template <class T, class Add>
MEMFINE_HD inline void weighted_add_row(const T* in, const int64_t* in_index, const int64_t* dst, const int64_t* slot,
                                        const T* probs, T* out, int64_t r, int64_t hidden, int64_t j0, int64_t dj,
                                        Add add) {
  using A = typename Acc<T>::type;
  const int64_t s = slot[r];
  if (s < 0) return;
  const A w = A(to_acc(probs[s]));
  const T* row = in + (in_index ? in_index[r] : r) * hidden;
  T* target = out + dst[r] * hidden;
  for (int64_t j = j0; j < hidden; j += dj) add(target + j, w * A(to_acc(row[j])));
}

// combine backward, the experts' output gradient: a token's row probs[slot[r]] * gy[src[r]], a
// peer's row (*peer_scale) * scale * peer_grads[table row of src[r]] (the gradient its loss term
// sends back), padding zero.
template <class T>
MEMFINE_HD inline void output_grad_row(const T* gy, const T* peer_grads, const int64_t* src, const int64_t* slot,
                                       const T* probs, const T* peer_scale, typename Acc<T>::type scale, T* out,
                                       int64_t r, int64_t hidden, int64_t j0, int64_t dj) {
  using A = typename Acc<T>::type;
  const int64_t s = src[r];
  T* dst = out + r * hidden;
  const T* row = nullptr;
  A w = A(0);
  if (s >= 0 && slot[r] >= 0) {
    row = gy + s * hidden, w = A(to_acc(probs[slot[r]]));
  } else if (s <= -2) {
    row = peer_grads + table_row(s) * hidden, w = A(to_acc(*peer_scale)) * scale;
  }
  for (int64_t j = j0; j < hidden; j += dj) dst[j] = Store<T>::from(row ? w * A(to_acc(row[j])) : A(0));
}

// The rows a peer's loss term reads: dot(out[r], peer_grads[table row of src[r]]) for a peer's
// row; 0 for the others.
template <class T>
MEMFINE_HD inline typename Acc<T>::type peer_dot_partial(const T* out, const T* peer_grads, const int64_t* src,
                                                         int64_t r, int64_t hidden, int64_t j0, int64_t dj) {
  using A = typename Acc<T>::type;
  if (src[r] > -2) return A(0);
  const T* x = out + r * hidden;
  const T* y = peer_grads + table_row(src[r]) * hidden;
  A sum = A(0);
  for (int64_t j = j0; j < hidden; j += dj) sum += A(to_acc(x[j])) * A(to_acc(y[j]));
  return sum;
}

MEMFINE_HD inline float exp_of(float x) { return expf(x); }
MEMFINE_HD inline double exp_of(double x) { return exp(x); }

// SwiGLU's activation of one row: z = [a | b] (2 x width), act = SiLU(a) * b.
template <class T>
MEMFINE_HD inline void swiglu_row(const T* z, T* act, int64_t r, int64_t width, int64_t j0, int64_t dj) {
  using A = typename Acc<T>::type;
  const T* zr = z + r * 2 * width;
  T* out = act + r * width;
  for (int64_t j = j0; j < width; j += dj) {
    const A a = A(to_acc(zr[j])), b = A(to_acc(zr[width + j]));
    out[j] = Store<T>::from(a / (A(1) + exp_of(-a)) * b);
  }
}

// Its backward: dz = [g * b * SiLU'(a) | g * SiLU(a)], SiLU'(a) = s (1 + a (1 - s)), s = sigmoid(a).
template <class T>
MEMFINE_HD inline void swiglu_backward_row(const T* g, const T* z, T* gz, int64_t r, int64_t width, int64_t j0,
                                           int64_t dj) {
  using A = typename Acc<T>::type;
  const T* zr = z + r * 2 * width;
  const T* gr = g + r * width;
  T* out = gz + r * 2 * width;
  for (int64_t j = j0; j < width; j += dj) {
    const A a = A(to_acc(zr[j])), b = A(to_acc(zr[width + j])), gj = A(to_acc(gr[j]));
    const A sig = A(1) / (A(1) + exp_of(-a));
    out[j] = Store<T>::from(gj * b * sig * (A(1) + a * (A(1) - sig)));
    out[width + j] = Store<T>::from(gj * a * sig);
  }
}

}  // namespace memfine::rows
