#include "core/moe/expert_storage.h"

#include <torch/csrc/autograd/custom_function.h>

#include <stdexcept>

#include "core/util/modules.h"

namespace memfine {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// out = (SiLU(a) * b) @ w_out, keeping z and w_out only: the product is discarded after the
// forward and recomputed in backward ("output-discarding checkpoint"); the GEMMs are not.
struct ActThenDown : torch::autograd::Function<ActThenDown> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& z, const at::Tensor& w_out) {
    at::Tensor out;
    {
      auto ab = z.chunk(2, -1);
      at::Tensor y = at::silu(ab[0]) * ab[1];
      out = at::matmul(y, w_out);  // the product is freed here
    }
    ctx->save_for_backward({z, w_out});
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& z = saved[0];
    const at::Tensor& w_out = saved[1];
    const at::Tensor& g = grad[0];
    auto ab = z.chunk(2, -1);
    const at::Tensor a = ab[0], b = ab[1];
    // The product is recomputed in one buffer and lives only until the weight's gradient exists;
    // SiLU(a) is recomputed straight into the half of z's gradient that needs it.
    at::Tensor g_w;
    {
      at::Tensor y = at::silu(a).mul_(b);
      g_w = at::matmul(y.t(), g);
    }
    at::Tensor g_y = at::matmul(g, w_out.t());
    at::Tensor g_z = at::empty_like(z);
    auto gz = g_z.chunk(2, -1);
    at::silu_out(gz[1], a);
    gz[1].mul_(g_y);  // d/db = g_y * SiLU(a)
    g_y.mul_(b);      // d/d(SiLU(a)), in place: no further buffer
    at::silu_backward_out(gz[0], g_y, a);
    return {g_z, g_w};
  }
};

}  // namespace

ExpertPath expert_path(ExpertStorage s, bool keep_act, int64_t block_rows) {
  ExpertPath p;
  if (s == ExpertStorage::ActRecomputed) {
    p.fn = [](const at::Tensor& rows, const at::Tensor& w_in, const at::Tensor& w_out) {
      at::Tensor z;
      {
        ModuleScope fc1(Module::ExpertFc1);
        z = at::matmul(rows, w_in);
      }
      ModuleScope act(Module::MoeAct);  // it keeps z: the activation's input
      return ActThenDown::apply(z, w_out);
    };
  }
  p.act_recomputed = s == ExpertStorage::ActRecomputed;
  p.buffer_free = s == ExpertStorage::BufferFree;
  p.keep_act = p.buffer_free && keep_act;
  p.block_rows = block_rows;
  return p;
}

}  // namespace memfine
