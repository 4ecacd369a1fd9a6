// MACT (memory-aware chunk tuning): a step's chunk count per layer, from the memory model and the
// budget. Before each step, for every layer, it reads the rows the layer will receive (the paper's
// "notify") and takes the smallest bin whose predicted peak fits the budget, by the implementation
// model (default) or the paper's Eq. 8-9; with store_when_fits it stores the whole step where the
// model says that fits; with objective: time it takes the plan of least predicted time that fits
// (a knapsack over layers, by the experiment's cost model). Over router-decided routing each layer
// is planned once its router has run, from every rank's counts.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/predict/cost_model.h"
#include "core/util/named_enum.h"
#include "core/strategy/strategy.h"

namespace memfine {

// MACT's rule, the one planner of chunk counts: the index of the first of `bins` (fewest chunks
// first) whose layer `fits` (a model's answer for bins[i]), or -1 where none does. The
// implementation model (per layer and step), the paper's Eq. 8-9 (c = ceil(s'' / s'_max), then
// the smallest bin of at least c) and `memfine project`'s cluster-scale model all plan through it.
int64_t first_fitting(const std::vector<int64_t>& bins, const std::function<bool(size_t)>& fits);

// Which memory model MACT asks: this code's byte-level one, or the paper's Eq. 8-9.
enum class MactModel { Implementation, Paper };
template <>
struct EnumNames<MactModel> {
  static constexpr std::pair<MactModel, const char*> all[] = {{MactModel::Implementation, "implementation"},
                                                              {MactModel::Paper, "paper"}};
};
// What MACT plans for: the smallest bin that fits (the paper's), or the plan of least predicted
// time that fits (the experiment's cost model).
enum class Objective { Memory, Time };
template <>
struct EnumNames<Objective> {
  static constexpr std::pair<Objective, const char*> all[] = {{Objective::Memory, "memory"}, {Objective::Time, "time"}};
};

struct MactOptions {
  std::vector<int64_t> bins = {1, 2, 4, 8};
  MactModel model = MactModel::Implementation;
  bool store_when_fits = false;
  double headroom = 0.05;  // share of the activation room kept free for the model's error
  Objective objective = Objective::Memory;
  StrategyShape stored;  // a layer stored whole (how its experts keep their activations)
};

// A step's choice: chunks per layer (0: stored without recomputation) and, under objective: time,
// the cost model's step time.
struct Plan {
  std::vector<int64_t> chunks;
  double predicted_ms = -1;
};

class Mact {
 public:
  explicit Mact(MactOptions o) : o_(std::move(o)) {}
  const MactOptions& options() const { return o_; }
  // The shape of a layer recomputed with `chunks` chunks (its experts as a stored layer's).
  StrategyShape chunked(int64_t chunks) const;
  // The step's plan over `rank`'s routing; throws PlannedOutOfMemory where nothing fits.
  Plan plan(const ExperimentConfig& c, const EmulatedRank& rank) const;
  // The model's prediction of a plan (per layer stored or chunked).
  Prediction predict(const ExperimentConfig& c, const EmulatedRank& rank, const std::vector<int64_t>& chunks) const;
  // One layer of router-decided routing once its router has run (the paper's notify): every
  // rank's counts per expert (real ranks: one small all-reduce), the rank receiving the most, its
  // chunk count, and the model's peak of that layer's backward with it.
  std::pair<int64_t, int64_t> plan_layer(const LayerInput& in, const MoeRouting& routing) const;
  // Whether a layer is planned so: objective memory, no storing, routing the router decides.
  bool plans_per_layer(const LayerInput& in) const;

 private:
  Plan plan_for_time(const ExperimentConfig& c, const EmulatedRank& rank, const Prediction& all_stored) const;
  int64_t activation_room(const ExperimentConfig& c, const Prediction& stored) const;
  std::vector<Prediction> every_bin(const ExperimentConfig& c, const EmulatedRank& rank) const;
  MactOptions o_;
  mutable CostModel cost_;  // the experiment's, loaded when first needed
  mutable bool cost_loaded_ = false;
};

}  // namespace memfine
