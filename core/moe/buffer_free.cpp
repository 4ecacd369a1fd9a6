#include "core/moe/buffer_free.h"

#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>

#include "core/moe/fused.h"
#include "core/moe/rows.h"

namespace memfine {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

at::Tensor or_empty(const at::Tensor& table, const at::Tensor& like) {
  return table.defined() ? table.contiguous() : at::empty({0, like.size(1)}, like.options());
}

// Rows of `in` (or of `table`) through their index into a new [src rows, hidden] block.
at::Tensor read_rows(const at::Tensor& in, const at::Tensor& table, const at::Tensor& src) {
  at::Tensor out = at::empty({src.size(0), in.size(1)}, in.options());
  gather_rows_into(in, table, src, at::Tensor(), out);
  return out;
}

// The .grad of an expert weight (the parameter itself, which outlives the step), made if missing.
at::Tensor grad_of(int64_t address) {
  const at::Tensor& w = *reinterpret_cast<const at::Tensor*>(address);
  if (!w.grad().defined()) w.mutable_grad() = at::zeros_like(w);
  return w.grad();
}

struct Expert : torch::autograd::Function<Expert> {
  static variable_list forward(AutogradContext* ctx, at::Tensor y, const at::Tensor& x, const at::Tensor& probs,
                               const at::Tensor& w_in, const at::Tensor& w_out, const ExpertRows* r) {
    const int64_t rows = r->src.size(0), own = r->own, g = w_out.size(0);
    const int64_t block = std::max<int64_t>(1, r->block_rows);
    const at::Tensor xs = x.contiguous(), table = or_empty(r->table, x);
    at::Tensor z = at::empty({rows, 2 * g}, x.options());
    at::Tensor act = r->keep_act ? at::empty({rows, g}, x.options()) : at::Tensor();
    at::Tensor weight = own > 0 ? probs.index_select(0, r->slot) : at::Tensor();
    at::Tensor peer_loss = at::zeros({}, y.options());
    for (int64_t b0 = 0; b0 < rows; b0 += block) {
      const int64_t n = std::min(block, rows - b0), o = std::clamp<int64_t>(own - b0, 0, n);
      const at::Tensor src = r->src.narrow(0, b0, n);
      at::Tensor zb = z.narrow(0, b0, n);
      at::mm_out(zb, read_rows(xs, table, src), w_in);
      auto ab = zb.chunk(2, -1);
      at::Tensor a_b = r->keep_act ? act.narrow(0, b0, n) : at::empty({n, g}, x.options());
      at::silu_out(a_b, ab[0]).mul_(ab[1]);
      const at::Tensor out = at::mm(a_b, w_out);
      if (o > 0) scatter_add_rows_into(out, at::Tensor(), src.narrow(0, 0, o), weight.narrow(0, b0, o), y);
      if (o < n) {
        // The peers' loss term as row dot products: no gathered copy of their gradient rows.
        at::Tensor keys = src.narrow(0, o, n - o).neg() + rows::encode_table_row(0);
        at::Tensor dots = at::empty({n - o}, out.options());
        row_dot_into(out.narrow(0, o, n - o), at::Tensor(), r->peer_grads->contiguous(), keys, dots);
        peer_loss = peer_loss + dots.sum() / r->loss_norm;
      }
    }
    ctx->mark_dirty({y});
    ctx->save_for_backward({xs, probs, w_in, w_out, z, act});
    ctx->saved_data["src"] = r->src;
    ctx->saved_data["slot"] = r->slot.defined() ? r->slot : at::empty({0}, at::kLong);
    ctx->saved_data["table"] = table;
    ctx->saved_data["own"] = own;
    ctx->saved_data["block"] = block;
    ctx->saved_data["peer_grads"] = reinterpret_cast<int64_t>(r->peer_grads);
    ctx->saved_data["loss_norm"] = r->loss_norm;
    ctx->saved_data["w_in"] = reinterpret_cast<int64_t>(&w_in);
    ctx->saved_data["w_out"] = reinterpret_cast<int64_t>(&w_out);
    return {y, peer_loss};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    variable_list saved = ctx->get_saved_variables();
    const at::Tensor x = saved[0], probs = saved[1], w_in = saved[2], w_out = saved[3], z = saved[4], act = saved[5];
    saved.clear();
    const at::Tensor src = ctx->saved_data["src"].toTensor(), slot = ctx->saved_data["slot"].toTensor();
    const at::Tensor table = ctx->saved_data["table"].toTensor();
    const int64_t rows = z.size(0), own = ctx->saved_data["own"].toInt(), block = ctx->saved_data["block"].toInt();
    const auto* peer_grads = reinterpret_cast<const at::Tensor*>(ctx->saved_data["peer_grads"].toInt());
    const at::Tensor dy = grad[0].contiguous();  // undefined gradients arrive as zeros (materialized)
    const at::Tensor grad_table = rows > own ? peer_grads->contiguous() : at::Tensor();
    // Each row's output weight: its router probability, or the peers' loss gradient.
    at::Tensor weight = at::empty({rows}, z.options());
    if (own > 0) weight.narrow(0, 0, own).copy_(probs.index_select(0, slot));
    if (rows > own) weight.narrow(0, own, rows - own).fill_(grad[1] / ctx->saved_data["loss_norm"].toDouble());
    at::Tensor gx = ctx->needs_input_grad(1) ? at::zeros_like(x) : at::Tensor();
    at::Tensor gp = ctx->needs_input_grad(2) ? at::zeros_like(probs) : at::Tensor();
    // The weight gradients are accumulated block by block straight into the experts' .grad, as a
    // fused expert kernel's weight-gradient GEMM does (Megatron's gradient_accumulation_fusion):
    // no [h, 2g] or [g, h] gradient exists besides .grad itself.
    at::Tensor gw_in = ctx->needs_input_grad(3) ? grad_of(ctx->saved_data["w_in"].toInt()) : at::Tensor();
    at::Tensor gw_out = ctx->needs_input_grad(4) ? grad_of(ctx->saved_data["w_out"].toInt()) : at::Tensor();
    for (int64_t b0 = 0; b0 < rows; b0 += block) {
      const int64_t n = std::min(block, rows - b0), o = std::clamp<int64_t>(own - b0, 0, n);
      const at::Tensor src_b = src.narrow(0, b0, n), w_b = weight.narrow(0, b0, n).unsqueeze(1);
      auto ab = z.narrow(0, b0, n).chunk(2, -1);
      const at::Tensor a = ab[0], b = ab[1];
      // The rows' output gradient, unweighted, read from the tokens' (or the peers') rows; the
      // product recomputed (or kept); their product's gradient.
      at::Tensor u = read_rows(dy, grad_table, src_b);
      at::Tensor a_b = act.defined() ? act.narrow(0, b0, n) : at::silu(a).mul_(b);
      at::Tensor g_act = at::mm(u, w_out.t());
      if (gp.defined() && o > 0) {
        // Router probabilities: dp = rowsum((dy W_out^T) * act), a row reduction; no output kept.
        at::Tensor dp = at::empty({o}, z.options());
        row_dot_into(g_act.narrow(0, 0, o), at::Tensor(), a_b.narrow(0, 0, o), at::Tensor(), dp);
        gp.index_add_(0, slot.narrow(0, b0, o), dp);
      }
      u.mul_(w_b);
      if (gw_out.defined()) gw_out.addmm_(a_b.t(), u);
      u = at::Tensor(), a_b = at::Tensor();
      g_act.mul_(w_b);
      at::Tensor g_z = at::empty({n, z.size(1)}, z.options());
      auto gz = g_z.chunk(2, -1);
      at::silu_out(gz[1], a).mul_(g_act);  // d/db = g * SiLU(a): SiLU recomputed in place
      g_act.mul_(b);                       // d/d(SiLU(a))
      at::silu_backward_out(gz[0], g_act, a);
      g_act = at::Tensor();
      // The input gradient goes straight back to its tokens (peer rows: negative index, skipped).
      if (gx.defined()) scatter_add_rows_into(at::mm(g_z, w_in.t()), at::Tensor(), src_b, at::Tensor(), gx);
      if (gw_in.defined()) gw_in.addmm_(read_rows(x, table, src_b).t(), g_z);
    }
    return {grad[0], gx, gp, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

std::pair<at::Tensor, at::Tensor> buffer_free_expert(at::Tensor& y, const at::Tensor& x, const at::Tensor& probs,
                                                     const at::Tensor& w_in, const at::Tensor& w_out,
                                                     const ExpertRows& rows) {
  variable_list out = Expert::apply(y, x, probs, w_in, w_out, &rows);
  return {out[0], out[1]};
}

Combined moe_range_buffer_free(const at::Tensor& x, const at::Tensor& probs, const LayerWeights& w,
                               const MoeRouting& mr, const Dispatched& d) {
  at::Tensor flat = probs.reshape(-1);
  at::Tensor y = at::zeros({d.end - d.begin, x.size(1)}, x.options());
  at::Tensor peer_loss = at::zeros({}, x.options());
  for (size_t e = 0; e < d.own_rows.size(); ++e) {
    const int64_t own = d.own_rows[e], rows = own + d.peer_rows[e];
    if (rows == 0) continue;
    // One index per row: its token (>= 0) or its peer's row (<= -2), read by the first GEMM and
    // written by the second.
    ExpertRows r;
    r.src = d.peer_rows[e] == 0 ? d.own_token[e]
                                : at::cat({d.own_token[e], d.peer_key[e].neg() + rows::encode_table_row(0)});
    r.slot = d.own_slot[e], r.own = own, r.table = mr.tables->peer_inputs, r.peer_grads = &mr.tables->peer_grads;
    r.loss_norm = mr.loss_norm, r.keep_act = mr.expert.keep_act, r.block_rows = mr.expert.block_rows;
    auto [y_next, loss] = buffer_free_expert(y, x, flat, w.w_in[e], w.w_out[e], r);
    y = y_next;
    if (rows > own) peer_loss = peer_loss + loss;
  }
  // The remote experts' outputs arrive (seeded) and are weighted into the tokens in place.
  if (d.remote_slot.numel() > 0)
    scatter_add_rows_(y, mr.tables->remote_outputs, flat.index_select(0, d.remote_slot), d.remote_key, d.remote_token);
  return {y, peer_loss};
}

}  // namespace memfine
