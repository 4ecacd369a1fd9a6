#include "core/strategy/memfine/chunked_moe.h"

#include <torch/csrc/autograd/custom_function.h>

#include <optional>

#include "core/moe/dispatcher.h"
#include "core/moe/ranged.h"

#include "core/strategy/recompute.h"

namespace memfine {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct ChunkedCall {
  MoeRouting routing;
  const LayerWeights* weights = nullptr;
  int64_t chunks = 1;
  ChunkReplay replay = ChunkReplay::InOrder;
  std::pair<int64_t, int64_t> range(int64_t c, int64_t n) const { return {c * n / chunks, (c + 1) * n / chunks}; }
  // Every chunk's routing in one pass, held through the chunk loop (one chunk: made by the chunk
  // itself, as by an unchunked MoE; real ranks: none, theirs is exchanged per chunk). Made again
  // in backward rather than kept from forward: it is not held between the two.
  bool routes_at_once() const { return chunks > 1 && routing.dispatcher->routes_locally(); }
  std::vector<Dispatched> routed(int64_t n, const at::Device& device) const {
    if (!routes_at_once()) return {};
    std::vector<int64_t> bounds;
    for (int64_t c = 0; c <= chunks; ++c) bounds.push_back(c * n / chunks);
    return dispatch_indices(routing, bounds, device);
  }
  const Dispatched* chunk(const std::vector<Dispatched>& r, int64_t c) const {
    return routes_at_once() ? &r[size_t(c)] : nullptr;
  }
};

TensorList expert_params(const LayerWeights& w) {
  TensorList p = w.w_in;
  p.insert(p.end(), w.w_out.begin(), w.w_out.end());
  return p;
}

// ChunkedEP's replay: the chunks last to first, each dispatched again; the next earlier chunk's rows
// are dispatched before this chunk's experts run (on real ranks their all-to-all is in flight
// meanwhile; here they are held) and taken as they are when its turn comes. Its input and
// probability gradients go into gx and gp, its weight gradients into the experts' .grad.
void replay_last_to_first(const ChunkedCall& call, const at::Tensor& x, const at::Tensor& probs,
                          const at::Tensor& g_out, const at::Tensor& g_peer, at::Tensor& gx, at::Tensor& gp) {
  const int64_t n = x.size(0);
  const std::vector<Dispatched> routed = call.routed(n, x.device());
  auto empty = [&](int64_t c) { return call.range(c, n).first == call.range(c, n).second; };
  auto fetch = [&](int64_t c) {
    auto [a, b] = call.range(c, n);
    return call.routing.dispatcher->prefetch(x.narrow(0, a, b - a), call.routing, a, b, call.chunk(routed, c));
  };
  std::optional<PrefetchedRange> next;
  for (int64_t c = call.chunks - 1; c >= 0; --c) {
    if (empty(c)) continue;  // every rank's chunks are the same ranges: all skip it
    auto [a, b] = call.range(c, n);
    PrefetchedRange here = next ? std::move(*next) : fetch(c);
    next.reset();
    int64_t earlier = c - 1;
    while (earlier >= 0 && empty(earlier)) --earlier;
    if (earlier >= 0) next = fetch(earlier);  // in flight while this chunk runs
    TensorList leaves;
    for (const at::Tensor& r : call.routing.dispatcher->rows(here)) leaves.push_back(r.detach().requires_grad_(true));
    const size_t n_rows = leaves.size();
    leaves.push_back(probs.narrow(0, a, b - a));
    RegionInputs in = region_inputs(leaves);
    leaves.clear();
    Combined out;
    {
      at::AutoGradMode grad_on(true);
      const std::vector<at::Tensor> rows(in.tensors.begin(), in.tensors.begin() + int64_t(n_rows));
      out = call.routing.dispatcher->from_rows(here, rows, in.tensors.back(), *call.weights, call.routing);
    }
    in.tensors.clear();
    at::Tensor gy = g_out.defined() ? g_out.narrow(0, a, b - a) : at::Tensor();
    backward_into_leaves({std::move(out.y), std::move(out.peer_loss)}, {std::move(gy), g_peer});
    TensorList& g = *in.grads;
    const std::vector<at::Tensor> row_grads(g.begin(), g.begin() + int64_t(n_rows));
    gx.narrow(0, a, b - a).add_(call.routing.dispatcher->rows_grad(here, row_grads, call.routing, x.options(), x.size(1)));
    if (g[n_rows].defined()) gp.narrow(0, a, b - a).copy_(g[n_rows]);
  }
}

struct ChunkedMoe : torch::autograd::Function<ChunkedMoe> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& probs,
                               at::TensorList params, const ChunkedCall* call) {
    const int64_t n = x.size(0);
    at::Tensor peer_loss = at::zeros({}, x.options());
    ctx->save_for_backward({x, probs});
    ctx->saved_data["call"] = keep(*call);
    ctx->saved_data["n_params"] = int64_t(params.size());
    // The enclosing layer is being recomputed for its backward: this output's value is never
    // read, and backward below recomputes every chunk anyway. Skip a third MoE forward.
    if (recomputing_for_backward()) return {at::zeros({1, 1}, x.options()).expand_as(x), peer_loss};
    at::Tensor y = at::empty_like(x);
    {
      at::NoGradGuard no_grad;
      const std::vector<Dispatched> routed = call->routed(n, x.device());
      for (int64_t c = 0; c < call->chunks; ++c) {
        auto [a, b] = call->range(c, n);
        if (a == b) continue;
        Combined out = call->routing.dispatcher->moe_range(x.narrow(0, a, b - a), probs.narrow(0, a, b - a),
                                                          *call->weights, call->routing, a, b, call->chunk(routed, c));
        y.narrow(0, a, b - a).copy_(out.y);
        peer_loss += out.peer_loss;
      }
    }
    return {y, peer_loss};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    const ChunkedCall& call = kept<ChunkedCall>(ctx->saved_data["call"]);
    variable_list saved = ctx->get_saved_variables();
    const at::Tensor x = saved[0], probs = saved[1];
    saved.clear();
    const int64_t n = x.size(0);
    // The chunks' input gradients go straight into their rows of the layer's (one chunk: the
    // chunk's are the layer's); weight gradients into the experts' .grad, chunk after chunk.
    const bool last_to_first = call.replay == ChunkReplay::LastToFirstPrefetched;
    at::Tensor gx, gp;
    if (call.chunks > 1 || last_to_first) gx = at::zeros_like(x), gp = at::zeros_like(probs);
    // The incoming gradient is the residual branch's too (y is added to it): read it, never own it.
    const at::Tensor g_out = grad[0];
    if (last_to_first) replay_last_to_first(call, x, probs, g_out, grad[1], gx, gp);
    const std::vector<Dispatched> routed = last_to_first ? std::vector<Dispatched>() : call.routed(n, x.device());
    for (int64_t c = 0; c < call.chunks && !last_to_first; ++c) {
      auto [a, b] = call.range(c, n);
      if (a == b) continue;
      RegionInputs in = region_inputs({x.narrow(0, a, b - a), probs.narrow(0, a, b - a)});
      Combined out;
      {
        at::AutoGradMode grad_on(true);
        out = call.routing.dispatcher->moe_range(in.tensors[0], in.tensors[1], *call.weights, call.routing, a, b,
                                                call.chunk(routed, c));
      }
      in.tensors.clear();
      at::Tensor gy = !g_out.defined() ? at::Tensor() : call.chunks > 1 ? g_out.narrow(0, a, b - a) : g_out;
      backward_into_leaves({std::move(out.y), std::move(out.peer_loss)}, {std::move(gy), grad[1]});
      TensorList& g = *in.grads;
      if (call.chunks == 1) {
        gx = std::move(g[0]), gp = std::move(g[1]);
        break;
      }
      if (g[0].defined()) gx.narrow(0, a, b - a).copy_(g[0]);
      if (g[1].defined()) gp.narrow(0, a, b - a).copy_(g[1]);
    }
    variable_list result = {gx, gp};
    result.resize(2 + size_t(ctx->saved_data["n_params"].toInt()) + 1);  // parameters: in .grad; the call
    return result;
  }
};

}  // namespace

Combined chunked_moe(const at::Tensor& xn, const at::Tensor& probs, const MoeRouting& routing, const LayerWeights& w,
                     int64_t chunks, ChunkReplay replay) {
  if (ranged_moe(routing))
    return ranged_moe_layer(xn, probs, routing, w, chunks, RangeKeep::Recomputed, recomputing_for_backward(),
                            replay == ChunkReplay::LastToFirstPrefetched);
  ChunkedCall call{routing, &w, chunks, replay};
  variable_list out = ChunkedMoe::apply(xn, probs, at::TensorList(expert_params(w)), &call);
  return Combined{out[0], out[1]};
}

}  // namespace memfine
