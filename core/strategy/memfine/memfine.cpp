// The `memfine` strategy. FCDA (chunked_moe.h) runs the MoE in token chunks; the rest of the layer
// is recomputed as in full_recompute, so memfine never stores more than full_recompute does. A
// fixed chunk count is a shape the executor runs; `chunks: auto` plans each step with MACT
// (mact.h); `chunks: [..]` runs a fixed plan per layer (0: stored), e.g. one MACT chose.
#include <algorithm>

#include "core/dist/dist.h"
#include "core/moe/expert_storage.h"
#include "core/strategy/executor.h"
#include "core/strategy/memfine/chunked_moe.h"
#include "core/strategy/memfine/mact.h"
#include "core/strategy/shared_params.h"
#include "core/strategy/registry.h"

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
                                  shown_value(n) + "'");
    }
    if (v < 1) throw std::invalid_argument("must be 1 or more, or 'auto', got " + std::to_string(v));
    return v;
  };
  return said(named(Param{"chunks",
                           "number of token chunks, 'auto' (MACT: per layer and step, from the budget), or a list "
                           "with one count per layer, 0 storing that layer whole (a fixed plan)",
                           "an integer >= 1, 'auto' or a list of integers >= 0", read, 1}),
              "{v} chunks", {{"auto", "MACT"}, {"1", "1 chunk"}});
}
// How the chunk count is given: a count, MACT's per step (`auto`), or a fixed plan per layer.
enum class ChunkMode { Fixed, Auto, PerLayer };

// The strategy's parameters, typed: read from the spec here and nowhere else.
struct MemfineParams {
  ChunkMode mode = ChunkMode::Fixed;
  int64_t chunks = 1;         // Fixed
  std::vector<int64_t> plan;  // PerLayer: one count per layer, 0 a layer stored whole
  MactOptions mact;           // Auto's (and a stored layer's shape for every mode)
};

// A fixed count: what the executor runs. Chosen per step (MACT, a fixed plan): predict() plans it.
StrategyShape shape_of(const MemfineParams& p) {
  StrategyShape s = Mact(p.mact).chunked(1);
  if (p.mode == ChunkMode::Fixed) s.chunks = p.chunks;
  return s;
}

class MemFine : public Strategy {
 public:
  MemFine(const StrategySpec& spec, const MemfineParams& p)
      : Strategy(spec, shape_of(p), p.mode == ChunkMode::Fixed ? "" : "chosen per step: its plan's prediction"),
        mact_(p.mact),
        chunks_(p.mode == ChunkMode::Fixed ? p.chunks : 0),
        fixed_(p.plan) {
    const auto& bins = mact_.options().bins;
    if (shape_.keep_act && shape_.experts != ExpertStorage::BufferFree)
      throw std::invalid_argument("keep_act applies to experts: buffer_free");
    if (bins.empty() || !std::is_sorted(bins.begin(), bins.end()) ||
        std::adjacent_find(bins.begin(), bins.end()) != bins.end())
      throw std::invalid_argument("bins must be a non-empty increasing list of chunk counts >= 1");
    // Offloading acts in layers stored whole only: a plan must be able to store one.
    const bool can_store = p.mode == ChunkMode::PerLayer ||
                           (p.mode == ChunkMode::Auto && (p.mact.store_when_fits || p.mact.objective == Objective::Time));
    if (shape_.offload.any() && !can_store)
      throw std::invalid_argument(
          "modules: offloading acts in layers stored whole; give chunks: auto with store_when_fits: true or "
          "objective: time, or a per-layer plan with 0s");
    // MACT's parameters set away from their defaults with a fixed count.
    const MactOptions d;
    const std::pair<const char*, bool> set[] = {{"bins", p.mact.bins != d.bins},
                                                {"model", p.mact.model != d.model},
                                                {"store_when_fits", p.mact.store_when_fits != d.store_when_fits},
                                                {"headroom", p.mact.headroom != d.headroom},
                                                {"objective", p.mact.objective != d.objective}};
    for (const auto& [k, differs] : set)
      if (p.mode != ChunkMode::Auto && differs) throw std::invalid_argument(std::string(k) + " applies to chunks: auto");
  }

  void begin_own_step(int64_t step) override {
    step_chunks_.clear();
    learned_peaks_.clear();
    step_ = step;
  }

  LayerOutput run_layer(const at::Tensor& x, const LayerInput& in) override {
    if (chunks_ > 0) {
      step_chunks_.push_back(chunks_);
      return Strategy::run_layer(x, in);
    }
    const size_t l = size_t(in.layer);
    if (fixed_.empty() && mact_.plans_per_layer(in)) {
      // The router decides this layer's routing now: plan once it has (the paper's notify), then
      // run the chunks. Backward's recomputation reuses the count.
      if (learned_chunks_.size() <= l) learned_chunks_.resize(l + 1, 0), learned_peaks_.resize(l + 1, 0);
      learned_chunks_[l] = 0;
      MoeFn chunked = [this, in, l](const at::Tensor& xn, const at::Tensor& probs, const MoeRouting& routing,
                                    const LayerWeights& w) {
        if (learned_chunks_[l] == 0) std::tie(learned_chunks_[l], learned_peaks_[l]) = mact_.plan_layer(in, routing);
        return chunked_moe(xn, probs, routing, w, learned_chunks_[l]);
      };
      LayerOutput out = layer_recomputed(x, in, *this, chunked);
      step_chunks_.push_back(learned_chunks_[l]);
      return out;
    }
    if (in.layer == 0) {
      plan_ = fixed_.empty() ? mact_.plan(*in.config, *in.rank) : Plan{fixed_};
      if (in.dist) {
        // Every rank takes part in every chunk's all-to-all: agree on the largest need.
        at::Tensor agreed = in.dist->allreduce_max(at::tensor(plan_.chunks, at::kLong));
        plan_.chunks.assign(agreed.data_ptr<int64_t>(), agreed.data_ptr<int64_t>() + agreed.numel());
      }
    }
    const int64_t chunks = plan_.chunks[l];
    step_chunks_.push_back(chunks);
    return run_shape(x, in, *this, chunks == 0 ? mact_.options().stored : mact_.chunked(chunks));
  }

  // Fixed: the chunk count of each layer; MACT: per layer and timed step, with the steps' indices.
  json own_step_counters() const override {
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

  // MACT's prediction is its plan's, per layer stored or chunked.
  Prediction predict(const ExperimentConfig& c, const EmulatedRank& rank) const override {
    if (chunks_ > 0) return Strategy::predict(c, rank);
    return mact_.predict(c, rank, fixed_.empty() ? mact_.plan(c, rank).chunks : fixed_);
  }

  // A fixed count (or a fixed plan's largest) whatever fits; MACT's fewest chunks of its bins that
  // fit, by its rule, after storing the layer whole where it may and that fits.
  ShapeChoice choose_shape(const FitsFn& fits) const override {
    if (chunks_ > 0) return {shape_, true};
    if (!fixed_.empty())
      return {mact_.chunked(std::max<int64_t>(1, *std::max_element(fixed_.begin(), fixed_.end()))), true};
    const MactOptions& o = mact_.options();
    if (o.store_when_fits && fits(o.stored)) return {o.stored, true};
    const int64_t i = first_fitting(o.bins, [&](size_t b) { return fits(mact_.chunked(o.bins[b])); });
    return {mact_.chunked(i < 0 ? o.bins.back() : o.bins[size_t(i)]), i >= 0};
  }

 private:
  Mact mact_;
  int64_t chunks_ = 1;                   // 0: chosen per step
  std::vector<int64_t> fixed_;           // chunks: [..], one per layer
  Plan plan_;                            // this step's (MACT)
  std::vector<int64_t> learned_chunks_;  // MACT over learned routing: per layer, this step (0: not yet)
  std::vector<int64_t> learned_peaks_;   // and the model's peak of each layer's backward with them
  std::vector<int64_t> step_chunks_;     // per layer, this step
  int64_t step_ = 0;
};

ParamsOf<MemfineParams> params() {
  using P = MemfineParams;
  using M = MactOptions;
  using S = StrategyShape;
  ParamsOf<P> p{
      bind<P>(chunks_param(),
              [](const json& v, P& p) {
                if (v == "auto")
                  p.mode = ChunkMode::Auto;
                else if (v.is_array())
                  p.mode = ChunkMode::PerLayer, p.plan = v.get<std::vector<int64_t>>();
                else
                  p.chunks = v.get<int64_t>();
              }),
      nest(&P::mact, bind(&M::bins, int_list_param("bins", "auto: the chunk counts MACT may choose, increasing",
                                                   {1, 2, 4, 8}, 1, int64_t(1) << 24))),
      nest(&P::mact, bind(&M::model, enum_param("model",
                                                "auto: 'implementation' (this code's byte-level model) or 'paper' "
                                                "(Eq. 8-9)",
                                                MactModel::Implementation))),
      nest(&P::mact, bind(&M::store_when_fits,
                          said(bool_param("store_when_fits",
                                          "auto: store without recomputation when the model says that fits", false),
                               "", {{"true", "store when it fits"}, {"false", ""}}))),
      nest(&P::mact, bind(&M::headroom, number_param("headroom",
                                                     "auto: share of the budget's activation room kept free for the "
                                                     "model's error",
                                                     0.05, 0, 0.99))),
      // How each expert keeps its activations, in every chunk and in a layer stored whole.
      nest(&P::mact, nest(&M::stored, bind(&S::experts,
                                           said(enum_param("experts",
                                                           "how each expert keeps its activations inside a chunk: "
                                                           "'stored', 'moe_act' (Megatron's selective recompute of "
                                                           "SiLU(a)*b) or 'buffer_free' (MoEBlaze-style, as the "
                                                           "moeblaze strategy)",
                                                           ExpertStorage::Stored),
                                                experts_phrase(), experts_phrases())))),
      nest(&P::mact,
           nest(&M::stored, bind(&S::keep_act, said(bool_param("keep_act", "experts: buffer_free: also keep SiLU(a)*b", false),
                                                    "", {{"true", "keeps act"}, {"false", ""}})))),
      nest(&P::mact, bind(&M::objective, said(enum_param("objective",
                                                         "auto: 'memory' (smallest bin that fits, the paper's MACT) "
                                                         "or 'time' (the plan of least predicted time, by the "
                                                         "experiment's cost_model, that fits: per layer stored or a "
                                                         "bin)",
                                                         Objective::Memory),
                                              "", {{"time", "planning for time"}, {"memory", ""}})))};
  // Offloading in the layers a plan stores whole (chunks 0, store_when_fits, objective: time):
  // MACT then stores, offloaded, a layer it would otherwise recompute in chunks.
  for (Bound<OffloadSpec> o : offload_params({}, false)) {
    o.param.help = "layers stored whole: " + o.param.help;
    p.add(nest(&P::mact, nest(&M::stored, nest(&S::offload, o))));
  }
  return p;
}

// What makes a point invalid for it (a chunk count against the tokens, a per-layer plan against
// the layers), and what is valid but likely not meant (MACT without a budget).
std::string check_point(const MemfineParams& p, const ExperimentConfig& c) {
  if (p.mode == ChunkMode::PerLayer) {
    if (int64_t(p.plan.size()) != c.model.layers)
      throw std::invalid_argument("chunks: the per-layer list has " + std::to_string(p.plan.size()) + " counts for " +
                                  std::to_string(c.model.layers) + " layers");
    for (int64_t v : p.plan)
      if (v > c.model.tokens())
        throw std::invalid_argument("chunks: " + std::to_string(v) + " exceeds the tokens per rank (" +
                                    std::to_string(c.model.tokens()) + ")");
    return std::string();
  }
  if (p.mode == ChunkMode::Auto) {
    const auto& bins = p.mact.bins;
    if (!bins.empty() && bins.back() > c.model.tokens())
      throw std::invalid_argument("bins: " + std::to_string(bins.back()) + " chunks exceeds the tokens per rank (" +
                                  std::to_string(c.model.tokens()) + ")");
    if (p.mact.objective == Objective::Time && c.cost_model.empty())
      throw std::invalid_argument(
          "objective: time needs the experiment's cost_model: PATH (scripts/fit-cost-model "
          "writes results/<device>/cost_model.json)");
    // MACT plans against the budget: without one, everything fits and it runs its smallest bin
    // (store_when_fits: stores everything) in every layer and step.
    if (c.budget < 0 && p.mact.objective == Objective::Memory && !c.paper.enabled)
      return std::string("chunks: auto without memory.budget: MACT then runs ") +
             (p.mact.store_when_fits ? "every layer stored" : std::to_string(bins.front()) + " chunk(s)") +
             " everywhere; set memory.budget for it to plan";
    return std::string();
  }
  if (p.chunks > c.model.tokens())
    throw std::invalid_argument("chunks (" + std::to_string(p.chunks) + ") exceeds the tokens per rank (" +
                                std::to_string(c.model.tokens()) + ")");
  return std::string();
}

std::vector<FieldSpec> counters() {
  // Its chunks (chunks, chunk_steps, and a training step's step) are the record schema's fields.
  std::vector<FieldSpec> c = {
      {"predicted_step_ms", "number", "ms", "objective: time: the cost model's step time of the plan", "measured"},
      {"predicted_layer_peak_bytes", "list", "bytes",
       "MACT over learned routing: the model's peak of each layer's backward with its chunks", "train"}};
  for (const auto& f : Offloader::counter_fields()) c.push_back(f);
  return c;
}

MEMFINE_REGISTER_STRATEGY(drawn(with_counters(
    checked(coded("memfine",
                  "MemFine FCDA: MoE dispatch->experts->combine in token chunks, recomputed chunk by chunk; rest of "
                  "the layer recomputed",
                  params(),
                  [](const StrategySpec& s, const MemfineParams& p) {
                    return std::unique_ptr<Strategy>(new MemFine(s, p));
                  }),
            params(), check_point),
    counters()), "#ff7f0e", "D"));

}  // namespace
}  // namespace memfine
