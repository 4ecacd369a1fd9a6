#include "core/workload/ep_rank.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <numeric>

#include "core/util/tensors.h"
#include "core/workload/workload.h"

namespace memfine {

namespace {
// Every tensor an emulated rank holds (undefined ones included), const or mutable.
template <class R, class F>
void each_tensor(R& r, F f) {
  for (auto* t : {&r.peer_inputs, &r.peer_grads, &r.remote_outputs}) f(*t);
  for (auto& l : r.layers)
    for (auto* t : {&l.own_experts, &l.own_key, &l.peer_pos, &l.peer_rank, &l.peer_expert, &l.peer_key, &l.peer_score})
      f(*t);
}
}  // namespace

int64_t EmulatedRank::input_bytes() const {
  if (counts_only()) return counted_input_bytes;
  int64_t n = table_bytes;
  each_tensor(*this, [&](const at::Tensor& t) {
    if (t.defined()) n += t.nbytes();
  });
  return n;
}

EmulatedRank EmulatedRank::clone() const {
  EmulatedRank r = *this;
  each_tensor(r, [](at::Tensor& t) {
    if (t.defined()) t = t.detach().clone().requires_grad_(t.requires_grad());
  });
  return r;
}

at::Tensor global_routing(const ExperimentConfig& c, int64_t layer, int64_t step) {
  const uint64_t seed =
      mix_seed(c.seed, 5000 + uint64_t(layer) + (c.workload.schedule == "none" ? 0 : 100003 * uint64_t(step)));
  const auto counts = expert_counts(c.workload, c.model, c.ep, layer, c.seed, step);
  return assign_experts(counts, c.ep * c.model.tokens(), c.model.topk, seed);
}

RankRouting rank_routing(const at::Tensor& ids, const ExperimentConfig& c, int64_t rank, int64_t layer) {
  RankRouting r;
  const int64_t T = c.model.tokens(), k = c.model.topk;
  r.rank = rank;
  r.ep = c.ep;
  r.local_experts = c.model.experts / c.ep;
  r.first_expert = rank * r.local_experts;
  r.own_experts = ids.narrow(0, rank * T, T).contiguous();
  const uint64_t salt = mix_seed(c.seed, 9000 + uint64_t(layer));
  // Keys: a hash of (sending rank, position, slot), so a row's seeded data does not depend on
  // how the tokens are chunked.
  auto key_of = [&](int64_t rk, int64_t pos, int64_t slot) {
    return int64_t(mix_seed(salt, uint64_t((rk * T + pos) * k + slot)) % uint64_t(EmulatedRank::kTableRows));
  };
  r.own_key = at::empty({T, k}, at::kLong);
  auto ok = r.own_key.accessor<int64_t, 2>();
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < k; ++j) ok[t][j] = key_of(rank, t, j);
  std::vector<int64_t> pos, rk, ex, key;
  std::vector<double> score;
  auto acc = ids.accessor<int64_t, 2>();
  r.expert_rows.assign(size_t(r.local_experts), 0);
  for (int64_t src = 0; src < c.ep; ++src) {
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t j = 0; j < k; ++j) {
        const int64_t e = acc[src * T + t][j] - r.first_expert;
        if (e < 0 || e >= r.local_experts) continue;
        ++r.expert_rows[size_t(e)];
        if (src == rank) continue;
        pos.push_back(t), rk.push_back(src), ex.push_back(e), key.push_back(key_of(src, t, j));
        // A deterministic stand-in for the sender's router probability (drop policy "probs").
        score.push_back(double(mix_seed(salt ^ 0x5bd1e995, uint64_t((src * T + t) * k + j)) >> 11) /
                        9007199254740992.0);
      }
    }
  }
  auto to_long = [](const std::vector<int64_t>& v) { return at::tensor(v, at::kLong); };
  r.peer_pos = to_long(pos), r.peer_rank = to_long(rk), r.peer_expert = to_long(ex), r.peer_key = to_long(key);
  r.peer_score = at::tensor(score, at::kDouble);
  r.tokens_received = std::accumulate(r.expert_rows.begin(), r.expert_rows.end(), int64_t(0));
  // Balanced: every rank sends T*k rows spread evenly over the ep ranks, so each receives T*k.
  r.overload_factor = double(r.tokens_received) / double(T * k);
  return r;
}

int64_t hottest_rank(const ExperimentConfig& c) {
  std::vector<int64_t> recv(size_t(c.ep), 0);
  const int64_t El = c.model.experts / c.ep;
  // With a schedule: the hottest at its peak step.
  const int64_t step = c.workload.schedule == "none" ? 0 : int64_t(c.workload.peak_step);
  for (int64_t l = 0; l < c.model.layers; ++l) {
    at::Tensor per_rank = at::bincount(global_routing(c, l, step).flatten().div(El, "floor"), {}, c.ep);
    for (int64_t r = 0; r < c.ep; ++r) recv[r] += per_rank[r].item<int64_t>();
  }
  return int64_t(std::max_element(recv.begin(), recv.end()) - recv.begin());
}

namespace {

// Rank `rank`'s view of a layer from its experts' counts: its own tokens send each expert 1/ep of
// its assignments (the workload spreads every expert's over all ranks' tokens), its peers the rest.
RankRouting counts_routing(std::vector<int64_t> counts, const ExperimentConfig& c, int64_t rank) {
  RankRouting r;
  const int64_t T = c.model.tokens(), k = c.model.topk;
  r.rank = rank, r.ep = c.ep;
  r.local_experts = c.model.experts / c.ep;
  r.first_expert = rank * r.local_experts;
  int64_t own_local = 0, own_all = 0;
  for (int64_t e = 0; e < c.model.experts; ++e) {
    own_all += counts[size_t(e)] / c.ep;
    if (e >= r.first_expert && e < r.first_expert + r.local_experts) {
      r.expert_rows.push_back(counts[size_t(e)]);
      own_local += counts[size_t(e)] / c.ep;
    }
  }
  r.tokens_received = std::accumulate(r.expert_rows.begin(), r.expert_rows.end(), int64_t(0));
  r.remote_rows = own_all - own_local;
  r.overload_factor = double(r.tokens_received) / double(T * k);
  r.expert_counts = std::move(counts);
  return r;
}

// The bytes a token-level rank holds for `r` (core/workload/ep_rank.cpp's tensors): its tokens'
// expert ids and table keys, and five values per row from a peer.
int64_t routing_bytes(const RankRouting& r, const ExperimentConfig& c) {
  int64_t own_local = 0;
  for (int64_t n : r.expert_rows) own_local += n / c.ep;
  return 16 * c.model.tokens() * c.model.topk + 40 * (r.tokens_received - own_local);
}

void route_counts(EmulatedRank& er, const ExperimentConfig& c, int64_t step) {
  int64_t bytes = 3 * EmulatedRank::kTableRows * c.model.hidden * int64_t(c10::elementSize(dtype_of(c.dtype)));
  for (int64_t l = 0; l < c.model.layers; ++l) {
    er.layers[size_t(l)] = counts_routing(expert_counts(c.workload, c.model, c.ep, l, c.seed, step), c, er.rank);
    bytes += routing_bytes(er.layers[size_t(l)], c);
  }
  er.counted_input_bytes = bytes;
}

}  // namespace

EmulatedRank make_counts_rank(const ExperimentConfig& c, int64_t rank, int64_t step) {
  EmulatedRank er;
  er.layers.resize(size_t(c.model.layers));
  if (rank < 0) {  // the hottest by counts, at the schedule's peak as make_emulated_rank chooses
    const int64_t at = c.workload.schedule == "none" ? 0 : int64_t(c.workload.peak_step);
    const int64_t El = c.model.experts / c.ep;
    std::vector<int64_t> recv(size_t(c.ep), 0);
    for (int64_t l = 0; l < c.model.layers; ++l) {
      const auto counts = expert_counts(c.workload, c.model, c.ep, l, c.seed, at);
      for (int64_t e = 0; e < c.model.experts; ++e) recv[size_t(e / El)] += counts[size_t(e)];
    }
    rank = int64_t(std::max_element(recv.begin(), recv.end()) - recv.begin());
  }
  er.rank = rank;
  route_counts(er, c, step);
  return er;
}

void route_step(EmulatedRank& er, const ExperimentConfig& c, int64_t step) {
  if (c.workload.schedule == "none" || c.workload.kind == "router") return;
  if (er.counts_only()) return route_counts(er, c, step);
  for (int64_t l = 0; l < c.model.layers; ++l)
    er.layers[size_t(l)] = rank_routing(global_routing(c, l, step), c, er.rank, l);
}

EmulatedRank make_emulated_rank(const ExperimentConfig& c, int64_t rank, int64_t step, bool tables) {
  EmulatedRank er;
  if (c.workload.kind == "router") {
    // The router decides at run time. One process holds every expert; real ranks (training
    // under memfine launch) hold E/ep each and exchange rows through all-to-all.
    er.rank = c.ep > 1 ? std::max<int64_t>(rank, 0) : 0;
    for (int64_t l = 0; l < c.model.layers; ++l) {
      RankRouting r;
      r.rank = er.rank, r.ep = c.ep;
      r.local_experts = c.model.experts / c.ep;
      r.first_expert = er.rank * r.local_experts;
      r.own_key = at::zeros({c.model.tokens(), c.model.topk}, at::kLong);
      r.peer_pos = r.peer_rank = r.peer_expert = r.peer_key = at::zeros({0}, at::kLong);
      r.peer_score = at::zeros({0}, at::kDouble);
      r.tokens_received = c.model.tokens() * c.model.topk;
      r.remote_rows = r.tokens_received * (c.ep - 1) / c.ep;
      // Not known before the router runs: planned as if balanced.
      for (int64_t e = 0; e < r.local_experts; ++e)
        r.expert_rows.push_back((e + 1) * r.tokens_received / r.local_experts -
                                e * r.tokens_received / r.local_experts);
      er.layers.push_back(r);
    }
  } else {
    er.rank = rank < 0 ? hottest_rank(c) : rank;
    for (int64_t l = 0; l < c.model.layers; ++l)
      er.layers.push_back(rank_routing(global_routing(c, l, step), c, er.rank, l));
  }
  if (!tables) {
    er.table_bytes = 3 * EmulatedRank::kTableRows * c.model.hidden * int64_t(c10::elementSize(dtype_of(c.dtype)));
    return er;
  }
  const auto opt = tensor_options(c.device, c.dtype);
  auto table = [&](uint64_t what, double scale) {
    at::Generator gen = at::detail::createCPUGenerator(mix_seed(c.seed, what));
    return (at::randn({EmulatedRank::kTableRows, c.model.hidden}, gen, at::TensorOptions().dtype(at::kDouble)) * scale)
        .to(opt);
  };
  er.peer_inputs = table(31, 1.0);
  er.peer_grads = table(32, 1.0);
  er.remote_outputs = table(33, 0.1);
  return er;
}

}  // namespace memfine
