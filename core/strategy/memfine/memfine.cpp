// The `memfine` strategy. FCDA (chunked_moe.h) runs the MoE in token chunks; the rest of the layer
// is recomputed as in full_recompute, so memfine never stores more than full_recompute does.
//
// MACT (memory-aware chunk tuning, `chunks: auto`): before each step, for every layer, read the
// rows it will receive (the paper's "notify") and take the smallest bin whose predicted peak fits
// the budget, from the implementation model (default) or the paper's Eq. 8-9 (`model: paper`).
// With `store_when_fits: true` the step stores everything when the model says that fits.
// `objective: time` plans each step as a knapsack over layers (plan_for_time); `chunks: [..]`
// runs a fixed plan per layer (0: stored), e.g. one such a plan chose.
#include <algorithm>

#include "core/predict/cost_model.h"
#include "core/dist/dist.h"
#include "core/meter/memory_meter.h"
#include "core/moe/expert_storage.h"
#include "core/predict/memory_model.h"
#include "core/predict/paper_model.h"
#include "core/strategy/memfine/chunked_moe.h"
#include "core/strategy/strategy.h"

namespace memfine {
namespace {

using json = nlohmann::json;

// `chunks`: a count (>= 1), 'auto' (MACT), or a fixed plan with one count per layer (0: the layer
// stored whole).
Param chunks_param() {
  auto read = [](const YAML::Node& n) -> json {
    if (n.IsScalar() && n.Scalar() == "auto") return "auto";  // quoted or not (a record's JSON quotes it)
    if (n.IsSequence()) {
      json plan = json::array();
      for (const auto& item : n) {
        int64_t v = -1;
        try {
          v = read_int(item);
        } catch (const std::invalid_argument&) {
        }
        if (v < 0) throw std::invalid_argument("a per-layer list needs a count >= 0 for every layer (0: stored)");
        plan.push_back(v);
      }
      if (plan.empty()) throw std::invalid_argument("a per-layer list needs a count >= 0 for every layer (0: stored)");
      return plan;
    }
    int64_t v = 0;
    try {
      v = read_int(n);
    } catch (const std::invalid_argument&) {
      throw std::invalid_argument("expected a count >= 1, 'auto' or a list of counts per layer, got '" +
                                  label_value(yaml_to_json(n)) + "'");
    }
    if (v < 1) throw std::invalid_argument("must be 1 or more, or 'auto', got " + std::to_string(v));
    return v;
  };
  return named(Param{"chunks",
                     "number of token chunks, 'auto' (MACT: per layer and step, from the budget), or a list with one "
                     "count per layer, 0 storing that layer whole (a fixed plan)",
                     "an integer >= 1, 'auto' or a list of integers >= 0", read, 1});
}
bool tuned(const StrategySpec& spec) { return spec.value("chunks") == "auto"; }
bool per_layer(const StrategySpec& spec) { return spec.value("chunks").is_array(); }

// A step's choice: chunks per layer (0: stored without recomputation) and, under objective: time,
// the cost model's step time.
struct Plan {
  std::vector<int64_t> chunks;
  double predicted_ms = -1;
};

class MemFine : public Strategy {
 public:
  explicit MemFine(StrategySpec spec) : Strategy(std::move(spec)) {
    if (tuned(spec_)) chunks_ = 0;
    else if (per_layer(spec_)) chunks_ = 0, fixed_ = spec_.value("chunks").get<std::vector<int64_t>>();
    else chunks_ = spec_.value("chunks").get<int64_t>();
    bins_ = spec_.value("bins").get<std::vector<int64_t>>();
    model_ = spec_.value("model").get<std::string>();
    store_when_fits_ = spec_.value("store_when_fits").get<bool>();
    headroom_ = spec_.value("headroom").get<double>();
    objective_ = spec_.value("objective").get<std::string>();
    experts_ = parse_expert_storage(spec_.value("experts").get<std::string>());
    keep_act_ = spec_.value("keep_act").get<bool>();
    if (keep_act_ && experts_ != ExpertStorage::BufferFree) throw std::invalid_argument("keep_act applies to experts: buffer_free");
    if (bins_.empty() || !std::is_sorted(bins_.begin(), bins_.end()) ||
        std::adjacent_find(bins_.begin(), bins_.end()) != bins_.end())
      throw std::invalid_argument("bins must be a non-empty increasing list of chunk counts >= 1");
    // Shown parameters are those that differ from their defaults: MACT's, given with a fixed count.
    for (const char* k : {"bins", "model", "store_when_fits", "headroom", "objective"})
      if ((chunks_ > 0 || !fixed_.empty()) && spec_.shown.contains(k))
        throw std::invalid_argument(std::string(k) + " applies to chunks: auto");
  }

  // Chunking and how an expert keeps its activations are independent: inside every chunk (and in
  // a layer MACT stores) the experts run as `experts` says.
  ExpertPath expert() const override { return expert_path(experts_, keep_act_); }

  void begin_step(int64_t step) override {
    step_chunks_.clear();
    learned_peaks_.clear();
    step_ = step;
  }

  LayerOutput run_layer(const at::Tensor& x, const LayerInput& in) override {
    if (learned(in)) {
      // The router decides this layer's routing now: plan once it has (the paper's notify), then
      // run the chunks. Backward's recomputation reuses the count.
      const size_t l = size_t(in.layer);
      if (learned_chunks_.size() <= l) learned_chunks_.resize(l + 1, 0);
      learned_chunks_[l] = 0;
      MoeFn chunked = [this, in](const at::Tensor& xn, const at::Tensor& probs, const MoeRouting& routing,
                                 const LayerWeights& w) {
        int64_t& chunks = learned_chunks_[size_t(in.layer)];
        if (chunks == 0) chunks = plan_learned(in, routing);
        return chunked_moe(xn, probs, routing, w, chunks);
      };
      LayerOutput out = layer_recomputed(x, in, *this, chunked);
      step_chunks_.push_back(learned_chunks_[l]);
      return out;
    }
    if (chunks_ == 0 && in.layer == 0) {
      plan_ = fixed_.empty() ? plan(*in.config, *in.rank) : Plan{fixed_};
      if (in.dist) {
        // Every rank takes part in every chunk's all-to-all: agree on the largest need.
        at::Tensor agreed = in.dist->allreduce_max(at::tensor(plan_.chunks, at::kLong));
        plan_.chunks.assign(agreed.data_ptr<int64_t>(), agreed.data_ptr<int64_t>() + agreed.numel());
      }
    }
    const int64_t chunks = chunks_ > 0 ? chunks_ : plan_.chunks[size_t(in.layer)];
    step_chunks_.push_back(chunks);
    if (chunks == 0) return layer_forward(x, in, *this, moe_stored);
    MoeFn chunked = [chunks](const at::Tensor& xn, const at::Tensor& probs, const MoeRouting& routing,
                             const LayerWeights& w) { return chunked_moe(xn, probs, routing, w, chunks); };
    return layer_recomputed(x, in, *this, chunked);
  }

  // Fixed: the chunk count of each layer; MACT: per layer and timed step, with the steps' indices.
  json step_counters() const override {
    json j = {{"chunks", step_chunks_}, {"step", step_}};
    if (plan_.predicted_ms >= 0) j["predicted_step_ms"] = plan_.predicted_ms;
    if (!learned_peaks_.empty()) j["predicted_layer_peak_bytes"] = learned_peaks_;
    return j;
  }
  json record_counters(const std::vector<json>& steps, int64_t first_step) const override {
    json r = json::object();
    if (chunks_ > 0) {  // also when it ran out of memory: the table says with how many chunks
      r["chunks"] = chunks_;
      return r;
    }
    if (steps.empty()) return r;
    const json& last = steps.back();
    r["chunks"] = json::array(), r["chunk_steps"] = json::array();  // [timed step][layer]; 0 = stored
    for (const auto& s : steps) r["chunks"].push_back(s["chunks"]), r["chunk_steps"].push_back(s["step"]);
    if (last.contains("predicted_step_ms")) r["predicted_step_ms"] = last["predicted_step_ms"];
    return r;
  }

  std::optional<StrategyShape> memory_shape() const override {
    if (chunks_ == 0) return std::nullopt;  // chosen per step: predict() plans it
    return chunked(chunks_);
  }

  // MACT's prediction is its plan's, per layer stored or chunked.
  Prediction predict(const ExperimentConfig& c, const EmulatedRank& rank) const override {
    if (chunks_ > 0) return Strategy::predict(c, rank);
    return predict_plan(c, rank, fixed_.empty() ? plan(c, rank).chunks : fixed_);
  }

  std::optional<PaperChunks> paper_chunks(double received, double s_recv_max) const override {
    // s'_max comes with Eq. 2's row widths; buffer-free experts keep fewer, so MACT's choice here
    // is conservative for them (the projection itself uses their widths).
    PaperChunks pc;
    if (chunks_ > 0) pc.chunks = pc.used = chunks_;
    else if (!fixed_.empty()) pc.chunks = pc.used = std::max<int64_t>(1, *std::max_element(fixed_.begin(), fixed_.end()));
    else pc.chunks = chunks_for(received, s_recv_max, bins_), pc.used = pc.chunks > 0 ? pc.chunks : bins_.back();
    if (experts_ == ExpertStorage::BufferFree) pc.row_h = 1, pc.row_g = keep_act_ ? 3 : 2;
    return pc;
  }

 private:
  StrategyShape stored() const {
    StrategyShape s;
    s.experts = experts_;
    s.keep_act = keep_act_;
    return s;
  }
  StrategyShape chunked(int64_t chunks) const {
    StrategyShape s = stored();
    s.recompute_layer = true;
    s.moe = MoeMode::Chunked;
    s.chunks = chunks;
    return s;
  }

  Prediction predict_plan(const ExperimentConfig& c, const EmulatedRank& rank, const std::vector<int64_t>& chosen) const {
    Prediction p = std::all_of(chosen.begin(), chosen.end(), [](int64_t v) { return v == 0; })
                       ? predict_step(c, rank, stored())
                       : predict_step(c, rank, chunked(1), chosen);
    p.chunks = chosen;
    return p;
  }

  // MACT over learned routing (workload: router, `chunks: auto`, objective: memory): a layer's
  // rows are known only once its router has run, so each layer is planned then, from every rank's
  // counts (real ranks share them: one small all-reduce), for the rank receiving the most. Every
  // rank then runs the same chunk count. A recomputed layer keeps only its output, so one layer's
  // count does not change another's peak (every_bin): planning layer by layer is the whole plan.
  // Storing a layer (store_when_fits) is decided before its router runs, so that, and objective:
  // time, plan ahead from the balanced estimate.
  bool learned(const LayerInput& in) const {
    return chunks_ == 0 && fixed_.empty() && objective_ == "memory" && !store_when_fits_ &&
           !in.rank->layers[size_t(in.layer)].own_experts.defined();
  }
  int64_t plan_learned(const LayerInput& in, const MoeRouting& routing) {
    const size_t l = size_t(in.layer);
    const RankRouting& rr = in.rank->layers[l];
    const int64_t ep = rr.ep, El = rr.local_experts;
    // sent[r][e]: rank r's assignments to expert e; every rank fills its row (notify).
    at::Tensor sent = at::zeros({ep, ep * El}, at::kLong);
    sent[in.dist ? in.dist->rank() : 0].copy_(at::bincount(routing.expert_ids.reshape(-1).cpu(), {}, ep * El));
    if (in.dist) in.dist->allreduce_sum(sent);
    const at::Tensor received = sent.sum(0).view({ep, El});
    const int64_t hot = received.sum(1).argmax().item<int64_t>();
    const at::Tensor rows = received[hot].contiguous();
    EmulatedRank seen = *in.rank;
    RankRouting& r = seen.layers[l];
    r.tokens_received = rows.sum().item<int64_t>();
    r.expert_rows.assign(rows.data_ptr<int64_t>(), rows.data_ptr<int64_t>() + rows.numel());
    r.remote_rows = sent[hot].sum().item<int64_t>() - sent[hot].narrow(0, hot * El, El).sum().item<int64_t>();
    const ExperimentConfig& c = *in.config;
    const int64_t chunks = plan(c, seen).chunks[l];
    // What the model expects of this layer's backward with that count, beside the meter's peak.
    if (learned_peaks_.size() <= l) learned_peaks_.resize(l + 1, 0);
    learned_peaks_[l] = predict_step(c, seen, chunked(chunks), std::vector<int64_t>(size_t(c.model.layers), chunks)).layer_peak[l];
    return chunks;
  }

  // Chooses a step's chunk count per layer (0 = store without recomputation).
  Plan plan(const ExperimentConfig& c, const EmulatedRank& rank) const {
    const int64_t L = c.model.layers;
    Plan plan{std::vector<int64_t>(size_t(L), bins_.front())};
    if (objective_ == "time") return plan_for_time(c, rank, predict_step(c, rank, stored()));
    if (c.budget < 0) {  // no budget: everything fits
      if (store_when_fits_) plan.chunks.assign(size_t(L), 0);
      return plan;
    }
    const Prediction all_stored = predict_step(c, rank, stored());
    const int64_t room = activation_room(c, all_stored);
    if (store_when_fits_ && all_stored.activation_bytes <= room) {
      plan.chunks.assign(size_t(L), 0);
      return plan;
    }
    if (model_ == "paper") {
      PaperModel pm;
      const ModelConfig& m = c.model;
      pm.D_t = double(c10::elementSize(dtype_of(c.dtype)));
      pm.b = double(m.micro_batch), pm.s = double(m.seq), pm.h = double(m.hidden), pm.a = double(m.heads);
      pm.h_d = double(m.head_dim), pm.k_a = double(m.kv_heads), pm.e_n = double(m.experts), pm.g_e = double(m.ffn_hidden);
      pm.static_bytes = double(all_stored.static_bytes), pm.device_bytes = double(c.budget);
      for (int64_t l = 0; l < L; ++l) {
        const int64_t need = rank.layers[size_t(l)].tokens_received;  // notify: rows to receive
        const int64_t b = chunks_for(double(need), pm.s_recv_max(), bins_);
        if (b < 0)
          throw PlannedOutOfMemory("MACT (paper model): layer " + std::to_string(l) +
                                   " needs " + fmt_bytes(pm.activation(double(need), double(bins_.back()))) +
                                   " of activations even with " + std::to_string(bins_.back()) + " chunks; the budget " +
                                   fmt_bytes(double(c.budget)) + " leaves " + fmt_bytes(double(c.budget - all_stored.static_bytes)) +
                                   " after static " + fmt_bytes(double(all_stored.static_bytes)));
        plan.chunks[size_t(l)] = b;
      }
      return plan;
    }
    const auto per_bin = every_bin(c, rank);
    for (int64_t l = 0; l < L; ++l) {
      size_t i = 0;
      while (i < bins_.size() && per_bin[i].layer_peak[size_t(l)] > room) ++i;
      if (i == bins_.size()) {
        const int64_t need = per_bin.back().layer_peak[size_t(l)];
        throw PlannedOutOfMemory("MACT: layer " + std::to_string(l) + " needs " +
                                 fmt_bytes(double(need)) + " of activations even with " + std::to_string(bins_.back()) +
                                 " chunks; the budget " + fmt_bytes(double(c.budget)) + " leaves " + fmt_bytes(double(room)) +
                                 " after static " + fmt_bytes(double(all_stored.static_bytes)) + " and " +
                                 std::to_string(int(headroom_ * 100)) + "% headroom (short by " + fmt_bytes(double(need - room)) + ")");
      }
      plan.chunks[size_t(l)] = bins_[i];
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
  Plan plan_for_time(const ExperimentConfig& c, const EmulatedRank& rank, const Prediction& all_stored) const {
    if (!cost_loaded_) cost_ = CostModel::load(c.cost_model), cost_loaded_ = true;
    const int64_t L = c.model.layers;
    const double room = c.budget < 0 ? 1e300 : double(activation_room(c, all_stored));
    std::vector<int64_t> options{0};
    options.insert(options.end(), bins_.begin(), bins_.end());
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
      std::sort(next.begin(), next.end(), [](const Partial& a, const Partial& b) {
        return a.kept < b.kept || (a.kept == b.kept && a.ms < b.ms);
      });
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
    if (c.budget >= 0 && double(predict_plan(c, rank, plan.chunks).activation_bytes) > room) {
      plan.chunks.assign(size_t(L), bins_.back());
      plan.predicted_ms = 0;
      for (int64_t l = 0; l < L; ++l) plan.predicted_ms += parts.back().ms[size_t(l)];
    }
    return plan;
  }

  // The implementation model is within a few percent of the meter, so MACT keeps `headroom` of
  // the activation room free rather than planning to the last byte.
  int64_t activation_room(const ExperimentConfig& c, const Prediction& stored) const {
    return int64_t(double(c.budget - stored.static_bytes) * (1.0 - headroom_));
  }

  // The prediction with every layer at each bin, one per bin. A recomputed layer keeps only its
  // output until its backward, so one layer's chunk count does not change another's peak: each
  // layer's peak per bin is read off these.
  std::vector<Prediction> every_bin(const ExperimentConfig& c, const EmulatedRank& rank) const {
    std::vector<Prediction> out;
    for (int64_t b : bins_) out.push_back(predict_step(c, rank, chunked(b), std::vector<int64_t>(size_t(c.model.layers), b)));
    return out;
  }

  int64_t chunks_ = 1;  // 0: auto
  std::string objective_ = "memory";
  ExpertStorage experts_ = ExpertStorage::Stored;
  bool keep_act_ = false;
  mutable CostModel cost_;  // the experiment's, loaded when first needed
  mutable bool cost_loaded_ = false;
  std::vector<int64_t> bins_;
  std::vector<int64_t> fixed_;  // chunks: [..], one per layer
  std::string model_;
  bool store_when_fits_ = false;
  double headroom_ = 0.05;
  Plan plan_;                        // this step's (MACT)
  std::vector<int64_t> learned_chunks_;  // MACT over learned routing: per layer, this step (0: not yet)
  std::vector<int64_t> learned_peaks_;   // and the model's peak of each layer's backward with them
  std::vector<int64_t> step_chunks_;  // per layer, this step
  int64_t step_ = 0;
};

MEMFINE_REGISTER_STRATEGY(StrategyInfo{
    "memfine",
    "MemFine FCDA: MoE dispatch->experts->combine in token chunks, recomputed chunk by chunk; rest of the layer recomputed",
    {chunks_param(),
     int_list_param("bins", "auto: the chunk counts MACT may choose, increasing", {1, 2, 4, 8}, 1, int64_t(1) << 24),
     choice_param("model", "auto: 'implementation' (this code's byte-level model) or 'paper' (Eq. 8-9)", "implementation",
                  {"implementation", "paper"}),
     bool_param("store_when_fits", "auto: store without recomputation when the model says that fits", false),
     number_param("headroom", "auto: share of the budget's activation room kept free for the model's error", 0.05, 0,
                  0.99),
     choice_param("experts",
                  "how each expert keeps its activations inside a chunk: 'stored', 'moe_act' (Megatron's selective "
                  "recompute of SiLU(a)*b) or 'buffer_free' (MoEBlaze-style, as the moeblaze strategy)",
                  "stored", {"stored", "moe_act", "buffer_free"}),
     bool_param("keep_act", "experts: buffer_free: also keep SiLU(a)*b", false),
     choice_param("objective",
                  "auto: 'memory' (smallest bin that fits, the paper's MACT) or 'time' (the plan of least predicted "
                  "time, by the experiment's cost_model, that fits: per layer stored or a bin)",
                  "memory", {"memory", "time"})},
    [](const StrategySpec& s) { return std::unique_ptr<Strategy>(new MemFine(s)); },
    [](const StrategySpec& s, const ExperimentConfig& c) {
      if (per_layer(s)) {
        const auto plan = s.value("chunks").get<std::vector<int64_t>>();
        if (int64_t(plan.size()) != c.model.layers)
          throw std::invalid_argument("chunks: the per-layer list has " + std::to_string(plan.size()) + " counts for " +
                                      std::to_string(c.model.layers) + " layers");
        for (int64_t v : plan)
          if (v > c.model.tokens())
            throw std::invalid_argument("chunks: " + std::to_string(v) + " exceeds the tokens per rank (" +
                                        std::to_string(c.model.tokens()) + ")");
        return std::string();
      }
      if (tuned(s)) {
        const auto bins = s.value("bins").get<std::vector<int64_t>>();
        if (!bins.empty() && bins.back() > c.model.tokens())
          throw std::invalid_argument("bins: " + std::to_string(bins.back()) + " chunks exceeds the tokens per rank (" +
                                      std::to_string(c.model.tokens()) + ")");
        if (s.value("objective") == "time" && c.cost_model.empty())
          throw std::invalid_argument("objective: time needs the experiment's cost_model: PATH (scripts/fit-cost-model "
                                      "writes results/<device>/cost_model.json)");
        // MACT plans against the budget: without one, everything fits and it runs its smallest bin
        // (store_when_fits: stores everything) in every layer and step.
        if (c.budget < 0 && s.value("objective") == "memory" && !c.paper.enabled)
          return std::string("chunks: auto without memory.budget: MACT then runs ") +
                 (s.value("store_when_fits").get<bool>() ? "every layer stored" : std::to_string(bins.front()) + " chunk(s)") +
                 " everywhere; set memory.budget for it to plan";
        return std::string();
      }
      const int64_t chunks = s.value("chunks").get<int64_t>();
      if (chunks > c.model.tokens())
        throw std::invalid_argument("chunks (" + std::to_string(chunks) + ") exceeds the tokens per rank (" +
                                    std::to_string(c.model.tokens()) + ")");
      return std::string();
    }});

}  // namespace
}  // namespace memfine
