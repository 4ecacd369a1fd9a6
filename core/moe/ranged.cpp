#include "core/moe/ranged.h"
#include "core/moe/dispatcher.h"

#include <torch/csrc/autograd/custom_function.h>
#include <torch/custom_class.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <stdexcept>

#include "core/moe/grouped.h"
#include "core/moe/range_ops.h"
#include "core/moe/rows.h"
#include "core/util/host_sync.h"
#include "core/util/modules.h"
#include "core/util/tensors.h"

namespace memfine {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

namespace {

// Host arrays of one layer's routing, read in place (no operator runs on them).
template <class T>
const T* host_data(const at::Tensor& t) {
  if (!t.defined()) return nullptr;
  if (!t.is_contiguous() || !t.device().is_cpu()) throw std::logic_error("range_layout: routing not on the host");
  return t.data_ptr<T>();
}

// `n` values from `data` on the device of `like`, as tensors that view one allocation (made
// through LibTorch's allocator, so that the meter sees it): on a GPU one pinned copy that does not
// wait for the device.
std::vector<at::Tensor> upload(const std::vector<std::vector<int64_t>>& parts, const at::Tensor& like) {
  int64_t total = 0;
  for (const auto& p : parts) total += int64_t(p.size());
  const bool device = !like.device().is_cpu();
  const int64_t n = std::max<int64_t>(total, 1);
  at::Tensor buffer = device ? pinned_buffer(n, at::kLong) : at::empty({n}, at::kLong);
  int64_t* out = buffer.data_ptr<int64_t>();
  for (const auto& p : parts) out = std::copy(p.begin(), p.end(), out);
  if (device) buffer = buffer.to(like.device(), /*non_blocking=*/true);
  std::vector<at::Tensor> views;
  int64_t off = 0;
  for (const auto& p : parts) {
    // A view made without an operator; it holds the buffer alive.
    views.push_back(at::from_blob(
        buffer.data_ptr<int64_t>() + off, {int64_t(p.size())}, [keep = buffer](void*) mutable { keep.reset(); },
        buffer.options().pinned_memory(false)));
    off += int64_t(p.size());
  }
  return views;
}

}  // namespace

int64_t RangeLayout::index_bytes() const {
  return 8 * (src.numel() + slot.numel() + remote_key.numel() + remote_token.numel() + remote_slot.numel());
}

RangeLayout range_layout(const MoeRouting& mr, const std::vector<int64_t>& bounds, const at::Tensor& like) {
  const RankRouting& r = *mr.rank;
  const int64_t El = r.local_experts, first = r.first_expert, k = mr.expert_ids.size(1);
  const size_t C = bounds.size() - 1;
  const int64_t* ids = host_data<int64_t>(mr.expert_ids);
  const bool* keep = host_data<bool>(mr.own_keep);
  const int64_t* own_key = host_data<int64_t>(r.own_key);
  // Each range's rows per expert, in the order dispatch takes them.
  std::vector<std::vector<int64_t>> own(C * size_t(El)), peer(C * size_t(El));
  std::vector<std::vector<int64_t>> remote(C);  // key, token, slot triples
  for (size_t c = 0; c < C; ++c)
    for (int64_t t = bounds[c]; t < bounds[c + 1]; ++t)
      for (int64_t j = 0; j < k; ++j) {
        const int64_t slot = t * k + j, e = ids[slot] - first;
        if (keep && !keep[slot]) continue;
        if (e >= 0 && e < El)
          own[c * size_t(El) + size_t(e)].push_back(slot);
        else
          remote[c].insert(remote[c].end(), {own_key[slot], t, slot});
      }
  const int64_t P = r.peer_pos.defined() ? r.peer_pos.numel() : 0;
  const int64_t *pos = host_data<int64_t>(r.peer_pos), *pex = host_data<int64_t>(r.peer_expert),
                *pkey = host_data<int64_t>(r.peer_key);
  const bool* pkeep = host_data<bool>(mr.peer_keep);
  for (int64_t p = 0; p < P; ++p) {
    if ((pkeep && !pkeep[p]) || pos[p] < bounds.front() || pos[p] >= bounds.back()) continue;
    const size_t c = size_t(std::upper_bound(bounds.begin(), bounds.end(), pos[p]) - bounds.begin() - 1);
    peer[c * size_t(El) + size_t(pex[p])].push_back(memfine::rows::encode_table_row(pkey[p]));
  }
  RangeLayout L;
  L.bounds = bounds;
  std::vector<int64_t> src, slots, rkey, rtoken, rslot, offs;
  L.row_begin = {0}, L.remote_begin = {0};
  for (size_t c = 0; c < C; ++c) {
    std::vector<int64_t> sizes;
    int32_t end = 0;
    for (int64_t e = 0; e < El; ++e) {
      const auto& o = own[c * size_t(El) + size_t(e)];
      const auto& q = peer[c * size_t(El) + size_t(e)];
      for (int64_t s : o) src.push_back(s / k), slots.push_back(s);
      for (int64_t s : q) src.push_back(s), slots.push_back(-1);
      const int64_t rows = int64_t(o.size() + q.size()), pad = std::max<int64_t>(mr.pad_rows - rows, 0);
      src.insert(src.end(), size_t(pad), memfine::rows::kZeroRow), slots.insert(slots.end(), size_t(pad), -1);
      sizes.push_back(rows + pad);
      offs.push_back(end += int32_t(rows + pad));
    }
    L.sizes.push_back(sizes);
    L.row_begin.push_back(int64_t(src.size()));
    for (size_t i = 0; i < remote[c].size(); i += 3)
      rkey.push_back(remote[c][i]), rtoken.push_back(remote[c][i + 1]), rslot.push_back(remote[c][i + 2]);
    L.remote_begin.push_back(int64_t(rkey.size()));
  }
  std::vector<at::Tensor> v = upload({src, slots, rkey, rtoken, rslot}, like);
  L.src = v[0], L.slot = v[1], L.remote_key = v[2], L.remote_token = v[3], L.remote_slot = v[4];
  if (grouped_mm_native(like)) {
    // The native grouped GEMM reads each range's group ends on the device: one int32 copy for all.
    at::Tensor ends = to_device(at::tensor(std::vector<int32_t>(offs.begin(), offs.end()), at::kInt), like.device());
    for (size_t c = 0; c < C; ++c)
      L.offs.push_back(at::from_blob(
          ends.data_ptr<int32_t>() + c * size_t(El), {El}, [keep = ends](void*) mutable { keep.reset(); },
          ends.options()));
  } else {
    L.offs.assign(C, at::Tensor());
  }
  return L;
}

bool ranged_moe(const MoeRouting& mr) {
  return mr.dispatcher->routes_locally() && mr.grouped && mr.ranged && !mr.expert.buffer_free && !mr.weighted_act &&
         (!mr.expert.fn || mr.expert.act_recomputed);
}

namespace {

// The experts' weights, or their gradients, as one [experts, in, out] tensor over their storage,
// without an operator and outside autograd.
at::Tensor stacked(const std::vector<at::Tensor>& w) {
  if (w.empty() || !back_to_back(w)) throw std::logic_error("ranged MoE: the experts' weights are not packed");
  const at::Tensor& f = w.front();
  return at::from_blob(
      f.data_ptr(), {int64_t(w.size()), f.size(0), f.size(1)}, [keep = f](void*) mutable { keep.reset(); },
      f.options().requires_grad(false));
}

// Where a range's weight gradients go: the experts' .grad, packed in one storage as the optimizer
// makes them (core/model/optimizer.h); elsewhere (a .grad missing or apart) a buffer of their own,
// added to each expert's at the end, as autograd would.
struct WeightGrads {
  std::vector<at::Tensor> params;
  at::Tensor all;
  bool own = false;
  explicit WeightGrads(const std::vector<at::Tensor>& p) : params(p) {
    std::vector<at::Tensor> grads;
    for (const auto& t : p) grads.push_back(t.grad());
    const bool packed =
        std::all_of(grads.begin(), grads.end(), [](const at::Tensor& g) { return g.defined(); }) && back_to_back(grads);
    if (packed) {
      all = stacked(grads);
    } else {
      all = at::zeros({int64_t(p.size()), p[0].size(0), p[0].size(1)}, p[0].options().requires_grad(false));
      own = true;
    }
  }
  void finish() {
    if (!own) return;
    for (size_t e = 0; e < params.size(); ++e) {
      at::Tensor& g = params[e].mutable_grad();
      g = g.defined() ? g.add_(all[int64_t(e)]) : all[int64_t(e)].clone();
    }
  }
};

struct Call {
  MoeRouting routing;
  const LayerWeights* weights = nullptr;
  std::vector<int64_t> bounds;
  RangeKeep keep = RangeKeep::Stored;
  bool skip = false;  // Recomputed in a replay for backward: the values are not read
  bool last_to_first = false;
};

// What a stored range keeps for its backward (Stored, ActRecomputed).
struct Saved {
  at::Tensor rows, z, act, out;
};

struct Held : torch::CustomClassHolder {
  Call call;
  std::optional<RangeLayout> layout;  // stored ranges: their routing, kept with them
  std::vector<Saved> saved;
};

// One range's forward: its output added into y, its peers' loss term into acc.
Saved range_forward(const Call& call, const RangeLayout& L, size_t c, const at::Tensor& x, const at::Tensor& probs,
                    const at::Tensor& w1, const at::Tensor& w2, at::Tensor& y, at::Tensor& acc) {
  const MoeRouting& mr = call.routing;
  const EmulatedRank& t = *mr.tables;
  const int64_t b = L.row_begin[c], R = L.rows(c);
  Saved s;
  if (R > 0) {
    ModuleScope experts(Module::Experts);
    s.rows = ops::moe_gather(x, t.peer_inputs, L.src, b, R);
    s.z = ops::moe_grouped_mm(s.rows, w1, L.offs[c], L.sizes[c], false);
    s.act = ops::moe_swiglu(s.z);
    s.out = ops::moe_grouped_mm(s.act, w2, L.offs[c], L.sizes[c], false);
  } else {
    s.out = at::empty({0, x.size(1)}, x.options());
  }
  ops::moe_combine_(y, s.out, probs, L.src, L.slot, b, t.remote_outputs, L.remote_key, L.remote_token, L.remote_slot,
                    L.remote_begin[c], L.remote(c));
  if (R > 0) ops::moe_peer_loss_(acc, s.out, t.peer_grads, L.src, b, mr.loss_norm);
  return s;
}

// One range's backward from what it kept (or made again): its input gradient into gx, its
// probabilities' into gp, its weights' into their gradients.
void range_backward(const Call& call, const RangeLayout& L, size_t c, Saved s, const at::Tensor& probs,
                    const at::Tensor& gy, const at::Tensor& g_peer, const at::Tensor& w1, const at::Tensor& w2,
                    WeightGrads& g1, WeightGrads& g2, at::Tensor& gx, at::Tensor& gp) {
  const MoeRouting& mr = call.routing;
  const EmulatedRank& t = *mr.tables;
  const int64_t b = L.row_begin[c], R = L.rows(c);
  if (R == 0) {
    at::Tensor none = at::empty({0, gy.size(1)}, gy.options());
    ops::moe_probs_grad_(gp, none, gy, L.src, L.slot, b, t.remote_outputs, L.remote_key, L.remote_token, L.remote_slot,
                         L.remote_begin[c], L.remote(c));
    return;
  }
  ModuleScope experts(Module::Experts);
  // Without the groups' device offsets the weight gradients take a GEMM per expert, in place.
  const at::Tensor wgrad_offs = mr.wgrad_per_expert ? at::Tensor() : L.offs[c];
  if (!s.act.defined()) s.act = ops::moe_swiglu(s.z);
  at::Tensor g_out = ops::moe_output_grad(gy, probs, t.peer_grads, g_peer, mr.loss_norm, L.src, L.slot, b, R);
  ops::moe_probs_grad_(gp, s.out, gy, L.src, L.slot, b, t.remote_outputs, L.remote_key, L.remote_token, L.remote_slot,
                       L.remote_begin[c], L.remote(c));
  s.out.reset();
  ops::moe_grouped_wgrad_(g2.all, s.act, g_out, wgrad_offs, L.sizes[c]);
  s.act.reset();
  at::Tensor g_act = ops::moe_grouped_mm(g_out, w2, L.offs[c], L.sizes[c], true);
  g_out.reset();
  at::Tensor g_z = ops::moe_swiglu_backward(g_act, s.z);
  g_act.reset(), s.z.reset();
  ops::moe_grouped_wgrad_(g1.all, s.rows, g_z, wgrad_offs, L.sizes[c]);
  at::Tensor g_rows = ops::moe_grouped_mm(g_z, w1, L.offs[c], L.sizes[c], true);
  g_z.reset(), s.rows.reset();
  ops::moe_scatter_grad_(gx, g_rows, L.src, b);
}

struct RangedMoe : torch::autograd::Function<RangedMoe> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& probs,
                               at::TensorList params, const Call* call) {
    auto held = c10::make_intrusive<Held>();
    held->call = *call;
    ctx->save_for_backward({x, probs});
    ctx->saved_data["held"] = c10::IValue::make_capsule(held);
    ctx->saved_data["n_params"] = int64_t(params.size());
    at::Tensor acc = at::zeros({}, x.options());
    // A replay for backward of a layer whose ranges are run again anyway: the output is not read.
    if (call->skip) return {at::zeros({1, 1}, x.options()).expand_as(x), acc};
    const LayerWeights& w = *call->weights;
    const at::Tensor w1 = stacked(w.w_in), w2 = stacked(w.w_out);
    RangeLayout L = range_layout(call->routing, call->bounds, x);
    at::Tensor y = at::zeros_like(x);
    for (size_t c = 0; c + 1 < L.bounds.size(); ++c) {
      if (L.rows(c) == 0 && L.remote(c) == 0) continue;
      Saved s = range_forward(*call, L, c, x, probs, w1, w2, y, acc);
      if (call->keep == RangeKeep::Recomputed) continue;
      if (call->keep == RangeKeep::ActRecomputed) s.act.reset();
      held->saved.push_back(std::move(s));
    }
    // Stored ranges keep their routing for backward; recomputed ones lay it out again there.
    if (call->keep != RangeKeep::Recomputed) held->layout = std::move(L);
    return {y, acc};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    auto held = ctx->saved_data["held"].toCapsule();
    Held& h = *static_cast<Held*>(held.get());
    variable_list saved = ctx->get_saved_variables();
    const at::Tensor x = saved[0], probs = saved[1];
    saved.clear();
    const LayerWeights& w = *h.call.weights;
    const at::Tensor w1 = stacked(w.w_in), w2 = stacked(w.w_out);
    WeightGrads g1(w.w_in), g2(w.w_out);
    const at::Tensor gy = grad[0].defined() ? grad[0] : at::zeros_like(x);
    const at::Tensor g_peer = grad[1].defined() ? grad[1] : at::zeros({}, x.options());
    at::Tensor gx = at::zeros_like(x), gp = at::zeros_like(probs);
    const bool again = h.call.keep == RangeKeep::Recomputed;
    const RangeLayout L = again ? range_layout(h.call.routing, h.call.bounds, x) : std::move(*h.layout);
    h.layout.reset();
    const size_t C = L.bounds.size() - 1;
    auto empty = [&](size_t c) { return L.rows(c) == 0 && L.remote(c) == 0; };
    if (again && !h.call.last_to_first) {
      // MemFine's FCDA: each range made again and backpropagated, first to last.
      for (size_t c = 0; c < C; ++c) {
        if (empty(c)) continue;
        Saved s = range_recompute(h.call, L, c, x, w1, w2, at::Tensor());
        range_backward(h.call, L, c, std::move(s), probs, gy, g_peer, w1, w2, g1, g2, gx, gp);
      }
    } else if (again) {
      // ChunkedEP's: last to first, the next earlier range's rows gathered ahead and held.
      at::Tensor ahead;
      for (size_t c = C; c-- > 0;) {
        if (empty(c)) continue;
        at::Tensor rows = std::move(ahead);
        ahead = at::Tensor();
        if (L.rows(c) > 0 && !rows.defined()) rows = gather(h.call, L, c, x);
        size_t earlier = c;
        while (earlier-- > 0 && empty(earlier)) {
        }
        if (earlier < c && L.rows(earlier) > 0) ahead = gather(h.call, L, earlier, x);
        Saved s = range_recompute(h.call, L, c, x, w1, w2, std::move(rows));
        range_backward(h.call, L, c, std::move(s), probs, gy, g_peer, w1, w2, g1, g2, gx, gp);
      }
    } else {
      // As autograd would: the last range first, each range's kept tensors let go after it.
      size_t i = h.saved.size();
      for (size_t c = C; c-- > 0;) {
        if (empty(c)) continue;
        Saved s = std::move(h.saved[--i]);
        h.saved.pop_back();
        range_backward(h.call, L, c, std::move(s), probs, gy, g_peer, w1, w2, g1, g2, gx, gp);
      }
    }
    g1.finish(), g2.finish();
    variable_list result = {gx, gp};
    result.resize(2 + size_t(ctx->saved_data["n_params"].toInt()) + 1);  // parameters: in .grad; the call
    return result;
  }

  static at::Tensor gather(const Call& call, const RangeLayout& L, size_t c, const at::Tensor& x) {
    ModuleScope experts(Module::Experts);
    return ops::moe_gather(x, call.routing.tables->peer_inputs, L.src, L.row_begin[c], L.rows(c));
  }

  // A Recomputed range's rows (unless gathered ahead), z, activation and outputs, made again for
  // its backward.
  static Saved range_recompute(const Call& call, const RangeLayout& L, size_t c, const at::Tensor& x,
                               const at::Tensor& w1, const at::Tensor& w2, at::Tensor rows) {
    Saved s;
    if (L.rows(c) == 0) return s;
    s.rows = rows.defined() ? std::move(rows) : gather(call, L, c, x);
    ModuleScope experts(Module::Experts);
    s.z = ops::moe_grouped_mm(s.rows, w1, L.offs[c], L.sizes[c], false);
    s.act = ops::moe_swiglu(s.z);
    s.out = ops::moe_grouped_mm(s.act, w2, L.offs[c], L.sizes[c], false);
    return s;
  }
};

}  // namespace

Combined ranged_moe_layer(const at::Tensor& xn, const at::Tensor& probs, const MoeRouting& mr, const LayerWeights& w,
                          int64_t chunks, RangeKeep keep, bool values_dead, bool last_to_first) {
  Call call{mr, &w, {}, keep, values_dead && keep == RangeKeep::Recomputed, last_to_first};
  const int64_t n = xn.size(0);
  for (int64_t c = 0; c <= chunks; ++c) call.bounds.push_back(c * n / chunks);
  std::vector<at::Tensor> params = w.w_in;
  params.insert(params.end(), w.w_out.begin(), w.w_out.end());
  variable_list out = RangedMoe::apply(xn, probs, at::TensorList(params), &call);
  return Combined{out[0], out[1]};
}

}  // namespace memfine
