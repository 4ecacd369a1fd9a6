// The fused row kernels on the host: the same per-row code as the GPU (core/moe/rows.h), walked in order.
#include "core/moe/kernels.h"

#include <type_traits>

namespace memfine::host {

namespace {

template <class T>
void add_in_place(T* p, typename rows::Acc<T>::type v) {
  *p = rows::Store<T>::from(typename rows::Acc<T>::type(rows::to_acc(*p)) + v);
}

int gather_rows(rows::DType t, const void* in, const void* table, const int64_t* src, const void* weight, void* out,
                int64_t n, int64_t hidden, void*) {
  return rows::with_element_type<rows::HostBf16>(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    for (int64_t r = 0; r < n; ++r)
      rows::gather_row(static_cast<const T*>(in), static_cast<const T*>(table), src, static_cast<const T*>(weight),
                       static_cast<T*>(out), r, hidden, 0, 1);
    return 0;
  });
}

int scatter_add_rows(rows::DType t, const void* in, const int64_t* src, const int64_t* dst, const void* weight,
                     void* out, int64_t n, int64_t hidden, void*) {
  return rows::with_element_type<rows::HostBf16>(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    for (int64_t r = 0; r < n; ++r)
      rows::scatter_add_row(static_cast<const T*>(in), src, dst, static_cast<const T*>(weight), static_cast<T*>(out), r,
                            hidden, 0, 1, add_in_place<T>);
    return 0;
  });
}

int row_dot(rows::DType t, const void* a, const int64_t* a_index, const void* b, const int64_t* b_index, void* out,
            int64_t n, int64_t hidden, void*) {
  return rows::with_element_type<rows::HostBf16>(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    for (int64_t r = 0; r < n; ++r)
      static_cast<T*>(out)[r] = rows::Store<T>::from(
          rows::row_dot_partial(static_cast<const T*>(a), a_index, static_cast<const T*>(b), b_index, r, hidden, 0, 1));
    return 0;
  });
}

int weighted_add_rows(rows::DType t, const void* in, const int64_t* in_index, const int64_t* dst, const int64_t* slot,
                      const void* probs, void* out, int64_t n, int64_t hidden, void*) {
  return rows::with_element_type<rows::HostBf16>(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    for (int64_t r = 0; r < n; ++r)
      rows::weighted_add_row(static_cast<const T*>(in), in_index, dst, slot, static_cast<const T*>(probs),
                             static_cast<T*>(out), r, hidden, 0, 1, add_in_place<T>);
    return 0;
  });
}

int output_grad_rows(rows::DType t, const void* gy, const void* peer_grads, const int64_t* src, const int64_t* slot,
                     const void* probs, const void* peer_scale, double scale, void* out, int64_t n, int64_t hidden,
                     void*) {
  return rows::with_element_type<rows::HostBf16>(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    using A = typename rows::Acc<T>::type;
    for (int64_t r = 0; r < n; ++r)
      rows::output_grad_row(static_cast<const T*>(gy), static_cast<const T*>(peer_grads), src, slot,
                            static_cast<const T*>(probs), static_cast<const T*>(peer_scale), A(scale),
                            static_cast<T*>(out), r, hidden, 0, 1);
    return 0;
  });
}

int row_dot_to_slot(rows::DType t, const void* a, const int64_t* a_index, const void* b, const int64_t* b_index,
                    const int64_t* slot, void* out, int64_t n, int64_t hidden, void*) {
  return rows::with_element_type<rows::HostBf16>(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    for (int64_t r = 0; r < n; ++r)
      if (slot[r] >= 0)
        static_cast<T*>(out)[slot[r]] = rows::Store<T>::from(rows::row_dot_partial(
            static_cast<const T*>(a), a_index, static_cast<const T*>(b), b_index, r, hidden, 0, 1));
    return 0;
  });
}

int peer_dots(rows::DType t, const void* out, const void* peer_grads, const int64_t* src, void* dots, int64_t n,
              int64_t hidden, void*) {
  return rows::with_element_type<rows::HostBf16>(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    using A = typename rows::Acc<T>::type;
    for (int64_t r = 0; r < n; ++r)
      static_cast<A*>(dots)[r] =
          rows::peer_dot_partial(static_cast<const T*>(out), static_cast<const T*>(peer_grads), src, r, hidden, 0, 1);
    return 0;
  });
}

int swiglu(rows::DType t, const void* z, void* act, int64_t n, int64_t width, void*) {
  return rows::with_element_type<rows::HostBf16>(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    for (int64_t r = 0; r < n; ++r) rows::swiglu_row(static_cast<const T*>(z), static_cast<T*>(act), r, width, 0, 1);
    return 0;
  });
}

int swiglu_backward(rows::DType t, const void* g, const void* z, void* gz, int64_t n, int64_t width, void*) {
  return rows::with_element_type<rows::HostBf16>(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    for (int64_t r = 0; r < n; ++r)
      rows::swiglu_backward_row(static_cast<const T*>(g), static_cast<const T*>(z), static_cast<T*>(gz), r, width, 0,
                                1);
    return 0;
  });
}

}  // namespace

const RowKernels& kernels() {
  static const RowKernels k{gather_rows,       scatter_add_rows, row_dot,   weighted_add_rows, output_grad_rows,
                            row_dot_to_slot,   peer_dots,        swiglu,    swiglu_backward};
  return k;
}

}  // namespace memfine::host
