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

}  // namespace

const RowKernels& kernels() {
  static const RowKernels k{gather_rows, scatter_add_rows, row_dot};
  return k;
}

}  // namespace memfine::host
