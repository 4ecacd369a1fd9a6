#include <algorithm>
#include <map>

#include "core/predict/step_bytes.h"

namespace memfine {

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

MoeRows moe_rows(const RankRouting& r, int64_t topk, int64_t tokens, int64_t begin, int64_t end, int64_t cap,
                 int64_t pad_rows, const PeerIndex* peers) {
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

}  // namespace memfine
