#include "core/strategy/memfine/mact.h"

#include <algorithm>
#include <numeric>

#include "core/dist/dist.h"
#include "core/predict/paper_model.h"
#include "core/util/format.h"
#include "core/util/out_of_memory.h"

namespace memfine {

int64_t first_fitting(const std::vector<int64_t>& bins, const std::function<bool(size_t)>& fits) {
  for (size_t i = 0; i < bins.size(); ++i)
    if (fits(i)) return int64_t(i);
  return -1;
}

StrategyShape Mact::chunked(int64_t chunks) const {
  StrategyShape s = o_.stored;
  s.recompute_layer = true;
  s.moe = MoeMode::Chunked;
  s.chunks = chunks;
  return s;
}

Prediction Mact::predict(const ExperimentConfig& c, const EmulatedRank& rank,
                         const std::vector<int64_t>& chosen) const {
  Prediction p = std::all_of(chosen.begin(), chosen.end(), [](int64_t v) { return v == 0; })
                     ? predict_step(c, rank, o_.stored)
                     : predict_step(c, rank, chunked(1), chosen);
  p.chunks = chosen;
  return p;
}

// Over learned routing a layer's rows are known only once its router has run, so each layer is
// planned then, for the rank receiving the most. A recomputed layer keeps only its output, so one
// layer's count does not change another's peak (every_bin): planning layer by layer is the whole
// plan. Storing a layer (store_when_fits) is decided before its router runs, so that, and
// objective: time, plan ahead from the balanced estimate.
bool Mact::plans_per_layer(const LayerInput& in) const {
  return o_.objective == Objective::Memory && !o_.store_when_fits && !in.rank->layers[size_t(in.layer)].own_experts.defined();
}

std::pair<int64_t, int64_t> Mact::plan_layer(const LayerInput& in, const MoeRouting& routing) const {
  const size_t l = size_t(in.layer);
  const RankRouting& rr = in.rank->layers[l];
  const int64_t ep = rr.ep, El = rr.local_experts;
  // sent[r][e]: rank r's assignments to expert e; every rank fills its row (notify). The routing is
  // on the host already: the counts are read there, with no operator (real ranks: one exchange).
  at::Tensor sent = at::zeros({ep, ep * El}, at::kLong);
  {
    const at::Tensor ids = routing.expert_ids.contiguous();
    const int64_t* id = ids.data_ptr<int64_t>();
    int64_t* mine = sent.data_ptr<int64_t>() + (in.dist ? in.dist->rank() : 0) * ep * El;
    for (int64_t i = 0; i < ids.numel(); ++i) ++mine[id[i]];
  }
  if (in.dist) in.dist->allreduce_sum(sent);
  const int64_t* s = sent.data_ptr<int64_t>();
  // The rank receiving the most rows, and its rows per expert.
  std::vector<int64_t> received(size_t(ep * El), 0);
  for (int64_t r = 0; r < ep; ++r)
    for (int64_t e = 0; e < ep * El; ++e) received[size_t(e)] += s[r * ep * El + e];
  int64_t hot = 0, most = -1;
  for (int64_t r = 0; r < ep; ++r) {
    const int64_t n = std::accumulate(received.begin() + r * El, received.begin() + (r + 1) * El, int64_t(0));
    if (n > most) most = n, hot = r;
  }
  EmulatedRank seen = *in.rank;
  RankRouting& r = seen.layers[l];
  r.tokens_received = most;
  r.expert_rows.assign(received.begin() + hot * El, received.begin() + (hot + 1) * El);
  const int64_t* from_hot = s + hot * ep * El;
  r.remote_rows = std::accumulate(from_hot, from_hot + ep * El, int64_t(0)) -
                  std::accumulate(from_hot + hot * El, from_hot + (hot + 1) * El, int64_t(0));
  const ExperimentConfig& c = *in.config;
  const int64_t chunks = plan(c, seen).chunks[l];
  // What the model expects of this layer's backward with that count, beside the meter's peak.
  const int64_t peak =
      predict_step(c, seen, chunked(chunks), std::vector<int64_t>(size_t(c.model.layers), chunks)).layer_peak[l];
  return {chunks, peak};
}

// Chooses a step's chunk count per layer (0 = store without recomputation).
Plan Mact::plan(const ExperimentConfig& c, const EmulatedRank& rank) const {
  const int64_t L = c.model.layers;
  Plan plan{std::vector<int64_t>(size_t(L), o_.bins.front())};
  if (o_.objective == Objective::Time) return plan_for_time(c, rank, predict_step(c, rank, o_.stored));
  if (c.budget < 0) {  // no budget: everything fits
    if (o_.store_when_fits) plan.chunks.assign(size_t(L), 0);
    return plan;
  }
  const Prediction all_stored = predict_step(c, rank, o_.stored);
  const int64_t room = activation_room(c, all_stored);
  if (o_.store_when_fits && all_stored.activation_bytes <= room) {
    plan.chunks.assign(size_t(L), 0);
    return plan;
  }
  if (o_.model == MactModel::Paper) {
    PaperModel pm;
    const ModelConfig& m = c.model;
    pm.D_t = double(c10::elementSize(dtype_of(c.dtype)));
    pm.b = double(m.micro_batch), pm.s = double(m.seq), pm.h = double(m.hidden), pm.a = double(m.heads);
    pm.h_d = double(m.head_dim), pm.k_a = double(m.kv_heads), pm.e_n = double(m.experts), pm.g_e = double(m.ffn_hidden);
    pm.static_bytes = double(all_stored.static_bytes), pm.device_bytes = double(c.budget);
    for (int64_t l = 0; l < L; ++l) {
      const int64_t need = rank.layers[size_t(l)].tokens_received;  // notify: rows to receive
      const int64_t i = first_fitting(o_.bins, [&](size_t b) { return pm.fits(double(need), double(o_.bins[b])); });
      if (i < 0)
        throw PlannedOutOfMemory("MACT (paper model): layer " + std::to_string(l) + " needs " +
                                 fmt_bytes(pm.activation(double(need), double(o_.bins.back()))) +
                                 " of activations even with " + std::to_string(o_.bins.back()) +
                                 " chunks; the budget " + fmt_bytes(double(c.budget)) + " leaves " +
                                 fmt_bytes(double(c.budget - all_stored.static_bytes)) + " after static " +
                                 fmt_bytes(double(all_stored.static_bytes)));
      plan.chunks[size_t(l)] = o_.bins[size_t(i)];
    }
    return plan;
  }
  const auto per_bin = every_bin(c, rank);
  for (int64_t l = 0; l < L; ++l) {
    const int64_t i = first_fitting(o_.bins, [&](size_t b) { return per_bin[b].layer_peak[size_t(l)] <= room; });
    if (i < 0) {
      const int64_t need = per_bin.back().layer_peak[size_t(l)];
      throw PlannedOutOfMemory(
          "MACT: layer " + std::to_string(l) + " needs " + fmt_bytes(double(need)) + " of activations even with " +
          std::to_string(o_.bins.back()) + " chunks; the budget " + fmt_bytes(double(c.budget)) + " leaves " +
          fmt_bytes(double(room)) + " after static " + fmt_bytes(double(all_stored.static_bytes)) + " and " +
          std::to_string(int(o_.headroom * 100)) + "% headroom (short by " + fmt_bytes(double(need - room)) + ")");
    }
    plan.chunks[size_t(l)] = o_.bins[size_t(i)];
  }
  return plan;
}

// objective: time: the plan of least predicted time (cost model) whose predicted peak fits: a
// knapsack over layers. Each layer is stored whole (0) or recomputed with one of the bins. A
// stored layer's activations stay until backward reaches it, so what layer l's backward peaks
// at is what the layers before it keep plus its own transient; the loss's backward sits on top
// of all of them. Those parts come from one prediction per option with every layer alike:
// layer l's transient is its peak less what the layers before it keep. Plans are grown layer
// by layer, keeping for each only those not beaten on both kept bytes and time (a Pareto
// front), and the chosen plan is predicted whole as a check.
Plan Mact::plan_for_time(const ExperimentConfig& c, const EmulatedRank& rank, const Prediction& all_stored) const {
  if (!cost_loaded_) cost_ = CostModel::load(c.cost_model), cost_loaded_ = true;
  const int64_t L = c.model.layers;
  const double room = c.budget < 0 ? 1e300 : double(activation_room(c, all_stored));
  std::vector<int64_t> options{0};
  options.insert(options.end(), o_.bins.begin(), o_.bins.end());
  struct Parts {
    std::vector<double> kept, transient, ms;
    double loss = 0;  // the loss's backward and the optimizer step, above what every layer keeps
  };
  const auto per_bin = every_bin(c, rank);
  std::vector<Parts> parts;
  for (size_t i = 0; i < options.size(); ++i) {
    const int64_t o = options[i];
    const Prediction& u = o == 0 ? all_stored : per_bin[i - 1];
    Parts pt;
    double below = 0;
    for (int64_t l = 0; l < L; ++l) {
      pt.kept.push_back(double(u.layer_kept[size_t(l)]));
      pt.transient.push_back(double(u.layer_peak[size_t(l)]) - below);
      pt.ms.push_back(cost_.layer_ms(c.model, rank.layers[size_t(l)].expert_rows, o));
      below += pt.kept.back();
    }
    pt.loss = double(u.loss_peak) - below;
    parts.push_back(std::move(pt));
  }
  struct Partial {
    double kept = 0, ms = 0;
    std::vector<int64_t> chunks;
  };
  std::vector<Partial> front{Partial{}};
  for (int64_t l = 0; l < L; ++l) {
    std::vector<Partial> next;
    for (const Partial& f : front)
      for (size_t i = 0; i < options.size(); ++i) {
        const Parts& pt = parts[i];
        if (f.kept + pt.transient[size_t(l)] > room) continue;
        Partial n = f;
        n.kept += pt.kept[size_t(l)], n.ms += pt.ms[size_t(l)];
        n.chunks.push_back(options[i]);
        next.push_back(std::move(n));
      }
    std::sort(next.begin(), next.end(),
              [](const Partial& a, const Partial& b) { return a.kept < b.kept || (a.kept == b.kept && a.ms < b.ms); });
    front.clear();
    for (auto& n : next)
      if (front.empty() || n.ms < front.back().ms) front.push_back(std::move(n));
    if (front.empty())
      throw PlannedOutOfMemory("MACT (objective: time): layer " + std::to_string(l) +
                               " fits the budget with none of the bins, whatever the layers before it keep");
  }
  const double loss = std::max_element(parts.begin(), parts.end(), [](const Parts& a, const Parts& b) {
                        return a.loss < b.loss;
                      })->loss;
  const Partial* best = nullptr;
  for (const Partial& f : front)
    if (f.kept + loss <= room && (!best || f.ms < best->ms)) best = &f;
  if (!best) throw PlannedOutOfMemory("MACT (objective: time): no plan leaves room for the loss's backward");
  // The parts are exact for plans whose layers are alike; a mixed plan is checked whole, and
  // where it would not fit, the most chunks everywhere is what memory allows.
  Plan plan{best->chunks, best->ms};
  if (c.budget >= 0 && double(predict(c, rank, plan.chunks).activation_bytes) > room) {
    plan.chunks.assign(size_t(L), o_.bins.back());
    plan.predicted_ms = 0;
    for (int64_t l = 0; l < L; ++l) plan.predicted_ms += parts.back().ms[size_t(l)];
  }
  return plan;
}

// The implementation model is within a few percent of the meter, so MACT keeps `headroom` of
// the activation room free rather than planning to the last byte.
int64_t Mact::activation_room(const ExperimentConfig& c, const Prediction& stored) const {
  return int64_t(double(c.budget - stored.static_bytes) * (1.0 - o_.headroom));
}

// The prediction with every layer at each bin, one per bin. A recomputed layer keeps only its
// output until its backward, so one layer's chunk count does not change another's peak: each
// layer's peak per bin is read off these.
std::vector<Prediction> Mact::every_bin(const ExperimentConfig& c, const EmulatedRank& rank) const {
  std::vector<Prediction> out;
  for (int64_t b : o_.bins)
    out.push_back(predict_step(c, rank, chunked(b), std::vector<int64_t>(size_t(c.model.layers), b)));
  return out;
}

}  // namespace memfine
