// The strategy interface: how a decoder layer's stages run (stored, recomputed, chunked, capped)
// and what it keeps for backward. A strategy never changes the math; `verify: true` checks that
// against the reference strategy. Most strategies are their shape (core/moe/shape.h), which the
// executor runs and the memory models predict: declared in one file (core/strategy/registry.h).
// A strategy that changes how stages run (MemFine's per-step plans, capacity's capping) derives
// from Strategy and overrides what it changes.
#pragma once
#include <ATen/ATen.h>

#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/config/config.h"
#include "core/model/model.h"
#include "core/moe/shape.h"
#include "core/moe/stages.h"
#include "core/predict/memory_model.h"
#include "core/strategy/offload.h"
#include "core/workload/ep_rank.h"

namespace memfine {

using json = nlohmann::json;
class Dist;

struct LayerInput {
  const ExperimentConfig* config = nullptr;
  const Model* model = nullptr;
  const LayerWeights* weights = nullptr;
  const EmulatedRank* rank = nullptr;
  int64_t layer = 0;
  int64_t step = 0;
  const Dist* dist = nullptr;  // real expert-parallel ranks; null: one process (emulated peers)
  // Set: the router's assignments per expert of this layer are written at [layer] (int64 [experts]),
  // once per step (not again when backward recomputes the layer). `memfine train` records them.
  std::vector<at::Tensor>* expert_counts = nullptr;
};

// A strategy's choice among the shapes it may run a layer with, given which fit (core/strategy/
// strategy.h: choose_shape).
struct ShapeChoice {
  StrategyShape shape;
  bool found = true;  // false: it looked for a shape that fits and none did (then its most chunks)
};
using FitsFn = std::function<bool(const StrategyShape&)>;

struct LayerOutput {
  at::Tensor hidden;    // [tokens, hidden]
  at::Tensor aux_loss;  // the peers' loss terms (scalar)
};

class Strategy {
 public:
  // `shape`: how it runs and what it keeps; `unmodelled_why`: set when the memory model does not
  // cover it (records and tables say why).
  Strategy(StrategySpec spec, StrategyShape shape, std::string unmodelled_why = "")
      : spec_(std::move(spec)), shape_(shape), why_(std::move(unmodelled_why)) {
    if (shape_.offload.any()) offloader_ = std::make_shared<Offloader>(shape_.offload);
  }
  virtual ~Strategy() = default;
  std::string label() const { return spec_.label(); }
  const StrategySpec& spec() const { return spec_; }
  const StrategyShape& shape() const { return shape_; }
  bool dropless() const { return shape_.capacity_factor == 0; }
  // It stores activations in a narrower format: its gradients differ from the plain computation's by
  // design, and that difference is its result (measured in every record, held to no tolerance).
  bool lossy() const { return shape_.offload.encodes(); }
  // What it keeps, for the implementation model; nullopt (with the reason) where it does not cover it.
  std::optional<StrategyShape> memory_shape() const { return why_.empty() ? std::optional(shape_) : std::nullopt; }
  std::string unmodelled_why() const { return why_; }

  // How a layer runs: the shape, by the executor (core/strategy/executor.h).
  virtual LayerOutput run_layer(const at::Tensor& x, const LayerInput& in);
  // How the experts keep what backward needs (emulated and real ranks alike): the shape's.
  virtual ExpertPath expert() const;
  // Why its step cannot be captured as a CUDA graph (`graphs: step`), or empty: what it runs must
  // not wait for the device nor change between steps. Offloading's copies and a stash's rerun do.
  virtual std::string graph_blocker() const {
    if (offloader_) return "offloading copies on streams of its own, from the host's memory";
    if (shape_.stash.any()) return "a stash may run the step again";
    return std::string();
  }
  // Capacity capping edits the routing here; the default keeps every assignment.
  virtual void cap_routing(MoeRouting& routing, const at::Tensor& probs) {}

  // Its statistics (Google Benchmark's user counters), the record writes them as it finds them:
  // reset before each step, read after it. Its own, and its offloading's where it offloads.
  void begin_step(int64_t step) {
    passes_ = json::object();
    if (offloader_) offloader_->begin_step();
    begin_own_step(step);
  }
  json step_counters() const {
    json j = own_step_counters();
    if (offloader_) j.update(offloader_->counters());
    if (!passes_.empty()) j.update(passes_);
    return j;
  }
  // After a pass's backward: it lets go of what it held for the pass and says whether the step must
  // run again (Paged Stash's overflow); the harness asks once a step. Default: never.
  virtual bool finish_pass() { return false; }
  // The step runs again (every rank, if any asked): its second pass its own way.
  virtual void begin_rerun() {}
  // The harness's measure of a step that ran twice: each pass's peak above the step's start.
  void note_passes(int64_t first_pass_peak, int64_t rerun_peak) {
    passes_ = {{"first_pass_peak_bytes", first_pass_peak}, {"rerun_peak_bytes", rerun_peak}};
  }
  // What offloads the layers' saved activations (shape().offload); null where none do.
  Offloader* offloader() const { return offloader_.get(); }
  // Real ranks' training step: one record's fields from every rank's step_counters (rank order).
  // Default: theirs when the ranks agree, else each rank's under "per_rank".
  virtual json merge_rank_counters(const std::vector<json>& ranks) const;
  // The record's fields from the counters of every timed step, in order (`first_step` is the
  // first's index). Default: the last step's.
  virtual json record_counters(const std::vector<json>& steps, int64_t first_step) const {
    return steps.empty() ? json::object() : steps.back();
  }

  // The model's prediction of one step on `rank` (a strategy that plans per step plans it);
  // throws NotModelled, or PlannedOutOfMemory where nothing it may choose fits the budget.
  virtual Prediction predict(const ExperimentConfig& c, const EmulatedRank& rank) const;
  // The shape it runs a layer with where a model of memory (the paper's equations, `memfine
  // project`'s) says which fit: a strategy of one shape runs it whatever fits; MACT takes the
  // fewest chunks that fit, by its one rule (core/strategy/memfine/mact.h).
  virtual ShapeChoice choose_shape(const FitsFn& fits) const { return {shape_, true}; }

 protected:
  StrategySpec spec_;
  StrategyShape shape_;
  std::string why_;
  std::shared_ptr<Offloader> offloader_;
  json passes_ = json::object();

  virtual void begin_own_step(int64_t step) {}
  virtual json own_step_counters() const { return json::object(); }
};

struct NotModelled : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

}  // namespace memfine
