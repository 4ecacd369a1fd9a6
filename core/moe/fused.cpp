#include "core/moe/fused.h"

#include <torch/csrc/autograd/custom_function.h>

#include <stdexcept>

#include "core/moe/kernels.h"

#ifdef MEMFINE_KERNELS
#include <c10/cuda/CUDAStream.h>
#endif

namespace memfine {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

bool fused_kernels_available(const std::string& device) {
#ifdef MEMFINE_KERNELS
  return true;
#else
  return device == "cpu";
#endif
}

rows::DType row_type(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat:
      return rows::DType::f32;
    case at::kDouble:
      return rows::DType::f64;
    case at::kBFloat16:
      return rows::DType::bf16;
    default:
      throw std::invalid_argument(std::string("fused MoE kernels: unsupported dtype ") +
                                  c10::toString(t.scalar_type()));
  }
}

const RowKernels& kernels_for(const at::Tensor& out, void*& stream) {
  stream = nullptr;
  if (!out.is_cuda()) return host::kernels();
#ifdef MEMFINE_KERNELS
  stream = c10::cuda::getCurrentCUDAStream().stream();
  return cuda::kernels();
#else
  throw std::runtime_error("this build has no CUDA kernels");
#endif
}

namespace {

const void* data(const at::Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }
const int64_t* index(const at::Tensor& t) { return t.defined() ? t.data_ptr<int64_t>() : nullptr; }

void check(int code, const char* what) {
  if (code != 0)
    throw std::runtime_error(std::string("fused MoE kernel ") + what + " failed with CUDA error " +
                             std::to_string(code));
}

void run_gather(const at::Tensor& in, const at::Tensor& table, const at::Tensor& src, const at::Tensor& weight,
                at::Tensor& out) {
  void* stream;
  const RowKernels& k = kernels_for(out, stream);
  check(k.gather_rows(row_type(out), data(in), data(table), index(src), data(weight), out.data_ptr(), out.size(0),
                      out.size(1), stream),
        "gather_rows");
}

void run_scatter_add(const at::Tensor& in, const at::Tensor& src, const at::Tensor& dst, const at::Tensor& weight,
                     at::Tensor& out) {
  void* stream;
  const RowKernels& k = kernels_for(out, stream);
  check(k.scatter_add_rows(row_type(out), data(in), index(src), index(dst), data(weight), out.data_ptr(), dst.size(0),
                           out.size(1), stream),
        "scatter_add_rows");
}

void run_row_dot(const at::Tensor& a, const at::Tensor& a_index, const at::Tensor& b, const at::Tensor& b_index,
                 at::Tensor& out) {
  void* stream;
  const RowKernels& k = kernels_for(out, stream);
  check(k.row_dot(row_type(out), data(a), index(a_index), data(b), index(b_index), out.data_ptr(), out.size(0),
                  b.size(1), stream),
        "row_dot");
}

at::Tensor dense(const at::Tensor& t) { return t.defined() ? t.contiguous() : t; }

struct GatherRows : torch::autograd::Function<GatherRows> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& table, const at::Tensor& src) {
    at::Tensor xs = x.contiguous(), idx = src.contiguous();
    at::Tensor out = at::empty({idx.size(0), x.size(1)}, x.options());
    run_gather(xs, dense(table), idx, at::Tensor(), out);
    ctx->saved_data["src"] = idx;
    ctx->saved_data["rows"] = x.size(0);
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    // Each token row collects the gradients of the routed rows that copied it.
    at::Tensor src = ctx->saved_data["src"].toTensor();
    at::Tensor g = grad[0].contiguous();
    at::Tensor gx = at::zeros({ctx->saved_data["rows"].toInt(), g.size(1)}, g.options());
    run_scatter_add(g, at::Tensor(), src, at::Tensor(), gx);
    return {gx, at::Tensor(), at::Tensor()};
  }
};

struct ScatterAddRows : torch::autograd::Function<ScatterAddRows> {
  // src and weight are optional: an undefined tensor may not be an autograd input.
  static at::Tensor forward(AutogradContext* ctx, at::Tensor y, const at::Tensor& rows,
                            const c10::optional<at::Tensor>& weight, const c10::optional<at::Tensor>& src,
                            const at::Tensor& dst) {
    at::Tensor r = rows.contiguous(), d = dst.contiguous();
    at::Tensor w = weight.has_value() ? dense(*weight) : at::Tensor();
    at::Tensor s = src.has_value() ? dense(*src) : at::Tensor();
    run_scatter_add(r, s, d, w, y);
    ctx->mark_dirty({y});
    // The rows are kept only for the weights' gradient: an unweighted scatter stores nothing.
    ctx->save_for_backward({w.defined() && w.requires_grad() ? r : at::Tensor(), w});
    ctx->saved_data["src"] = s.defined() ? c10::IValue(s) : c10::IValue();
    ctx->saved_data["dst"] = d;
    ctx->saved_data["rows"] = r.size(0);
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor& r = saved[0];
    const at::Tensor& w = saved[1];
    const c10::IValue& sv = ctx->saved_data["src"];
    const at::Tensor src = sv.isTensor() ? sv.toTensor() : at::Tensor();
    const at::Tensor dst = ctx->saved_data["dst"].toTensor();
    at::Tensor g = grad[0].contiguous();
    at::Tensor gr, gw;
    if (ctx->needs_input_grad(1)) {
      // d rows[src[r]] = weight[r] * dy[dst[r]]
      const int64_t rows = ctx->saved_data["rows"].toInt();
      if (src.defined()) {
        gr = at::zeros({rows, g.size(1)}, g.options());
        run_scatter_add(g, dst, src, w, gr);
      } else {
        gr = at::empty({rows, g.size(1)}, g.options());
        run_gather(g, at::Tensor(), dst, w, gr);
      }
    }
    if (ctx->needs_input_grad(2)) {
      // d weight[r] = <rows[src[r]], dy[dst[r]]>
      gw = at::empty_like(w);
      run_row_dot(r, src, g, dst, gw);
    }
    return {grad[0], gr, gw, at::Tensor(), at::Tensor()};
  }
};

}  // namespace

void gather_rows_into(const at::Tensor& in, const at::Tensor& table, const at::Tensor& src, const at::Tensor& weight,
                      at::Tensor& out) {
  run_gather(in, table, src, weight, out);
}
void scatter_add_rows_into(const at::Tensor& in, const at::Tensor& src, const at::Tensor& dst, const at::Tensor& weight,
                           at::Tensor& out) {
  run_scatter_add(in, src, dst, weight, out);
}
void row_dot_into(const at::Tensor& a, const at::Tensor& a_index, const at::Tensor& b, const at::Tensor& b_index,
                  at::Tensor& out) {
  run_row_dot(a, a_index, b, b_index, out);
}

at::Tensor gather_rows(const at::Tensor& x, const at::Tensor& table, const at::Tensor& src) {
  // Without peer rows there is no table; an undefined tensor may not be an autograd input.
  return GatherRows::apply(x, table.defined() ? table : at::empty({0, x.size(1)}, x.options()), src);
}

at::Tensor scatter_add_rows_(at::Tensor& y, const at::Tensor& rows, const at::Tensor& weight, const at::Tensor& src,
                             const at::Tensor& dst) {
  auto opt = [](const at::Tensor& t) {
    return t.defined() ? c10::optional<at::Tensor>(t) : c10::optional<at::Tensor>();
  };
  return ScatterAddRows::apply(y, rows, opt(weight), opt(src), dst);
}

}  // namespace memfine
