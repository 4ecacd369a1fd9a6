#include "core/moe/stages.h"

#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>

#include "core/moe/buffer_free.h"
#include "core/moe/fused.h"
#include "core/moe/rows.h"

namespace memfine {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

namespace {

// The outputs a rank computes for its peers' tokens leave the rank; their gradients come back
// in the backward pass. The emulation stands in seeded gradients, and keeps nothing but the keys.
struct PeerSink : torch::autograd::Function<PeerSink> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& out, const at::Tensor& keys,
                            const at::Tensor* grads, double norm) {
    ctx->saved_data["keys"] = keys;
    ctx->saved_data["norm"] = norm;
    ctx->saved_data["grads"] = reinterpret_cast<int64_t>(grads);
    return (out * grads->index_select(0, keys)).sum() / norm;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    const auto* grads = reinterpret_cast<const at::Tensor*>(ctx->saved_data["grads"].toInt());
    const at::Tensor keys = ctx->saved_data["keys"].toTensor();
    const double norm = ctx->saved_data["norm"].toDouble();
    return {grads->index_select(0, keys) * (grad[0] / norm), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// Stable grouping of `items` by `group` in [0, groups): returns the items ordered by group and
// the count of each group.
std::pair<at::Tensor, std::vector<int64_t>> group_by(const at::Tensor& items, const at::Tensor& group, int64_t groups) {
  if (items.numel() == 0) return {items, std::vector<int64_t>(size_t(groups), 0)};
  auto sorted = at::sort(group, /*stable=*/true, /*dim=*/0, /*descending=*/false);
  at::Tensor order = std::get<1>(sorted);
  at::Tensor counts = at::bincount(group, {}, groups);
  return {items.index_select(0, order), std::vector<int64_t>(counts.data_ptr<int64_t>(), counts.data_ptr<int64_t>() + groups)};
}

}  // namespace

Dispatched dispatch_indices(const MoeRouting& mr, int64_t begin, int64_t end, const at::Device& dev) {
  const RankRouting& r = *mr.rank;
  const int64_t El = r.local_experts, n = end - begin;
  const int64_t k = mr.expert_ids.size(1);
  Dispatched d;
  d.begin = begin, d.end = end;
  // Own assignments in the range, split into local (computed here) and remote (sent away).
  at::Tensor ids = mr.expert_ids.narrow(0, begin, n).reshape(-1) - r.first_expert;
  at::Tensor keep = mr.own_keep.defined() ? mr.own_keep.narrow(0, begin, n).reshape(-1) : at::ones_like(ids, at::kBool);
  at::Tensor is_local = (ids >= 0).logical_and(ids < El);
  at::Tensor local_slot = is_local.logical_and(keep).nonzero().reshape(-1);
  at::Tensor remote = is_local.logical_not().logical_and(keep).nonzero().reshape(-1);
  // Routing is decided on the host; the indices the data needs move to its device (no-op on CPU).
  d.remote_slot = remote.to(dev);
  d.remote_token = remote.div(k, "floor").to(dev);
  d.remote_key = mr.rank->own_key.narrow(0, begin, n).reshape(-1).index_select(0, remote).to(dev);
  auto own = group_by(local_slot, ids.index_select(0, local_slot), El);
  d.own_rows = own.second;
  // Peer rows whose sender position lies in the range.
  at::Tensor pmask = (r.peer_pos >= begin).logical_and(r.peer_pos < end);
  if (mr.peer_keep.defined()) pmask = pmask.logical_and(mr.peer_keep);
  at::Tensor prow = pmask.nonzero().reshape(-1);
  auto peers = group_by(r.peer_key.index_select(0, prow), r.peer_expert.index_select(0, prow), El);
  d.peer_rows = peers.second;
  int64_t o_off = 0, p_off = 0;
  for (int64_t e = 0; e < El; ++e) {
    d.own_slot.push_back(own.first.narrow(0, o_off, d.own_rows[e]).to(dev));
    d.own_token.push_back(d.own_slot.back().div(k, "floor"));
    d.peer_key.push_back(peers.first.narrow(0, p_off, d.peer_rows[e]).to(dev));
    o_off += d.own_rows[e], p_off += d.peer_rows[e];
  }
  return d;
}

Dispatched dispatch(const at::Tensor& x, const MoeRouting& mr, int64_t begin, int64_t end) {
  const at::Device dev = x.device();
  Dispatched d = dispatch_indices(mr, begin, end, dev);
  std::vector<at::Tensor> sources;  // fused: where each expert input row comes from (moe_rows.h)
  std::vector<int64_t> buffer_rows;
  for (size_t e = 0; e < d.own_rows.size(); ++e) {
    const int64_t rows = d.own_rows[e] + d.peer_rows[e], pad = std::max<int64_t>(mr.pad_rows - rows, 0);
    if (mr.fused) {
      sources.push_back(d.own_token[e]);
      sources.push_back(d.peer_key[e].neg() + memfine::rows::encode_table_row(0));  // table row k -> -2 - k
      sources.push_back(at::full({pad}, memfine::rows::kZeroRow, at::TensorOptions(at::kLong).device(dev)));
      buffer_rows.push_back(rows + pad);
      continue;
    }
    std::vector<at::Tensor> parts = {x.index_select(0, d.own_token[e])};
    if (d.peer_rows[e] > 0) parts.push_back(mr.tables->peer_inputs.index_select(0, d.peer_key[e]));
    if (pad > 0) parts.push_back(at::zeros({pad, x.size(1)}, x.options()));
    d.inputs.push_back(parts.size() == 1 ? parts[0] : at::cat(parts));
  }
  if (mr.fused) {
    // Each expert's input written once from the tokens, the peers' rows and padding. One op per
    // expert, as in ATen, so backward scatters each expert's input gradient as soon as it exists.
    at::Tensor all = at::cat(sources);
    int64_t off = 0;
    for (int64_t rows : buffer_rows)
      d.inputs.push_back(gather_rows(x, mr.tables->peer_inputs, all.narrow(0, off, rows))), off += rows;
  }
  return d;
}

at::Tensor run_expert(const MoeRouting& mr, const at::Tensor& rows, const at::Tensor& w_in, const at::Tensor& w_out) {
  return mr.expert.fn ? mr.expert.fn(rows, w_in, w_out) : swiglu(rows, w_in, w_out);
}

std::vector<at::Tensor> experts(const Dispatched& d, const LayerWeights& w, const MoeRouting& mr) {
  std::vector<at::Tensor> out;
  for (size_t e = 0; e < d.inputs.size(); ++e) {
    const at::Tensor& in = d.inputs[e];
    out.push_back(in.size(0) == 0 ? in : run_expert(mr, in, w.w_in[e], w.w_out[e]));
  }
  return out;
}

Combined combine(const std::vector<at::Tensor>& outputs, const Dispatched& d, const at::Tensor& probs,
                 const MoeRouting& mr) {
  const int64_t n = d.end - d.begin;
  const int64_t h = mr.tables->remote_outputs.size(1);
  at::Tensor flat_probs = probs.reshape(-1);
  at::Tensor y = at::zeros({n, h}, probs.options());
  at::Tensor peer_loss = at::zeros({}, probs.options());
  for (size_t e = 0; e < outputs.size(); ++e) {
    if (d.own_rows[e] > 0) {
      at::Tensor own = outputs[e].narrow(0, 0, d.own_rows[e]);
      at::Tensor weight = flat_probs.index_select(0, d.own_slot[e]);
      if (mr.fused) scatter_add_rows_(y, own, weight, at::Tensor(), d.own_token[e]);
      else y.index_add_(0, d.own_token[e], own * weight.unsqueeze(1));
    }
    if (d.peer_rows[e] > 0) {
      at::Tensor sent = outputs[e].narrow(0, d.own_rows[e], d.peer_rows[e]);
      peer_loss = peer_loss + PeerSink::apply(sent, d.peer_key[e], &mr.tables->peer_grads, mr.loss_norm);
    }
  }
  if (d.remote_slot.numel() > 0) {
    // Outputs of remote experts arrive (seeded) and are weighted like local ones.
    at::Tensor weight = flat_probs.index_select(0, d.remote_slot);
    if (mr.fused) {
      scatter_add_rows_(y, mr.tables->remote_outputs, weight, d.remote_key, d.remote_token);
    } else {
      at::Tensor arrived = mr.tables->remote_outputs.index_select(0, d.remote_key);
      y.index_add_(0, d.remote_token, arrived * weight.unsqueeze(1));
    }
  }
  return {y, peer_loss};
}

Combined moe_range(const at::Tensor& x, const at::Tensor& probs, const LayerWeights& w, const MoeRouting& mr,
                   int64_t begin, int64_t end) {
  if (mr.dist) return moe_range_alltoall(x, probs, w, mr, begin, end);
  if (mr.expert.buffer_free) return moe_range_buffer_free(x, probs, w, mr, begin, end);
  const Dispatched d = dispatch(x, mr, begin, end);
  return combine(experts(d, w, mr), d, probs, mr);
}

}  // namespace memfine
