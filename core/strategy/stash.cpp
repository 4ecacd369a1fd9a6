#include "core/strategy/stash.h"

#include <torch/csrc/autograd/custom_function.h>

#include <cstdlib>
#include <new>

namespace memfine {

using json = nlohmann::json;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

namespace {

// Host pages: pinned beside a GPU; on a CPU outside the counting allocator (host and device are one
// memory there, and the meter counts the device's), as offloading's host pool is.
at::Tensor host_pages(int64_t rows, int64_t width, const at::TensorOptions& device_options) {
  if (device_options.device().is_cuda())
    return at::empty({rows, width}, device_options.device(at::kCPU).pinned_memory(true));
  const int64_t bytes = rows * width * int64_t(c10::elementSize(device_options.dtype().toScalarType()));
  void* p = std::malloc(size_t(std::max<int64_t>(bytes, 1)));
  if (!p) throw std::bad_alloc();
  return at::from_blob(p, {rows, width}, [](void* q) { std::free(q); }, device_options.device(at::kCPU));
}

// SwiGLU whose saved tensors go into the stash; backward computes the expert's gradients from what
// comes back: z = x w_in = [a | b], act = SiLU(a) * b, out = act w_out.
struct StashedSwiglu : torch::autograd::Function<StashedSwiglu> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w_in,
                            const at::Tensor& w_out, Stash* stash) {
    at::Tensor z = at::matmul(x, w_in);
    auto halves = z.chunk(2, -1);
    at::Tensor act = at::silu(halves[0]) * halves[1];
    at::Tensor out = at::matmul(act, w_out);
    ctx->save_for_backward({w_in, w_out});
    ctx->saved_data["stash"] = reinterpret_cast<int64_t>(stash);
    ctx->saved_data["slot"] = stash->put(x, z, act);
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    auto* stash = reinterpret_cast<Stash*>(ctx->saved_data["stash"].toInt());
    variable_list w = ctx->get_saved_variables();
    const at::Tensor& w_in = w[0];
    const at::Tensor& w_out = w[1];
    const at::Tensor g_out = grad[0];
    Stash::Slot t = stash->take(ctx->saved_data["slot"].toInt());
    at::Tensor g_wout = at::matmul(t.act.t(), g_out);
    t.act = at::Tensor();
    at::Tensor g_act = at::matmul(g_out, w_out.t());
    at::Tensor a = t.z.narrow(1, 0, t.z.size(1) / 2), b = t.z.narrow(1, t.z.size(1) / 2, t.z.size(1) / 2);
    at::Tensor sig = at::sigmoid(a);
    at::Tensor g_b = g_act * (a * sig);
    g_act.mul_(b);  // the gradient of SiLU(a)
    // d SiLU(a) / da = sig (1 + a (1 - sig))
    g_act.mul_(at::rsub(sig, 1).mul_(a).add_(1).mul_(sig));
    sig = at::Tensor();
    at::Tensor g_z = at::cat({g_act, g_b}, -1);
    g_act = g_b = a = b = t.z = at::Tensor();
    at::Tensor g_win = at::matmul(t.x.t(), g_z);
    at::Tensor g_x = at::matmul(g_z, w_in.t());
    return {g_x, g_win, g_wout, at::Tensor()};
  }
};

}  // namespace

Stash::Stash(StashSpec spec, int64_t layers, int64_t tokens, int64_t topk)
    : spec_(spec), layers_(layers), tokens_(tokens), topk_(topk) {
  begin_step();
}

void Stash::begin_step() {
  release();
  book_ = std::make_unique<PageBook>(spec_.device_pages(layers_, tokens_, topk_),
                                     spec_.host_pages(layers_, tokens_, topk_), spec_.page_rows);
  slots_.clear();
  layer_rows_ = layer_ = widest_layer_rows_ = stashed_rows_ = 0;
  why_.clear();
  on_ = true;
}

void Stash::end_layer() {
  if (!on_) return;
  widest_layer_rows_ = std::max(widest_layer_rows_, layer_rows_);
  const int64_t cap = spec_.capacity_rows(tokens_, topk_);
  if (layer_rows_ > cap && why_.empty())
    why_ = "layer " + std::to_string(layer_) + " received " + std::to_string(layer_rows_) + " rows, its buffers hold " +
           std::to_string(cap);
  if (layer_rows_ > 0) ++layer_;
  layer_rows_ = 0;
}

ExpertPath Stash::expert() {
  Stash* self = this;
  return ExpertPath([self](const at::Tensor& rows, const at::Tensor& w_in, const at::Tensor& w_out) {
    if (!self->on_) return swiglu(rows, w_in, w_out);
    return StashedSwiglu::apply(rows, w_in, w_out, self);
  });
}

int64_t Stash::put(const at::Tensor& x, const at::Tensor& z, const at::Tensor& act) {
  Slot s;
  s.rows = x.size(0);
  layer_rows_ += s.rows;
  const int64_t h = x.size(1), g2 = z.size(1), g = act.size(1);
  s.h = h, s.g = g;
  options_ = x.options();
  s.where = book_->put(s.rows, &s.first_row);
  at::Tensor pool;
  if (s.where == PageBook::Where::Device) {
    if (!device_pool_.defined())
      device_pool_ = at::empty({spec_.device_pages(layers_, tokens_, topk_) * spec_.page_rows, h + g2 + g}, x.options());
    pool = device_pool_;
  } else if (s.where == PageBook::Where::Host) {
    if (!host_pool_.defined())
      host_pool_ = host_pages(spec_.host_pages(layers_, tokens_, topk_) * spec_.page_rows, h + g2 + g, x.options());
    pool = host_pool_;
  }
  if (pool.defined()) {
    at::Tensor rows = pool.narrow(0, s.first_row, s.rows);
    rows.narrow(1, 0, h).copy_(x);
    rows.narrow(1, h, g2).copy_(z);
    rows.narrow(1, h + g2, g).copy_(act);
    stashed_rows_ += s.rows;
  } else {
    s.x = x, s.z = z, s.act = act;
    if (why_.empty()) why_ = "no page left for " + std::to_string(s.rows) + " rows";
  }
  slots_.push_back(std::move(s));
  return int64_t(slots_.size()) - 1;
}

Stash::Slot Stash::take(int64_t slot) {
  Slot& s = slots_.at(size_t(slot));
  Slot out;
  if (s.where == PageBook::Where::Nowhere) {
    out.x = std::move(s.x), out.z = std::move(s.z), out.act = std::move(s.act);
    return out;
  }
  const at::Tensor rows = (s.where == PageBook::Where::Device ? device_pool_ : host_pool_).narrow(0, s.first_row, s.rows);
  auto back = [&](int64_t from, int64_t width) {
    at::Tensor t = at::empty({s.rows, width}, options_);
    t.copy_(rows.narrow(1, from, width));
    return t;
  };
  out.x = back(0, s.h), out.z = back(s.h, 2 * s.g), out.act = back(s.h + 2 * s.g, s.g);
  return out;
}

void Stash::release() { device_pool_ = host_pool_ = at::Tensor(); }

json Stash::counters() const {
  return {{"pages_used", book_ ? book_->device_used() : 0},
          {"host_pages", book_ ? book_->host_used() : 0},
          {"stashed_rows", stashed_rows_},
          {"widest_layer_rows", widest_layer_rows_},
          {"overflow", why_}};
}

}  // namespace memfine
