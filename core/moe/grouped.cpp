#include "core/moe/grouped.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/autograd/custom_function.h>

#include <stdexcept>

#include "core/model/model.h"
#include "core/util/tensors.h"

namespace memfine {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Looked up by name, so that one source builds against LibTorch 1.13 (no such op) and 2.x.
const c10::OperatorHandle* grouped_op() {
  static const auto op = c10::Dispatcher::singleton().findSchema({"aten::_grouped_mm", ""});
  return op ? &*op : nullptr;
}

at::Tensor call_grouped_op(const at::Tensor& a, const at::Tensor& b, const at::Tensor& offs) {
  // Boxed: the schema's C++ types moved between versions; the dispatcher's autograd key still applies.
  std::vector<c10::IValue> stack{a, b, offs, c10::IValue(), c10::IValue()};
  grouped_op()->callBoxed(&stack);
  return stack.at(0).toTensor();
}

// Parts that lie back to back in one storage, read as one tensor over it; backward hands each part
// its slice of the gradient.
struct Joined : torch::autograd::Function<Joined> {
  static at::Tensor forward(AutogradContext* ctx, at::TensorList parts) {
    std::vector<int64_t> rows;
    for (const auto& p : parts) rows.push_back(p.size(0));
    ctx->saved_data["rows"] = rows;
    const at::Tensor& f = parts.front();
    std::vector<int64_t> sizes(f.sizes().begin(), f.sizes().end()), strides(f.strides().begin(), f.strides().end());
    int64_t total = 0;
    for (int64_t r : rows) total += r;
    sizes[0] = total;
    return at::empty({0}, f.options()).set_(f.storage(), f.storage_offset(), sizes, strides);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    const auto rows = ctx->saved_data["rows"].toIntVector();
    return grad[0].split_with_sizes(rows, 0);
  }
};

// Where the op is missing (or not native), its stand-in: the same outputs, one buffer each as the
// op allocates, and the same saved tensors (the op's derivative saves both inputs), filled by a
// product per group; so that the memory a grouped step takes is the same here as on the GPU.
void products_into(at::Tensor& out, const at::Tensor& a, const at::Tensor& b, const std::vector<int64_t>& sizes) {
  int64_t off = 0;
  for (size_t e = 0; e < sizes.size(); ++e) {
    at::Tensor o = out.narrow(0, off, sizes[e]);
    if (sizes[e] > 0) at::mm_out(o, a.narrow(0, off, sizes[e]), b.select(0, int64_t(e)));
    off += sizes[e];
  }
}

at::Tensor weight_grad_loop(const at::Tensor& a_t, const at::Tensor& c, const std::vector<int64_t>& sizes) {
  at::Tensor out = at::empty({int64_t(sizes.size()), a_t.size(0), c.size(1)}, c.options());
  int64_t off = 0;
  for (size_t e = 0; e < sizes.size(); ++e) {
    at::Tensor o = out.select(0, int64_t(e));
    if (sizes[e] > 0)
      at::mm_out(o, a_t.narrow(1, off, sizes[e]), c.narrow(0, off, sizes[e]));
    else
      o.zero_();
    off += sizes[e];
  }
  return out;
}

struct GroupedMmLoop : torch::autograd::Function<GroupedMmLoop> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& a, const at::Tensor& b, std::vector<int64_t> sizes) {
    at::Tensor out = at::empty({a.size(0), b.size(2)}, a.options());
    products_into(out, a, b, sizes);
    ctx->save_for_backward({a, b});
    ctx->saved_data["sizes"] = sizes;
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    const auto saved = ctx->get_saved_variables();
    const auto sizes = ctx->saved_data["sizes"].toIntVector();
    const at::Tensor g = grad[0].contiguous();
    at::Tensor ga, gb;
    if (ctx->needs_input_grad(0)) {
      ga = at::empty_like(saved[0]);
      products_into(ga, g, saved[1].transpose(-2, -1), sizes);
    }
    if (ctx->needs_input_grad(1)) gb = weight_grad_loop(saved[0].t(), g, sizes);
    return {ga, gb, at::Tensor()};
  }
};

}  // namespace

bool grouped_mm_native(const at::Tensor& like) {
  return grouped_op() && like.is_cuda() && like.scalar_type() == at::kBFloat16;
}

ExpertGroups expert_groups(const std::vector<int64_t>& sizes, const at::Tensor& like) {
  ExpertGroups g{sizes, at::Tensor()};
  if (!grouped_mm_native(like)) return g;
  // Pinned, so that the upload does not wait for the kernels already queued (a pageable one does).
  at::Tensor host = at::empty({int64_t(sizes.size())}, at::TensorOptions(at::kInt).pinned_memory(true));
  int32_t end = 0;
  for (size_t i = 0; i < sizes.size(); ++i) host.data_ptr<int32_t>()[i] = end += int32_t(sizes[i]);
  g.offs = host.to(like.device(), /*non_blocking=*/true);
  return g;
}

at::Tensor grouped_mm(const at::Tensor& a, const at::Tensor& b, const ExpertGroups& g) {
  if (g.offs.defined()) return call_grouped_op(a, b, g.offs);
  return GroupedMmLoop::apply(a, b, g.sizes);
}

at::Tensor grouped_mm_weight_grad(const at::Tensor& a_t, const at::Tensor& c, const ExpertGroups& g) {
  if (g.offs.defined()) return call_grouped_op(a_t, c, g.offs);
  return weight_grad_loop(a_t, c, g.sizes);
}

at::Tensor stacked_experts(const std::vector<at::Tensor>& w) {
  if (w.empty() || !back_to_back(w)) throw std::logic_error("stacked_experts: the experts' weights are not packed");
  std::vector<int64_t> sizes = {int64_t(w.size())};
  sizes.insert(sizes.end(), w[0].sizes().begin(), w[0].sizes().end());
  return (w.size() == 1 ? w[0] : Joined::apply(at::TensorList(w))).view(sizes);
}

at::Tensor grouped_rows(const std::vector<at::Tensor>& rows) {
  if (rows.size() == 1) return rows[0];
  if (back_to_back(rows)) return Joined::apply(at::TensorList(rows));  // a list: each part an input
  return at::cat(rows);
}

at::Tensor swiglu_grouped(const at::Tensor& rows, const at::Tensor& w_in, const at::Tensor& w_out,
                          const ExpertGroups& g) {
  return swiglu_with(rows, w_in, w_out, [&](const at::Tensor& a, const at::Tensor& b) { return grouped_mm(a, b, g); });
}

}  // namespace memfine
