#include "core/predict/memory_model.h"

#include <torch/version.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

#include "core/model/model.h"
#include "core/moe/capacity.h"

namespace memfine {

namespace {

// Rows of one MoE call (a token range of a layer) per local expert.
struct MoeRows {
  std::vector<int64_t> own, peer;  // per local expert
  std::vector<int64_t> pad;        // per local expert: zero rows padding its input (capacity)
  int64_t remote = 0;              // own assignments sent to other ranks
  int64_t tokens = 0;
};

// A layer's peer rows ordered by the sender's token position, so that a token range (a chunk)
// finds its own without reading every row.
struct PeerIndex {
  std::vector<int64_t> pos, expert;
};
PeerIndex peer_index(const RankRouting& r) {
  PeerIndex ix;
  if (!r.peer_pos.defined() || r.peer_pos.numel() == 0) return ix;
  const at::Tensor order = r.peer_pos.argsort();
  const at::Tensor pos = r.peer_pos.index_select(0, order).contiguous(),
                   ex = r.peer_expert.index_select(0, order).contiguous();
  ix.pos.assign(pos.data_ptr<int64_t>(), pos.data_ptr<int64_t>() + pos.numel());
  ix.expert.assign(ex.data_ptr<int64_t>(), ex.data_ptr<int64_t>() + ex.numel());
  return ix;
}

// Under capacity capping (`cap` >= 0, whole layers only) each sending rank keeps at most `cap`
// assignments per expert, and `pad_rows` pads every expert's input. `peers`: the layer's index.
MoeRows moe_rows(const RankRouting& r, int64_t topk, int64_t tokens, int64_t begin, int64_t end, int64_t cap = -1,
                 int64_t pad_rows = 0, const PeerIndex* peers = nullptr) {
  MoeRows m;
  m.tokens = end - begin;
  m.own.assign(size_t(r.local_experts), 0);
  m.peer.assign(size_t(r.local_experts), 0);
  m.pad.assign(size_t(r.local_experts), 0);
  if (!r.expert_counts.empty()) {
    // Counts only (make_counts_rank): every sender sends an expert 1/ep of its assignments, each
    // capped at `cap` under capacity; a token range takes its share of every sender's.
    auto share = [&](int64_t n) { return n * (end - begin) / tokens; };
    for (int64_t e = 0; e < r.ep * r.local_experts; ++e) {
      const int64_t from_each = r.expert_counts[size_t(e)] / r.ep;
      const int64_t own = cap >= 0 ? std::min(from_each, cap) : from_each, local = e - r.first_expert;
      if (local >= 0 && local < r.local_experts) {
        m.own[size_t(local)] = share(own);
        m.peer[size_t(local)] = share(cap >= 0 ? (r.ep - 1) * own : r.expert_counts[size_t(e)] - from_each);
      } else {
        m.remote += share(own);
      }
    }
    for (int64_t e = 0; e < r.local_experts; ++e)
      m.pad[size_t(e)] = std::max<int64_t>(pad_rows - m.own[size_t(e)] - m.peer[size_t(e)], 0);
    return m;
  }
  if (cap >= 0) {
    if (r.own_experts.defined()) {
      // Own assignments per expert of every rank, capped.
      std::vector<int64_t> per_expert(size_t(r.local_experts * r.ep), 0);
      auto ids = r.own_experts.accessor<int64_t, 2>();
      for (int64_t t = begin; t < end; ++t)
        for (int64_t j = 0; j < topk; ++j) ++per_expert[size_t(ids[t][j])];
      for (size_t e = 0; e < per_expert.size(); ++e) {
        const int64_t kept = std::min(per_expert[e], cap), local = int64_t(e) - r.first_expert;
        if (local >= 0 && local < r.local_experts)
          m.own[size_t(local)] = kept;
        else
          m.remote += kept;
      }
      // Each peer caps what it sends to each of this rank's experts.
      std::map<std::pair<int64_t, int64_t>, int64_t> from_peer;
      auto pr = r.peer_rank.accessor<int64_t, 1>();
      auto ex = r.peer_expert.accessor<int64_t, 1>();
      for (int64_t i = 0; i < r.peer_rank.numel(); ++i) ++from_peer[{pr[i], ex[i]}];
      for (const auto& [key, n] : from_peer) m.peer[size_t(key.second)] += std::min(n, cap);
    } else {
      const MoeRows all = moe_rows(r, topk, tokens, begin, end);
      for (int64_t e = 0; e < r.local_experts; ++e) m.own[size_t(e)] = std::min(all.own[size_t(e)], cap);
    }
    for (int64_t e = 0; e < r.local_experts; ++e)
      m.pad[size_t(e)] = std::max<int64_t>(pad_rows - m.own[size_t(e)] - m.peer[size_t(e)], 0);
    return m;
  }
  if (!r.own_experts.defined()) {
    // The router decides: each local expert's rows as RankRouting says (a balanced estimate, or the
    // counts once the router has run), a token range taking its share of every sender's.
    for (int64_t e = 0; e < r.local_experts; ++e)
      m.own[size_t(e)] = r.expert_rows.empty() ? (end - begin) * topk / r.local_experts
                                               : r.expert_rows[size_t(e)] * (end - begin) / tokens;
    m.remote = r.remote_rows * (end - begin) / tokens;
    return m;
  }
  auto ids = r.own_experts.accessor<int64_t, 2>();
  for (int64_t t = begin; t < end; ++t)
    for (int64_t j = 0; j < topk; ++j) {
      const int64_t e = ids[t][j] - r.first_expert;
      if (e >= 0 && e < r.local_experts)
        ++m.own[size_t(e)];
      else
        ++m.remote;
    }
  if (peers) {
    const auto first = std::lower_bound(peers->pos.begin(), peers->pos.end(), begin) - peers->pos.begin();
    const auto last = std::lower_bound(peers->pos.begin(), peers->pos.end(), end) - peers->pos.begin();
    for (auto i = first; i < last; ++i) ++m.peer[size_t(peers->expert[size_t(i)])];
    return m;
  }
  auto pos = r.peer_pos.accessor<int64_t, 1>();
  auto ex = r.peer_expert.accessor<int64_t, 1>();
  for (int64_t i = 0; i < r.peer_pos.numel(); ++i)
    if (pos[i] >= begin && pos[i] < end) ++m.peer[size_t(ex[i])];
  return m;
}

// Bytes the stages of one layer keep for backward, from the tensors autograd saves in this code.
struct Sizes {
  double E;  // bytes per element
  double T, h, g, gs, experts, heads_dim, b, H, s, k;
  bool attention;
  bool act_recomputed = false;  // experts keep z = [a | b], not SiLU(a) and SiLU(a) * b
  bool buffer_free = false;     // experts keep z (and SiLU(a) * b with keep_act), no rows of width h
  bool keep_act = false;
  int64_t block_rows = 256;
  bool a2a = false;  // real ranks, ATen experts: rows move through the all-to-all (moe_stored_a2a)
  double expert_g() const {
    return buffer_free ? (keep_act ? 3 : 2) : act_recomputed ? 2 : 4;
  }  // stored widths of g per row
};

// Buffer-free experts (core/moe/buffer_free.h): each keeps z (and the product with keep_act) and
// its row indices; the router probabilities of the range are kept once (`whole`: the MoE's own;
// in a chunk they are a slice of what the chunked MoE keeps). The remote experts' rows are added
// in place from their table: only their weights and indices stay.
double moe_stored_buffer_free(const Sizes& z, const MoeRows& m, bool whole) {
  double bytes = whole ? z.E * double(m.tokens) * z.k : 0;
  for (size_t e = 0; e < m.own.size(); ++e) {
    const double own = double(m.own[e]), rows = own + double(m.peer[e]);
    if (rows == 0) continue;
    bytes += z.E * rows * z.expert_g() * z.g + 8 * (rows + own);
  }
  return bytes + (z.E + 24) * double(m.remote);
}

// Its backward, experts in reverse order, one in flight, each in blocks of rows: the expert's
// input gradient exists for the whole of it (its weight gradients go straight into .grad); a block holds the rows'
// output gradient, the product (unless kept) and its gradient, then z's gradient with the rows' input gradient or the
// rows read again. The expert's z is released after it.
double moe_backward_peak_buffer_free(const Sizes& z, const MoeRows& m, double stored) {
  double peak = stored, cur = stored;
  const double tokens_grad = z.E * double(m.tokens) * z.h;
  const double probs_grad = z.E * double(m.tokens) * z.k;
  bool first = true;
  for (size_t i = m.own.size(); i-- > 0;) {
    const double rows = double(m.own[i] + m.peer[i]);
    if (rows == 0) continue;
    const double n = std::min(rows, double(z.block_rows)), bg = z.E * n * z.g, bh = z.E * n * z.h;
    const double block = std::max({bh + (z.keep_act ? 1 : 2) * bg, 3 * bg, 2 * bg + bh});
    const double accumulated = first ? 0 : tokens_grad;
    peak = std::max(peak, cur + accumulated + tokens_grad + probs_grad + block);
    cur -= z.E * rows * z.expert_g() * z.g;
    if (first) cur += tokens_grad, first = false;
  }
  return peak;
}

// The routing indices of a range that its MoE's graph keeps (what moe_stored counts): per own row
// its slot and token, per peer row its table row, per remote assignment its slot and token.
double saved_index_bytes(const MoeRows& m) {
  double bytes = 16 * double(m.remote);
  for (size_t e = 0; e < m.own.size(); ++e) bytes += 8 * (2 * double(m.own[e]) + double(m.peer[e]));
  return bytes;
}

// Real ranks (core/moe/alltoall.cpp): a range sends every kept assignment of its tokens (S rows,
// its own experts' included) and receives R rows for its experts.
double rows_sent(const MoeRows& m) {
  double s = double(m.remote);
  for (int64_t n : m.own) s += double(n);
  return s;
}
double rows_received(const MoeRows& m) {
  double r = 0;
  for (size_t e = 0; e < m.own.size(); ++e) r += double(m.own[e] + m.peer[e]);
  return r;
}

// What a real rank's MoE keeps: the arrived rows grouped by expert (the experts' inputs are views
// of them), each expert's activations, their concatenated outputs (kept by the index_add that
// un-groups them: its backward reads the source), the rows that came back and their probabilities
// (kept by the weighting), the weighted rows (kept by the index_add into token order), and the
// indices (tokens and slots of the sent rows, the grouping of the arrived ones).
double moe_stored_a2a(const Sizes& z, const MoeRows& m) {
  const double R = rows_received(m), S = rows_sent(m);
  return z.E * (R * (2 * z.h + z.expert_g() * z.g) + 2 * S * z.h + S) + 8 * (2 * S + R);
}

// Its backward: the weighted rows' gradient, then the weighting's (the returned rows' gradient and
// the product for the probabilities'), back through the all-to-all and un-grouped into all arrived
// rows; each expert's output gradient is a view of that, so it stays until the last expert is
// done. Each expert's input gradient is a slice whose backward fills a zeroed buffer of every
// arrived row, added to the one accumulated; then the grouping's, the all-to-all's and the token
// order's.
double moe_backward_peak_a2a(const Sizes& z, const MoeRows& m, double stored) {
  const double R = rows_received(m), S = rows_sent(m), Rh = z.E * R * z.h, Sh = z.E * S * z.h;
  const double tokens_grad = z.E * double(m.tokens) * z.h;
  // The forward (or the recomputation this backward follows) holds the sent rows and the arrived
  // ones until the range returns. Un-grouping the outputs holds, besides, the experts' outputs, a
  // zeroed buffer and its copy (before anything is sent back); at the end, the un-grouped outputs.
  double peak = std::max(stored - Sh + 4 * Rh, stored + Sh + 2 * Rh);
  peak = std::max(peak, stored + Sh);  // the weighted rows' gradient (they are released)
  double cur = stored;
  peak = std::max(peak, cur + 2 * Sh);  // the returned rows' gradient, the probabilities' product
  cur -= Sh;                            // the returned rows and the weighted rows' gradient released
  peak = std::max(peak, cur + Rh);      // through the all-to-all
  cur += Rh - Sh;
  peak = std::max(peak, cur + Rh);  // un-grouped: the outputs' gradient; the outputs released
  cur -= Rh;
  bool first = true;
  for (size_t i = m.own.size(); i-- > 0;) {
    const double rows = double(m.own[i] + m.peer[i]);
    if (rows == 0) continue;
    const double rg = z.E * rows * z.g, rh = z.E * rows * z.h;
    const double first_gemm = cur - (z.expert_g() - 2) * rg + 2 * z.E * z.g * z.h;
    peak = std::max({peak, cur + (z.act_recomputed ? 3 : 1) * rg + z.E * z.g * z.h, cur + 2 * rg, first_gemm});
    cur -= z.E * rows * z.expert_g() * z.g;
    peak = std::max(peak, cur + rh + Rh + (first ? 0 : Rh));
    if (first) cur += Rh, first = false;
  }
  cur -= 2 * Rh;                    // the grouped rows and their outputs' gradient
  peak = std::max(peak, cur + Rh);  // the arrived rows' gradient
  peak = std::max(peak, cur + Sh);  // the sent rows', through the all-to-all
  cur += Sh - Rh;
  return std::max(peak, cur + 2 * tokens_grad);  // into token order, beside the one accumulated
}

// MoE (dispatch -> experts -> combine) with activations stored: what stays until backward.
// Per expert: its input rows, gate|up (2g), silu(gate) (g), silu*up (g); where it has own rows,
// its output (kept by the probability weighting), the weighted rows (kept by index_add) and the
// gathered probabilities; index tensors. Remote rows: what arrived and its weighted copy.
double moe_stored(const Sizes& z, const MoeRows& m, bool whole = true) {
  if (z.buffer_free) return moe_stored_buffer_free(z, m, whole);
  if (z.a2a) return moe_stored_a2a(z, m);
  double bytes = 0;
  for (size_t e = 0; e < m.own.size(); ++e) {
    const double own = double(m.own[e]), rows = own + double(m.peer[e]) + double(m.pad[e]);
    if (rows == 0) continue;
    bytes += z.E * rows * (z.h + z.expert_g() * z.g);
    if (own > 0) bytes += z.E * (rows * z.h + own * z.h + own);
  }
  return bytes + z.E * (2 * double(m.remote) * z.h + double(m.remote)) + saved_index_bytes(m);
}

// Peak of the MoE's backward on top of `stored` (everything alive when it starts). Autograd
// runs combine's backward for every expert first (it was recorded last): each expert's output
// is replaced by its gradient and the weighted rows are freed, with one expert's gradients in
// flight at a time. The experts then run in reverse order, each peaking in its down
// projection's backward (gradient of silu*up and of the weight) or in the product's backward
// (two gradients of width g), and scattering its input gradient back to token order.
double moe_backward_peak(const Sizes& z, const MoeRows& m, double stored) {
  if (z.buffer_free) return moe_backward_peak_buffer_free(z, m, stored);
  if (z.a2a) return moe_backward_peak_a2a(z, m, stored);
  double freed_by_combine = z.E * 2 * double(m.remote) * z.h, in_flight = 0;
  for (size_t e = 0; e < m.own.size(); ++e) {
    const double own = double(m.own[e]), rows = own + double(m.peer[e]) + double(m.pad[e]);
    if (rows == 0) continue;
    if (own > 0) freed_by_combine += z.E * own * z.h;
    in_flight = std::max(in_flight, z.E * (rows + own) * z.h);
  }
  double peak = stored + in_flight;
  double cur = stored - freed_by_combine;
  const double tokens_grad = z.E * double(m.tokens) * z.h;  // gradient of the MoE input, accumulated
  bool first = true;
  for (size_t i = m.own.size(); i-- > 0;) {
    const double rows = double(m.own[i] + m.peer[i] + m.pad[i]);
    if (rows == 0) continue;
    const double rg = z.E * rows * z.g, rh = z.E * rows * z.h;
    // The first projection's backward makes its input's gradient and its weight's [h, 2g] one
    // (added into .grad, then freed) beside z's gradient, once the output gradient and the
    // activation's saved tensors are gone: at large ffn widths the expert's largest transient.
    const double first_gemm = cur - (z.expert_g() - 2) * rg + 2 * z.E * z.g * z.h;
    if (z.act_recomputed)
      // The down projection's backward recomputes the product (freed once the weight's gradient
      // exists), then holds the product's gradient and z's, with the weight's.
      peak = std::max({peak, cur + 3 * rg + z.E * z.g * z.h, cur - rh + 2 * rg, first_gemm});
    else
      peak = std::max({peak, cur + rg + z.E * z.g * z.h, cur - rh + 2 * rg, first_gemm});
    cur -= z.E * rows * (z.h + z.expert_g() * z.g) + rh;  // its stored rows and its output gradient
    // Its input gradient is scattered back to token order (a zero-filled [tokens, hidden]) and
    // added to the accumulated one.
    peak = std::max(peak, cur + rh + tokens_grad + (first ? 0 : tokens_grad));
    if (first) cur += tokens_grad, first = false;
  }
  return peak;
}

// RMSNorm's mean of squares: LibTorch 1.13's mean over a dimension keeps its input (the squares,
// one [tokens, hidden] tensor) for backward; 2.x keeps only the sizes (MeanBackward1 in the
// generated autograd headers of 2.6 and 2.14; 2.0 as the cut is assumed, not checked).
constexpr double kNormKeptWithGrad = TORCH_VERSION_MAJOR < 2 ? 3 : 2;

// What a layer keeps outside the MoE, by stage. RMSNorm keeps 2 [tokens, hidden] tensors (its
// output included) when its input needs no gradient; when it does, a [tokens] one besides and,
// on LibTorch 1.13, the squares; only the first layer's input needs none.
struct Outside {
  double norm1 = 0, attention = 0, h1 = 0, norm2 = 0, router = 0, shared = 0, output = 0;
  double total() const { return norm1 + attention + h1 + norm2 + router + shared + output; }
};

Outside outside_moe(const Sizes& z, bool input_needs_grad) {
  const double act = z.E * z.T * z.h;
  auto norm = [&](bool needs_grad) { return needs_grad ? kNormKeptWithGrad * act + z.E * z.T : 2 * act; };
  Outside o;
  if (z.attention) {
    o.norm1 = norm(input_needs_grad);
    // q, k, v and the attention context as contiguous copies, the softmax output, the causal mask.
    o.attention = z.E * (4 * z.T * z.heads_dim + z.b * z.H * z.s * z.s) + z.s * z.s;
    o.h1 = act;
  }
  o.norm2 = norm(z.attention || input_needs_grad);
  o.router = z.E * z.T * z.experts;
  o.shared = z.E * 4 * z.gs * z.T;
  o.output = act;
  return o;
}

// Activation offloading (core/strategy/offload.h): the storages autograd saves inside each chosen
// module of a layer, as this code saves them; each leaves the device when it is saved (at least
// `min_bytes`) and counts once, however many views of it are saved. `prev` is the part that the
// layer's input is: the layer below's output, which this model counts as that layer's.
struct OffloadedBytes {
  double own = 0, prev = 0;
  double total() const { return own + prev; }
};
OffloadedBytes offloaded_bytes(const Sizes& z, const StrategyShape& sl, const MoeRows& m, bool input_needs_grad) {
  const OffloadSpec& spec = sl.offload;
  OffloadedBytes b;
  if (sl.recompute_layer) return b;  // its forward keeps nothing but its input
  auto add = [&](double bytes, double* to) {
    if (bytes > 0 && bytes >= double(spec.min_bytes)) *to += bytes;
  };
  const double act = z.E * z.T * z.h, r = z.E * z.T, hd = z.E * z.T * z.heads_dim;
  const bool squares = kNormKeptWithGrad > 2;
  // An RMSNorm keeps its input, the squares (LibTorch 1.13), x * rsqrt(..) and the rsqrt when its
  // input needs a gradient; x * rsqrt(..) alone when it does not (its output is the next module's).
  auto norm = [&](bool needs_grad, double* input_to) {
    add(act, &b.own);  // x * rsqrt(..)
    if (!needs_grad) return;
    add(act, input_to);
    if (squares) add(act, &b.own);
    add(r, &b.own);
  };
  if (z.attention) {
    if (spec.has(Module::AttnNorm)) norm(input_needs_grad, &b.prev);
    if (spec.has(Module::QkvLinear)) add(act, &b.own);  // the norm's output, read by q, k and v
    if (spec.has(Module::CoreAttn)) {
      for (int i = 0; i < 3; ++i) add(hd, &b.own);  // q, k and v as contiguous copies
      add(z.E * z.b * z.H * z.s * z.s, &b.own);     // the softmax output
      add(z.s * z.s, &b.own);                       // the causal mask
    }
    if (spec.has(Module::AttnProj)) add(hd, &b.own);  // the context as a contiguous copy
  }
  if (spec.has(Module::MlpNorm)) norm(z.attention || input_needs_grad, z.attention ? &b.own : &b.prev);
  // The routed experts, where a pass keeps them (a chunked MoE is recomputed: nothing kept).
  if (sl.moe == MoeMode::Stored && !z.buffer_free) {
    const bool fc1 = spec.has(Module::ExpertFc1), act_ = spec.has(Module::MoeAct), fc2 = spec.has(Module::ExpertFc2);
    if (z.a2a && fc1) add(z.E * rows_received(m) * z.h, &b.own);  // every expert's input: one buffer
    for (size_t e = 0; e < m.own.size(); ++e) {
      const double rows = double(m.own[e] + m.peer[e] + m.pad[e]);
      if (rows == 0) continue;
      if (fc1 && !z.a2a) add(z.E * rows * z.h, &b.own);
      if (act_) {
        add(z.E * rows * 2 * z.g, &b.own);                     // z = [a | b]
        if (!z.act_recomputed) add(z.E * rows * z.g, &b.own);  // SiLU(a)
      }
      if (fc2 && !z.act_recomputed) add(z.E * rows * z.g, &b.own);  // SiLU(a) * b
    }
  }
  return b;
}

}  // namespace

Prediction predict_step(const ExperimentConfig& c, const EmulatedRank& rank, const StrategyShape& s,
                        const std::vector<int64_t>& chunks_per_layer) {
  const ModelConfig& m = c.model;
  Sizes z;
  z.E = double(c10::elementSize(dtype_of(c.dtype)));
  z.T = double(m.tokens()), z.h = double(m.hidden), z.g = double(m.ffn_hidden),
  z.gs = double(m.ffn_hidden * m.shared_experts);
  z.experts = double(m.experts), z.heads_dim = double(m.heads * m.head_dim), z.b = double(m.micro_batch);
  z.H = double(m.heads), z.s = double(m.seq), z.k = double(m.topk), z.attention = m.attention == "gqa";
  z.act_recomputed = s.experts == ExpertStorage::ActRecomputed;
  z.buffer_free = s.experts == ExpertStorage::BufferFree;
  z.keep_act = s.keep_act;
  z.block_rows = s.block_rows;
  z.a2a = rank.real && c.kernels != "fused" && !z.buffer_free;
  const int64_t L = m.layers, T = m.tokens();
  const double act = z.E * z.T * z.h;  // one [tokens, hidden] tensor

  Prediction p;
  p.static_bytes = int64_t(z.E) * (4 * parameter_count(m, c.ep) + 2 * T * m.hidden) + rank.input_bytes();

  std::vector<MoeRows> whole;
  const int64_t cap = s.capacity_factor > 0 ? capacity_per_expert(T, m.topk, m.experts, s.capacity_factor) : -1;
  const int64_t pad_rows = cap >= 0 && s.pad_to_capacity ? cap * c.ep : 0;
  for (int64_t l = 0; l < L; ++l) whole.push_back(moe_rows(rank.layers[size_t(l)], m.topk, T, 0, T, cap, pad_rows));
  // The loss: final RMSNorm (its input needs a gradient; its output is not kept) and the
  // difference to the target; its backward holds four [tokens, hidden] gradients at once.
  const double final_stored = kNormKeptWithGrad * act + z.E * z.T, final_backward = 4 * act;
  double peak = 0;
  int64_t current = -1;  // the layer whose backward is being considered; -1: the loss
  p.layer_peak.assign(size_t(L), 0);
  auto consider = [&](double bytes, const std::string& where) {
    if (bytes > peak) peak = bytes, p.phase = where;
    int64_t& slot = current < 0 ? p.loss_peak : p.layer_peak[size_t(current)];
    slot = std::max(slot, int64_t(bytes));
  };

  // Each layer's shape: a plan's 0 chunks is a layer stored whole, as the strategy that stores.
  std::vector<StrategyShape> shape(size_t(L), s);
  if (s.moe == MoeMode::Chunked && !chunks_per_layer.empty())
    for (int64_t l = 0; l < L; ++l) {
      StrategyShape& sl = shape[size_t(l)];
      sl.chunks = chunks_per_layer[size_t(l)];
      if (sl.chunks == 0) sl.recompute_layer = false, sl.moe = MoeMode::Stored;
    }
  // Bytes each layer keeps from its forward until its backward, under the strategy.
  std::vector<Outside> out(static_cast<size_t>(L));
  std::vector<double> resident(static_cast<size_t>(L));
  for (int64_t l = 0; l < L; ++l) {
    const StrategyShape& sl = shape[size_t(l)];
    out[size_t(l)] = outside_moe(z, l > 0);  // the first layer's input is data, without gradient
    if (sl.recompute_layer)
      resident[size_t(l)] = act;         // its output, saved as the next layer's input
    else if (sl.moe != MoeMode::Stored)  // recomputed as a block or chunk by chunk: the probabilities
      resident[size_t(l)] = out[size_t(l)].total() + z.E * z.T * z.k;
    else
      resident[size_t(l)] = out[size_t(l)].total() + moe_stored(z, whole[size_t(l)]);
  }
  // Offloading: each layer's group is off the device from its forward until backward reaches the
  // layer `prefetch` above it (the loss's backward comes before any).
  std::vector<OffloadedBytes> group(static_cast<size_t>(L) + 1);
  for (int64_t l = 0; l < L; ++l) {
    const StrategyShape& sl = shape[size_t(l)];
    if (!sl.offload.offloads(l, L)) continue;
    const OffloadedBytes ob = offloaded_bytes(z, sl, whole[size_t(l)], l > 0);
    group[size_t(l)] = ob;
    resident[size_t(l)] -= ob.own;
    if (l > 0) resident[size_t(l - 1)] -= ob.prev;
    p.host_bytes += int64_t(ob.total());
  }
  // While layer l's backward runs, the groups of the `prefetch` layers below are back, and its own
  // input (the layer below's output); besides, for what this model counts in the layer's own
  // (`kept`), its own group and the output the layer above offloaded.
  auto back_below = [&](int64_t l) {
    double b = group[size_t(l)].prev;
    for (int64_t g = std::max<int64_t>(0, l - s.offload.prefetch); g < l; ++g) b += group[size_t(g)].total();
    return b;
  };
  auto back_own = [&](int64_t l) { return group[size_t(l)].own + group[size_t(l) + 1].prev; };
  for (double r : resident) p.layer_kept.push_back(int64_t(r));
  double below = 0;
  for (int64_t l = 0; l < L; ++l) below += resident[size_t(l)];
  consider(below + final_stored + final_backward, "backward of the loss");
  for (int64_t l = L - 1; l >= 0; --l) {
    current = l;
    const StrategyShape& sl = shape[size_t(l)];  // this layer's
    below -= resident[size_t(l)];
    const double fetched_below = back_below(l);
    below += fetched_below;
    const Outside& o = out[size_t(l)];
    const std::string at = "backward of layer " + std::to_string(l);
    const double grad = act;  // gradient of the layer's output
    // Under recomputation, everything outside the MoE is kept again during the layer's backward;
    // the shared expert (recorded after the routed ones) has run its backward before the MoE's.
    // A recomputed layer's output is let go before its backward runs (only its graph is needed);
    // a stored layer's, once the layer above (or the loss) has run its backward, which read it.
    const double kept =
        (sl.recompute_layer ? o.total() - o.output : resident[size_t(l)] + back_own(l) - o.output) - o.shared;
    // Once the shared expert's backward has run, its input gradient waits for the MoE's to be
    // added to it (its weight gradients are in .grad already).
    const double shared_grads = o.shared == 0 ? 0 : act;
    if (o.shared > 0) {
      // The shared expert's backward comes first, with the whole layer still kept: two gradients
      // of its width, or one and its weight's.
      const double moe_kept = sl.recompute_layer && sl.moe == MoeMode::Stored ? moe_stored(z, whole[size_t(l)])
                              : sl.moe == MoeMode::Stored                     ? 0
                                                                              : z.E * z.T * z.k;
      const double rg = z.E * z.T * z.gs;
      consider(below + kept + o.shared + moe_kept + grad + std::max(2 * rg, rg + z.E * z.gs * z.h),
               at + ", shared expert");
    }
    if (sl.moe == MoeMode::Chunked) {
      // MoE in chunks: one chunk's stored bytes and transients at a time; weight gradients go
      // into the experts' .grad as they are produced.
      const int64_t chunks = sl.chunks;
      // With more than one chunk, the MoE's input and probability gradients are assembled in
      // layer-sized buffers, and every chunk's routing is made at once and held through the loop
      // (dispatch_indices: the saved indices and each remote assignment's table row), a chunk's
      // indices being views of it; with one, the chunk's are the layer's.
      const bool several = chunks > 1;
      const MoeRows& layer_rows = whole[size_t(l)];
      // Real ranks exchange each chunk's routing with the chunk: nothing is held for the layer.
      const bool held = several && !z.a2a;
      const double base = below + kept + shared_grads + grad + (several ? act + z.E * z.T * z.k : 0) +
                          (held ? saved_index_bytes(layer_rows) + 8 * double(layer_rows.remote) : 0);
      const RankRouting& rr = rank.layers[size_t(l)];
      auto chunk = [&](int64_t a, int64_t b, const PeerIndex* peers, const std::string& which) {
        const MoeRows r = moe_rows(rr, m.topk, T, a, b, -1, 0, peers);
        consider(moe_backward_peak(z, r, base + moe_stored(z, r, false) - (held ? saved_index_bytes(r) : 0)),
                 at + ", MoE chunk " + which);
      };
      if (rr.own_experts.defined()) {  // token-level routing: each chunk's own rows
        const PeerIndex peers = peer_index(rr);
        for (int64_t ci = 0; ci < chunks; ++ci) {
          const int64_t a = ci * T / chunks, b = (ci + 1) * T / chunks;
          if (a < b) chunk(a, b, &peers, std::to_string(ci));
        }
      } else {
        // Counts: a chunk takes its share of every expert's rows, so only its size matters: the
        // first chunk's (T / chunks tokens) and, where they differ, one more token.
        chunk(0, T / chunks, nullptr, "0");
        if (T % chunks && T / chunks + 1 <= T)
          chunk(0, T / chunks + 1, nullptr, "of " + std::to_string(T / chunks + 1) + " tokens");
      }
    } else {
      const double moe = sl.moe == MoeMode::Stored && !sl.recompute_layer ? 0 : moe_stored(z, whole[size_t(l)]);
      consider(moe_backward_peak(z, whole[size_t(l)], below + kept + shared_grads + grad + moe), at + ", MoE");
    }
    // Then attention's backward: the softmax's two [b, heads, s, s] gradients, with the
    // attention block's stored tensors still alive.
    if (z.attention)
      consider(below + o.norm1 + o.attention + act + 2 * z.E * z.b * z.H * z.s * z.s + z.s * z.s, at + ", attention");
    below -= fetched_below;
  }
  // Adam's step, once the activations are gone: one parameter-sized temporary (the denominator)
  // for the largest parameter. The peak when little else is kept.
  current = -1;
  const double widest = std::max({z.h * 2 * z.g, z.h * 2 * z.gs, z.h * z.experts, z.attention ? z.h * z.heads_dim : 0.0,
                                  z.attention ? z.h * double(m.kv_heads * m.head_dim) : 0.0});
  consider(z.E * widest, "optimizer step");
  p.activation_bytes = int64_t(peak);
  if (s.moe == MoeMode::Chunked)
    p.chunks = chunks_per_layer.empty() ? std::vector<int64_t>(size_t(L), s.chunks) : chunks_per_layer;
  return p;
}

}  // namespace memfine
