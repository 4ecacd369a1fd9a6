#include "core/moe/stages.h"

#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>

#include "core/moe/buffer_free.h"
#include "core/moe/dispatcher.h"
#include "core/moe/fused.h"
#include "core/moe/rows.h"
#include "core/util/host_sync.h"
#include "core/util/modules.h"

namespace memfine {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

namespace {

// The outputs a rank computes for its peers' tokens leave the rank; their gradients come back
// in the backward pass. The emulation stands in seeded gradients, and keeps nothing but the keys.
// `value` false: a replay for backward reads only its graph (the loss term's value is dead).
struct PeerSink : torch::autograd::Function<PeerSink> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& out, const at::Tensor& keys,
                            const at::Tensor* grads, double norm, bool value) {
    ctx->saved_data["keys"] = keys;
    ctx->saved_data["norm"] = norm;
    ctx->saved_data["grads"] = reinterpret_cast<int64_t>(grads);
    return value ? (out * grads->index_select(0, keys)).sum() / norm : at::zeros({}, out.options());
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    const auto* grads = reinterpret_cast<const at::Tensor*>(ctx->saved_data["grads"].toInt());
    const at::Tensor keys = ctx->saved_data["keys"].toTensor();
    const double norm = ctx->saved_data["norm"].toDouble();
    return {grads->index_select(0, keys) * (grad[0] / norm), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// Stable grouping of `items` by `group` in [0, groups): returns the items ordered by group and
// the count of each group.
std::pair<at::Tensor, std::vector<int64_t>> group_by(const at::Tensor& items, const at::Tensor& group, int64_t groups) {
  if (items.numel() == 0) return {items, std::vector<int64_t>(size_t(groups), 0)};
  auto sorted = at::sort(group, /*stable=*/true, /*dim=*/0, /*descending=*/false);
  at::Tensor order = std::get<1>(sorted);
  at::Tensor counts = at::bincount(group, {}, groups);
  return {items.index_select(0, order),
          std::vector<int64_t>(counts.data_ptr<int64_t>(), counts.data_ptr<int64_t>() + groups)};
}

}  // namespace

at::Tensor peer_sink(const at::Tensor& out, const at::Tensor& keys, const at::Tensor* grads, double norm, bool value) {
  return PeerSink::apply(out, keys, grads, norm, value);
}

std::vector<Dispatched> dispatch_indices(const MoeRouting& mr, const std::vector<int64_t>& bounds,
                                         const at::Device& dev) {
  const RankRouting& r = *mr.rank;
  const int64_t El = r.local_experts, C = int64_t(bounds.size()) - 1;
  const int64_t k = mr.expert_ids.size(1), begin = bounds.front(), n = bounds.back() - begin;
  // With several ranges, items are grouped by (range, expert) and indexed from their range's first
  // token; `range_of` maps positions relative to `begin` to their range.
  at::Tensor edges = at::tensor(bounds, at::TensorOptions(at::kLong));
  auto range_of = [&](const at::Tensor& pos) {
    return at::searchsorted(edges, pos + begin, /*out_int32=*/false, /*right=*/true) - 1;
  };
  // Own assignments in [begin, end), split into local (computed here) and remote (sent away).
  at::Tensor ids = mr.expert_ids.narrow(0, begin, n).reshape(-1) - r.first_expert;
  at::Tensor keep = mr.own_keep.defined() ? mr.own_keep.narrow(0, begin, n).reshape(-1) : at::ones_like(ids, at::kBool);
  at::Tensor is_local = (ids >= 0).logical_and(ids < El);
  at::Tensor local_slot = is_local.logical_and(keep).nonzero().reshape(-1);
  at::Tensor remote = is_local.logical_not().logical_and(keep).nonzero().reshape(-1);
  at::Tensor remote_token = remote.div(k, "floor"),
             remote_key = r.own_key.narrow(0, begin, n).reshape(-1).index_select(0, remote);
  // Slots are in token order, so sorting by (range, expert) keeps each range's slots together and,
  // within it, grouped by expert in token order: what the range alone would give.
  at::Tensor own_group = ids.index_select(0, local_slot);
  if (C > 1) own_group = own_group + range_of(local_slot.div(k, "floor")) * El;
  auto own = group_by(local_slot, own_group, C * El);
  at::Tensor own_slot = own.first;  // flat slots from `begin`
  // Peer rows whose sender position lies in [begin, end), by (range, expert) in table order.
  at::Tensor pmask = (r.peer_pos >= begin).logical_and(r.peer_pos < bounds.back());
  if (mr.peer_keep.defined()) pmask = pmask.logical_and(mr.peer_keep);
  at::Tensor prow = pmask.nonzero().reshape(-1);
  at::Tensor peer_group = r.peer_expert.index_select(0, prow);
  if (C > 1) peer_group = peer_group + range_of(r.peer_pos.index_select(0, prow) - begin) * El;
  auto peers = group_by(r.peer_key.index_select(0, prow), peer_group, C * El);
  std::vector<int64_t> remote_rows = {remote.numel()};
  if (C > 1) {
    own_slot = own_slot - (edges.index_select(0, range_of(own_slot.div(k, "floor"))) - begin) * k;
    at::Tensor remote_range = range_of(remote_token);
    at::Tensor remote_first = edges.index_select(0, remote_range) - begin;
    remote = remote - remote_first * k, remote_token = remote_token - remote_first;
    at::Tensor counts = at::bincount(remote_range, {}, C);
    remote_rows.assign(counts.data_ptr<int64_t>(), counts.data_ptr<int64_t>() + C);
  }
  // Routing is decided on the host; what the data needs moves to its device in one upload (no-op
  // on CPU), so that a loop over ranges never waits for the device in between (to_device).
  std::vector<at::Tensor> parts = {own_slot, own_slot.div(k, "floor"), peers.first, remote, remote_token, remote_key};
  if (dev != at::Device(at::kCPU)) {
    std::vector<int64_t> sizes;
    for (const auto& t : parts) sizes.push_back(t.numel());
    parts = to_device(at::cat(parts), dev).split_with_sizes(sizes);
  }
  const at::Tensor &d_slot = parts[0], &d_token = parts[1], &d_peer = parts[2];
  const at::Tensor &d_rslot = parts[3], &d_rtoken = parts[4], &d_rkey = parts[5];
  std::vector<Dispatched> out(static_cast<size_t>(C));
  int64_t o_off = 0, p_off = 0, r_off = 0;
  for (int64_t c = 0; c < C; ++c) {
    Dispatched& d = out[size_t(c)];
    d.begin = bounds[size_t(c)], d.end = bounds[size_t(c) + 1];
    const int64_t rn = remote_rows[size_t(c)];
    d.remote_slot = d_rslot.narrow(0, r_off, rn), d.remote_token = d_rtoken.narrow(0, r_off, rn);
    d.remote_key = d_rkey.narrow(0, r_off, rn);
    r_off += rn;
    for (int64_t e = 0; e < El; ++e) {
      d.own_rows.push_back(own.second[size_t(c * El + e)]), d.peer_rows.push_back(peers.second[size_t(c * El + e)]);
      d.own_slot.push_back(d_slot.narrow(0, o_off, d.own_rows.back()));
      d.own_token.push_back(d_token.narrow(0, o_off, d.own_rows.back()));
      d.peer_key.push_back(d_peer.narrow(0, p_off, d.peer_rows.back()));
      o_off += d.own_rows.back(), p_off += d.peer_rows.back();
    }
  }
  return out;
}

Dispatched dispatch_indices(const MoeRouting& mr, int64_t begin, int64_t end, const at::Device& dev) {
  return std::move(dispatch_indices(mr, std::vector<int64_t>{begin, end}, dev)[0]);
}

Dispatched dispatch(const at::Tensor& x, const MoeRouting& mr, int64_t begin, int64_t end) {
  return dispatch(x, mr, dispatch_indices(mr, begin, end, x.device()));
}

Dispatched dispatch(const at::Tensor& x, const MoeRouting& mr, Dispatched d) {
  const at::Device dev = x.device();
  // A buffer per expert, so that backward frees each as soon as its expert is done.
  std::vector<at::Tensor> sources;  // fused: where each expert input row comes from (core/moe/rows.h)
  std::vector<int64_t> buffer_rows;
  for (size_t e = 0; e < d.own_rows.size(); ++e) {
    const int64_t rows = d.own_rows[e] + d.peer_rows[e], pad = std::max<int64_t>(mr.pad_rows - rows, 0);
    buffer_rows.push_back(rows + pad);
    if (mr.fused) {
      sources.push_back(d.own_token[e]);
      sources.push_back(d.peer_key[e].neg() + memfine::rows::encode_table_row(0));  // table row k -> -2 - k
      sources.push_back(at::full({pad}, memfine::rows::kZeroRow, at::TensorOptions(at::kLong).device(dev)));
      continue;
    }
    std::vector<at::Tensor> parts;
    parts.push_back(x.index_select(0, d.own_token[e]));
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
  ModuleScope experts(Module::Experts);
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
      if (mr.fused)
        scatter_add_rows_(y, own, weight, at::Tensor(), d.own_token[e]);
      else
        y.index_add_(0, d.own_token[e], own * weight.unsqueeze(1));
    }
    if (d.peer_rows[e] > 0) {
      at::Tensor sent = outputs[e].narrow(0, d.own_rows[e], d.peer_rows[e]);
      peer_loss = peer_loss + peer_sink(sent, d.peer_key[e], &mr.tables->peer_grads, mr.loss_norm);
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

namespace {

// One process: the peers' rows and their gradients come from the routing's tables.
class EmulatedDispatcher : public TokenDispatcher {
 public:
  Combined moe_range(const at::Tensor& x, const at::Tensor& probs, const LayerWeights& w, const MoeRouting& mr,
                     int64_t begin, int64_t end, const Dispatched* routed) const override {
    Dispatched indices = routed ? *routed : dispatch_indices(mr, begin, end, x.device());
    if (mr.expert.buffer_free) return moe_range_buffer_free(x, probs, w, mr, indices);
    const Dispatched d = dispatch(x, mr, std::move(indices));
    if (mr.weighted_act) return combine_unweighted(experts_weighted(d, w, mr, probs), d, probs, mr);
    return combine(experts(d, w, mr), d, probs, mr);
  }
  bool routes_locally() const override { return true; }

  std::vector<at::Tensor> rows(PrefetchedRange& p) const override { return p.d.inputs; }
  Combined from_rows(const PrefetchedRange& p, const std::vector<at::Tensor>& rows, const at::Tensor& probs,
                     const LayerWeights& w, const MoeRouting& mr) const override {
    Dispatched d = p.d;
    d.inputs = rows;
    return combine(experts(d, w, mr), d, probs, mr);
  }
  at::Tensor rows_grad(const PrefetchedRange& p, const std::vector<at::Tensor>& grads, const MoeRouting&,
                       const at::TensorOptions& options, int64_t hidden) const override {
    // dispatch's backward: each expert's own rows add their gradient into their tokens' (the peers'
    // rows came from their senders, whose gradients the emulation seeds).
    at::NoGradGuard no_grad;
    at::Tensor g = at::zeros({p.end - p.begin, hidden}, options);
    for (size_t e = 0; e < p.d.own_rows.size() && e < grads.size(); ++e)
      if (grads[e].defined() && p.d.own_rows[e] > 0)
        g.index_add_(0, p.d.own_token[e], grads[e].narrow(0, 0, p.d.own_rows[e]));
    return g;
  }

 protected:
  void send_ahead(PrefetchedRange& p, const at::Tensor& x, const MoeRouting& mr,
                  const Dispatched* routed) const override {
    p.d = dispatch(x, mr, routed ? *routed : dispatch_indices(mr, p.begin, p.end, x.device()));
  }
};

}  // namespace

const TokenDispatcher& emulated_dispatcher() {
  static const EmulatedDispatcher d;
  return d;
}

}  // namespace memfine
