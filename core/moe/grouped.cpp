#include "core/moe/grouped.h"

#include <ATen/core/dispatch/Dispatcher.h>

namespace memfine {
namespace {

// Looked up by name, so that one source builds against LibTorch 1.13 (no such op) and 2.x.
const c10::OperatorHandle* grouped_op() {
  static const auto op = c10::Dispatcher::singleton().findSchema({"aten::_grouped_mm", ""});
  return op ? &*op : nullptr;
}

}  // namespace

bool grouped_mm_native(const at::Tensor& like) {
  return grouped_op() && like.is_cuda() && like.scalar_type() == at::kBFloat16;
}

at::Tensor native_grouped_mm(const at::Tensor& a, const at::Tensor& b, const at::Tensor& offs) {
  // Boxed: the schema's C++ types moved between versions.
  std::vector<c10::IValue> stack{a, b, offs, c10::IValue(), c10::IValue()};
  grouped_op()->callBoxed(&stack);
  return stack.at(0).toTensor();
}

void grouped_products_into(at::Tensor& out, const at::Tensor& a, const at::Tensor& b, at::IntArrayRef sizes) {
  int64_t off = 0;
  for (size_t e = 0; e < sizes.size(); ++e) {
    at::Tensor o = out.narrow(0, off, sizes[e]);
    if (sizes[e] > 0) at::mm_out(o, a.narrow(0, off, sizes[e]), b.select(0, int64_t(e)));
    off += sizes[e];
  }
}

void grouped_weight_grads_add_(at::Tensor& grad, const at::Tensor& a_t, const at::Tensor& c, at::IntArrayRef sizes) {
  int64_t off = 0;
  for (size_t e = 0; e < sizes.size(); ++e) {
    if (sizes[e] > 0) grad.select(0, int64_t(e)).addmm_(a_t.narrow(1, off, sizes[e]), c.narrow(0, off, sizes[e]));
    off += sizes[e];
  }
}

}  // namespace memfine
