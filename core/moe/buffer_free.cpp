#include "core/moe/buffer_free.h"

#include <torch/csrc/autograd/custom_function.h>

#include "core/moe/fused.h"
#include "core/moe/rows.h"

namespace memfine {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

at::Tensor or_empty(const at::Tensor& table, const at::Tensor& like) {
  return table.defined() ? table.contiguous() : at::empty({0, like.size(1)}, like.options());
}

// z = x[src] @ w_in, keeping the index only (x is the layer's and kept by it anyway).
struct Up : torch::autograd::Function<Up> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& table, const at::Tensor& src,
                            const at::Tensor& w_in) {
    at::Tensor xs = x.contiguous(), idx = src.contiguous();
    at::Tensor z;
    {
      at::Tensor rows = at::empty({idx.size(0), x.size(1)}, x.options());
      gather_rows_into(xs, table, idx, at::Tensor(), rows);
      z = at::matmul(rows, w_in);  // the gathered rows are freed here, before anything else runs
    }
    ctx->save_for_backward({xs, w_in});
    ctx->saved_data["table"] = table;
    ctx->saved_data["src"] = idx;
    return z;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const at::Tensor& w_in = saved[1];
    const at::Tensor table = ctx->saved_data["table"].toTensor(), src = ctx->saved_data["src"].toTensor();
    const at::Tensor dz = grad[0].contiguous();
    at::Tensor gx, gw;
    if (ctx->needs_input_grad(0)) {
      // Each row's input gradient goes straight back to its token (rows read from the peers'
      // table have no gradient here: their index is negative and skipped).
      at::Tensor g_rows = at::matmul(dz, w_in.t());
      gx = at::zeros_like(x);
      scatter_add_rows_into(g_rows, at::Tensor(), src, at::Tensor(), gx);
    }
    if (ctx->needs_input_grad(3)) {
      at::Tensor rows = at::empty({src.size(0), x.size(1)}, x.options());  // read again, transient
      gather_rows_into(x, table, src, at::Tensor(), rows);
      gw = at::matmul(rows.t(), dz);
    }
    return {gx, at::Tensor(), at::Tensor(), gw};
  }
};

// y[dst] += probs[slot] * ((SiLU(a) * b) @ w_out), in place; the peers' rows into their loss term.
struct Down : torch::autograd::Function<Down> {
  static variable_list forward(AutogradContext* ctx, at::Tensor y, const at::Tensor& z, const at::Tensor& probs,
                               const at::Tensor& w_out, const DownRows* r) {
    const int64_t rows = z.size(0), own = r->own;
    at::Tensor act;
    {
      auto ab = z.chunk(2, -1);
      act = at::silu(ab[0]).mul_(ab[1]);
    }
    at::Tensor out = at::matmul(act, w_out);
    if (!r->keep_act) act = at::Tensor();
    if (own > 0) scatter_add_rows_into(out, at::Tensor(), r->dst.narrow(0, 0, own), probs.index_select(0, r->slot), y);
    at::Tensor peer_loss = at::zeros({}, y.options());
    if (rows > own) {
      at::Tensor keys = r->dst.narrow(0, own, rows - own).neg() + rows::encode_table_row(0);
      peer_loss = (out.narrow(0, own, rows - own) * r->peer_grads->index_select(0, keys)).sum() / r->loss_norm;
    }
    ctx->mark_dirty({y});
    ctx->save_for_backward({z, w_out, probs, act});
    ctx->saved_data["slot"] = r->slot;
    ctx->saved_data["dst"] = r->dst;
    ctx->saved_data["own"] = own;
    ctx->saved_data["peer_grads"] = reinterpret_cast<int64_t>(r->peer_grads);
    ctx->saved_data["loss_norm"] = r->loss_norm;
    return {y, peer_loss};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    variable_list saved = ctx->get_saved_variables();
    const at::Tensor z = saved[0], w_out = saved[1], probs = saved[2];
    at::Tensor act = saved[3];
    saved.clear();
    const at::Tensor slot = ctx->saved_data["slot"].toTensor(), dst = ctx->saved_data["dst"].toTensor();
    const int64_t rows = z.size(0), own = ctx->saved_data["own"].toInt();
    const auto* peer_grads = reinterpret_cast<const at::Tensor*>(ctx->saved_data["peer_grads"].toInt());
    const at::Tensor& dy = grad[0];  // undefined gradients arrive as zeros (materialized)
    auto ab = z.chunk(2, -1);
    const at::Tensor a = ab[0], b = ab[1];
    // The gradient each row's output receives, unweighted: its token's (or its peer's) row.
    at::Tensor u = at::empty({rows, w_out.size(1)}, z.options());
    gather_rows_into(dy.contiguous(), rows > own ? peer_grads->contiguous() : at::Tensor(), dst, at::Tensor(), u);
    at::Tensor weight = at::empty({rows}, z.options());
    if (own > 0) weight.narrow(0, 0, own).copy_(probs.index_select(0, slot));
    if (rows > own) weight.narrow(0, own, rows - own).fill_(grad[1] / ctx->saved_data["loss_norm"].toDouble());
    at::Tensor silu_a = at::silu(a);
    if (!act.defined()) act = silu_a * b;  // recomputed from z
    at::Tensor g_act = at::matmul(u, w_out.t());
    at::Tensor gp, gw;
    if (ctx->needs_input_grad(2)) {
      // Router probabilities: dp = rowsum((dy W_out^T) * act), a row reduction; no output kept.
      at::Tensor dp = at::empty({own}, z.options());
      if (own > 0) row_dot_into(g_act.narrow(0, 0, own), at::Tensor(), act.narrow(0, 0, own), at::Tensor(), dp);
      gp = at::zeros_like(probs).index_add_(0, slot, dp);
    }
    u.mul_(weight.unsqueeze(1));
    if (ctx->needs_input_grad(3)) gw = at::matmul(act.t(), u);
    u = at::Tensor(), act = at::Tensor();
    g_act.mul_(weight.unsqueeze(1));
    at::Tensor g_z = at::empty_like(z);
    auto gz = g_z.chunk(2, -1);
    at::mul_out(gz[1], g_act, silu_a);
    silu_a = at::Tensor();
    g_act.mul_(b);  // d/d(SiLU(a)), in place
    at::silu_backward_out(gz[0], g_act, a);
    return {grad[0], g_z, gp, gw, at::Tensor()};
  }
};

}  // namespace

at::Tensor buffer_free_up(const at::Tensor& x, const at::Tensor& table, const at::Tensor& src, const at::Tensor& w_in) {
  return Up::apply(x, or_empty(table, x), src, w_in);
}

std::pair<at::Tensor, at::Tensor> buffer_free_down(at::Tensor& y, const at::Tensor& z, const at::Tensor& probs,
                                                   const at::Tensor& w_out, const DownRows& rows) {
  variable_list out = Down::apply(y, z, probs, w_out, &rows);
  return {out[0], out[1]};
}

Combined moe_range_buffer_free(const at::Tensor& x, const at::Tensor& probs, const LayerWeights& w,
                               const MoeRouting& mr, int64_t begin, int64_t end) {
  const Dispatched d = dispatch_indices(mr, begin, end, x.device());
  at::Tensor flat = probs.reshape(-1);
  at::Tensor y = at::zeros({end - begin, x.size(1)}, x.options());
  at::Tensor peer_loss = at::zeros({}, x.options());
  for (size_t e = 0; e < d.own_rows.size(); ++e) {
    const int64_t own = d.own_rows[e], rows = own + d.peer_rows[e];
    if (rows == 0) continue;
    // One index per row: its token (>= 0) or its peer's row (<= -2), read by the first GEMM and
    // written by the second.
    at::Tensor src = d.peer_rows[e] == 0 ? d.own_token[e]
                                         : at::cat({d.own_token[e], d.peer_key[e].neg() + rows::encode_table_row(0)});
    at::Tensor z = buffer_free_up(x, mr.tables->peer_inputs, src, w.w_in[e]);
    DownRows r{d.own_slot[e], src, own, &mr.tables->peer_grads, mr.loss_norm, mr.expert.keep_act};
    auto [y_next, loss] = buffer_free_down(y, z, flat, w.w_out[e], r);
    y = y_next;
    if (rows > own) peer_loss = peer_loss + loss;
  }
  // The remote experts' outputs arrive (seeded) and are weighted into the tokens in place.
  if (d.remote_slot.numel() > 0)
    scatter_add_rows_(y, mr.tables->remote_outputs, flat.index_select(0, d.remote_slot), d.remote_key, d.remote_token);
  return {y, peer_loss};
}

}  // namespace memfine
