#include "core/moe/range_ops.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <stdexcept>
#include <string>

#include "core/moe/fused.h"
#include "core/moe/grouped.h"
#include "core/moe/kernels.h"

namespace memfine::ops {
namespace {

const void* data(const at::Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }
const int64_t* index(const at::Tensor& t, int64_t begin) {
  return t.defined() ? t.data_ptr<int64_t>() + begin : nullptr;
}
void check(int code, const char* what) {
  if (code != 0)
    throw std::runtime_error(std::string("MoE range kernel ") + what + " failed with CUDA error " +
                             std::to_string(code));
}

at::Tensor gather_impl(const at::Tensor& x, const at::Tensor& table, const at::Tensor& src, int64_t begin,
                       int64_t count) {
  at::Tensor xs = x.contiguous(), out = at::empty({count, x.size(1)}, x.options());
  void* stream;
  const RowKernels& k = kernels_for(out, stream);
  check(k.gather_rows(row_type(out), data(xs), data(table), index(src, begin), nullptr, out.data_ptr(), count,
                      out.size(1), stream),
        "gather");
  return out;
}

at::Tensor grouped_mm_impl(const at::Tensor& a, const at::Tensor& b, const c10::optional<at::Tensor>& offs,
                           at::IntArrayRef sizes, bool trans_b) {
  const at::Tensor w = trans_b ? b.transpose(-2, -1) : b;
  if (offs.has_value() && offs->defined()) return native_grouped_mm(a, w, *offs);
  at::Tensor out = at::empty({a.size(0), w.size(2)}, a.options());
  grouped_products_into(out, a, w, sizes);
  return out;
}

at::Tensor& grouped_wgrad_impl(at::Tensor& grad, const at::Tensor& a, const at::Tensor& c,
                               const c10::optional<at::Tensor>& offs, at::IntArrayRef sizes) {
  if (offs.has_value() && offs->defined()) {
    // The native op makes the groups' products in a buffer of its own, then they are added.
    grad.add_(native_grouped_mm(a.t(), c, *offs));
    return grad;
  }
  grouped_weight_grads_add_(grad, a.t(), c, sizes);
  return grad;
}

at::Tensor swiglu_impl(const at::Tensor& z) {
  at::Tensor zc = z.contiguous(), act = at::empty({z.size(0), z.size(1) / 2}, z.options());
  void* stream;
  const RowKernels& k = kernels_for(act, stream);
  check(k.swiglu(row_type(act), zc.data_ptr(), act.data_ptr(), act.size(0), act.size(1), stream), "swiglu");
  return act;
}

at::Tensor swiglu_backward_impl(const at::Tensor& g, const at::Tensor& z) {
  at::Tensor gc = g.contiguous(), zc = z.contiguous(), gz = at::empty_like(zc);
  void* stream;
  const RowKernels& k = kernels_for(gz, stream);
  check(k.swiglu_backward(row_type(gz), gc.data_ptr(), zc.data_ptr(), gz.data_ptr(), gz.size(0), gc.size(1), stream),
        "swiglu_backward");
  return gz;
}

at::Tensor& combine_impl(at::Tensor& y, const at::Tensor& out, const at::Tensor& probs, const at::Tensor& src,
                         const at::Tensor& slot, int64_t begin, const at::Tensor& remote, const at::Tensor& remote_key,
                         const at::Tensor& remote_token, const at::Tensor& remote_slot, int64_t remote_begin,
                         int64_t remote_count) {
  at::Tensor o = out.contiguous(), p = probs.contiguous();
  void* stream;
  const RowKernels& k = kernels_for(y, stream);
  const rows::DType t = row_type(y);
  check(k.weighted_add_rows(t, data(o), nullptr, index(src, begin), index(slot, begin), data(p), y.data_ptr(),
                            o.size(0), y.size(1), stream),
        "combine");
  check(k.weighted_add_rows(t, data(remote), index(remote_key, remote_begin), index(remote_token, remote_begin),
                            index(remote_slot, remote_begin), data(p), y.data_ptr(), remote_count, y.size(1), stream),
        "combine (remote)");
  return y;
}

at::Tensor& peer_loss_impl(at::Tensor& acc, const at::Tensor& out, const at::Tensor& peer_grads, const at::Tensor& src,
                           int64_t begin, double norm) {
  at::Tensor o = out.contiguous();
  const at::ScalarType accumulate = out.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  at::Tensor dots = at::empty({o.size(0)}, o.options().dtype(accumulate));
  void* stream;
  const RowKernels& k = kernels_for(o, stream);
  check(k.peer_dots(row_type(o), data(o), data(peer_grads), index(src, begin), dots.data_ptr(), o.size(0), o.size(1),
                    stream),
        "peer_loss");
  acc.add_((dots.sum() / norm).to(acc.scalar_type()));
  return acc;
}

at::Tensor output_grad_impl(const at::Tensor& gy, const at::Tensor& probs, const at::Tensor& peer_grads,
                            const at::Tensor& g_peer, double norm, const at::Tensor& src, const at::Tensor& slot,
                            int64_t begin, int64_t count) {
  at::Tensor g = gy.contiguous(), p = probs.contiguous(), s = g_peer.to(g.scalar_type());
  at::Tensor out = at::empty({count, g.size(1)}, g.options());
  void* stream;
  const RowKernels& k = kernels_for(out, stream);
  check(k.output_grad_rows(row_type(out), data(g), data(peer_grads), index(src, begin), index(slot, begin), data(p),
                           data(s), 1.0 / norm, out.data_ptr(), count, g.size(1), stream),
        "output_grad");
  return out;
}

at::Tensor& probs_grad_impl(at::Tensor& gp, const at::Tensor& out, const at::Tensor& gy, const at::Tensor& src,
                            const at::Tensor& slot, int64_t begin, const at::Tensor& remote,
                            const at::Tensor& remote_key, const at::Tensor& remote_token, const at::Tensor& remote_slot,
                            int64_t remote_begin, int64_t remote_count) {
  at::Tensor o = out.contiguous(), g = gy.contiguous();
  void* stream;
  const RowKernels& k = kernels_for(gp, stream);
  const rows::DType t = row_type(gp);
  check(k.row_dot_to_slot(t, data(o), nullptr, data(g), index(src, begin), index(slot, begin), gp.data_ptr(), o.size(0),
                          g.size(1), stream),
        "probs_grad");
  check(k.row_dot_to_slot(t, data(remote), index(remote_key, remote_begin), data(g), index(remote_token, remote_begin),
                          index(remote_slot, remote_begin), gp.data_ptr(), remote_count, g.size(1), stream),
        "probs_grad (remote)");
  return gp;
}

at::Tensor& scatter_grad_impl(at::Tensor& gx, const at::Tensor& g_rows, const at::Tensor& src, int64_t begin) {
  at::Tensor g = g_rows.contiguous();
  void* stream;
  const RowKernels& k = kernels_for(gx, stream);
  // Rows whose source is not a token (peers', padding) have a negative destination: skipped.
  check(k.scatter_add_rows(row_type(gx), data(g), nullptr, index(src, begin), nullptr, gx.data_ptr(), g.size(0),
                           g.size(1), stream),
        "scatter_grad");
  return gx;
}

}  // namespace

}  // namespace memfine::ops

TORCH_LIBRARY(memfine, m) {
  m.def("moe_gather(Tensor x, Tensor table, Tensor src, int begin, int count) -> Tensor");
  m.def("moe_grouped_mm(Tensor a, Tensor b, Tensor? offs, int[] sizes, bool trans_b) -> Tensor");
  m.def("moe_grouped_wgrad_(Tensor(a!) grad, Tensor a, Tensor c, Tensor? offs, int[] sizes) -> Tensor(a!)");
  m.def("moe_swiglu(Tensor z) -> Tensor");
  m.def("moe_swiglu_backward(Tensor g, Tensor z) -> Tensor");
  m.def(
      "moe_combine_(Tensor(a!) y, Tensor out, Tensor probs, Tensor src, Tensor slot, int begin, Tensor remote, "
      "Tensor remote_key, Tensor remote_token, Tensor remote_slot, int remote_begin, int remote_count) -> Tensor(a!)");
  m.def(
      "moe_peer_loss_(Tensor(a!) acc, Tensor out, Tensor peer_grads, Tensor src, int begin, float norm) -> Tensor(a!)");
  m.def(
      "moe_output_grad(Tensor gy, Tensor probs, Tensor peer_grads, Tensor g_peer, float norm, Tensor src, Tensor slot, "
      "int begin, int count) -> Tensor");
  m.def(
      "moe_probs_grad_(Tensor(a!) gp, Tensor out, Tensor gy, Tensor src, Tensor slot, int begin, Tensor remote, "
      "Tensor remote_key, Tensor remote_token, Tensor remote_slot, int remote_begin, int remote_count) -> Tensor(a!)");
  m.def("moe_scatter_grad_(Tensor(a!) gx, Tensor g_rows, Tensor src, int begin) -> Tensor(a!)");
}

TORCH_LIBRARY_IMPL(memfine, CompositeExplicitAutograd, m) {
  m.impl("moe_gather", memfine::ops::gather_impl);
  m.impl("moe_grouped_mm", memfine::ops::grouped_mm_impl);
  m.impl("moe_grouped_wgrad_", memfine::ops::grouped_wgrad_impl);
  m.impl("moe_swiglu", memfine::ops::swiglu_impl);
  m.impl("moe_swiglu_backward", memfine::ops::swiglu_backward_impl);
  m.impl("moe_combine_", memfine::ops::combine_impl);
  m.impl("moe_peer_loss_", memfine::ops::peer_loss_impl);
  m.impl("moe_output_grad", memfine::ops::output_grad_impl);
  m.impl("moe_probs_grad_", memfine::ops::probs_grad_impl);
  m.impl("moe_scatter_grad_", memfine::ops::scatter_grad_impl);
}

namespace memfine::ops {

namespace {

// Each operator called through the dispatcher, as LibTorch's own are (typed once).
template <class Signature>
c10::TypedOperatorHandle<Signature> op(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Signature>();
}
// combine_ and probs_grad_: an output updated in place from a range's rows and its remote assignments.
using RangeAndRemote = at::Tensor&(at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                   const at::Tensor&, int64_t, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                   const at::Tensor&, int64_t, int64_t);
c10::optional<at::Tensor> maybe(const at::Tensor& t) {
  return t.defined() ? c10::optional<at::Tensor>(t) : c10::optional<at::Tensor>();
}

}  // namespace

at::Tensor moe_gather(const at::Tensor& x, const at::Tensor& table, const at::Tensor& src, int64_t begin,
                      int64_t count) {
  static const auto h =
      op<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t, int64_t)>("memfine::moe_gather");
  return h.call(x, table, src, begin, count);
}

at::Tensor moe_grouped_mm(const at::Tensor& a, const at::Tensor& b, const at::Tensor& offs, at::IntArrayRef sizes,
                          bool trans_b) {
  static const auto h =
      op<at::Tensor(const at::Tensor&, const at::Tensor&, const c10::optional<at::Tensor>&, at::IntArrayRef, bool)>(
          "memfine::moe_grouped_mm");
  return h.call(a, b, maybe(offs), sizes, trans_b);
}

void moe_grouped_wgrad_(at::Tensor& grad, const at::Tensor& a, const at::Tensor& c, const at::Tensor& offs,
                        at::IntArrayRef sizes) {
  static const auto h =
      op<at::Tensor&(at::Tensor&, const at::Tensor&, const at::Tensor&, const c10::optional<at::Tensor>&,
                     at::IntArrayRef)>("memfine::moe_grouped_wgrad_");
  h.call(grad, a, c, maybe(offs), sizes);
}

at::Tensor moe_swiglu(const at::Tensor& z) {
  static const auto h = op<at::Tensor(const at::Tensor&)>("memfine::moe_swiglu");
  return h.call(z);
}

at::Tensor moe_swiglu_backward(const at::Tensor& g, const at::Tensor& z) {
  static const auto h = op<at::Tensor(const at::Tensor&, const at::Tensor&)>("memfine::moe_swiglu_backward");
  return h.call(g, z);
}

void moe_combine_(at::Tensor& y, const at::Tensor& out, const at::Tensor& probs, const at::Tensor& src,
                  const at::Tensor& slot, int64_t begin, const at::Tensor& remote, const at::Tensor& remote_key,
                  const at::Tensor& remote_token, const at::Tensor& remote_slot, int64_t remote_begin,
                  int64_t remote_count) {
  static const auto h = op<RangeAndRemote>("memfine::moe_combine_");
  h.call(y, out, probs, src, slot, begin, remote, remote_key, remote_token, remote_slot, remote_begin, remote_count);
}

void moe_peer_loss_(at::Tensor& acc, const at::Tensor& out, const at::Tensor& peer_grads, const at::Tensor& src,
                    int64_t begin, double norm) {
  static const auto h =
      op<at::Tensor&(at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t, double)>(
          "memfine::moe_peer_loss_");
  h.call(acc, out, peer_grads, src, begin, norm);
}

at::Tensor moe_output_grad(const at::Tensor& gy, const at::Tensor& probs, const at::Tensor& peer_grads,
                           const at::Tensor& g_peer, double norm, const at::Tensor& src, const at::Tensor& slot,
                           int64_t begin, int64_t count) {
  static const auto h =
      op<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, double,
                    const at::Tensor&, const at::Tensor&, int64_t, int64_t)>("memfine::moe_output_grad");
  return h.call(gy, probs, peer_grads, g_peer, norm, src, slot, begin, count);
}

void moe_probs_grad_(at::Tensor& gp, const at::Tensor& out, const at::Tensor& gy, const at::Tensor& src,
                     const at::Tensor& slot, int64_t begin, const at::Tensor& remote, const at::Tensor& remote_key,
                     const at::Tensor& remote_token, const at::Tensor& remote_slot, int64_t remote_begin,
                     int64_t remote_count) {
  static const auto h = op<RangeAndRemote>("memfine::moe_probs_grad_");
  h.call(gp, out, gy, src, slot, begin, remote, remote_key, remote_token, remote_slot, remote_begin, remote_count);
}

void moe_scatter_grad_(at::Tensor& gx, const at::Tensor& g_rows, const at::Tensor& src, int64_t begin) {
  static const auto h =
      op<at::Tensor&(at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t)>("memfine::moe_scatter_grad_");
  h.call(gx, g_rows, src, begin);
}

}  // namespace memfine::ops
