// The strategy interface: how a decoder layer's stages run (stored, recomputed, chunked, capped).
// A strategy never changes the math; `verify: true` checks that against the reference strategy.
// Add one in one file: derive from Strategy and register it with MEMFINE_REGISTER_STRATEGY.
#pragma once
#include <ATen/ATen.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <optional>
#include <stdexcept>

#include "core/config/config.h"
#include "core/predict/memory_model.h"
#include "core/predict/paper_model.h"
#include "core/workload/ep_rank.h"
#include "core/model/model.h"
#include "core/moe/stages.h"
#include "core/strategy/params.h"

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

struct LayerOutput {
  at::Tensor hidden;    // [tokens, hidden]
  at::Tensor aux_loss;  // the peers' loss terms (scalar)
};

// A strategy's place in the comparisons, declared where it is registered (the harness never
// names a strategy): `verify: true` checks every dropless strategy against the reference (the
// plain computation), and tables give ratios against the baseline (the paper's).
enum class Role { None, Reference, Baseline };

// How the MoE part of a layer runs, given the normed hidden states and router probabilities.
using MoeFn = std::function<Combined(const at::Tensor& x_norm, const at::Tensor& probs, const MoeRouting& routing,
                                     const LayerWeights& w)>;

class Strategy {
 public:
  explicit Strategy(StrategySpec spec) : spec_(std::move(spec)) {}
  virtual ~Strategy() = default;
  std::string label() const { return spec_.label(); }
  const StrategySpec& spec() const { return spec_; }
  virtual bool dropless() const { return true; }
  // Called before each step with the step index; strategies that tune per step use it.
  virtual void begin_step(int64_t step) {}
  virtual LayerOutput run_layer(const at::Tensor& x, const LayerInput& in) = 0;
  // Capacity capping edits the routing here; the default keeps every assignment.
  virtual void cap_routing(MoeRouting& routing, const at::Tensor& probs) {}
  // How experts keep what backward needs (emulated and real ranks alike); default: SwiGLU, stored.
  virtual ExpertPath expert() const { return {}; }

  // Its own statistics of the last step, named as it likes (Google Benchmark's user counters);
  // the record writes them as it finds them.
  virtual json step_counters() const { return json::object(); }
  // Real ranks' training step: one record's fields from every rank's step_counters (rank order).
  // Default: theirs when the ranks agree, else each rank's under "per_rank".
  virtual json merge_rank_counters(const std::vector<json>& ranks) const;
  // The record's fields from the counters of every timed step, in order (`first_step` is the
  // first's index). Default: the last step's.
  virtual json record_counters(const std::vector<json>& steps, int64_t first_step) const {
    return steps.empty() ? json::object() : steps.back();
  }

  // What it stores, for the implementation model (core/predict/memory_model.h); nullopt: the
  // model does not cover it (`why` says so in records and tables).
  virtual std::optional<StrategyShape> memory_shape() const { return std::nullopt; }
  virtual std::string unmodelled_why() const { return "the implementation model does not cover '" + spec_.name + "'"; }
  // The model's prediction of one step on `rank` (a strategy that plans per step plans it);
  // throws NotModelled, or OutOfMemory where nothing it may choose fits the budget.
  virtual Prediction predict(const ExperimentConfig& c, const EmulatedRank& rank) const;
  // Its chunk count under the paper's model (Eq. 8-9) for s' and s'_max; nullopt: not covered.
  virtual std::optional<PaperChunks> paper_chunks(double received, double s_recv_max) const { return std::nullopt; }

 protected:
  StrategySpec spec_;
};

struct NotModelled : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

// The layer's stages in order: attention block, route, MoE (`moe`), shared expert, residual.
LayerOutput layer_forward(const at::Tensor& x, const LayerInput& in, Strategy& s, const MoeFn& moe);
// The MoE as one pass over all tokens: dispatch -> experts -> combine, activations stored.
Combined moe_stored(const at::Tensor& x_norm, const at::Tensor& probs, const MoeRouting& routing,
                    const LayerWeights& w);
// The whole layer recomputed in backward (Megatron's --recompute-granularity full).
LayerOutput layer_recomputed(const at::Tensor& x, const LayerInput& in, Strategy& s, const MoeFn& moe);

struct StrategyInfo {
  std::string name, description;
  std::vector<Param> params;
  std::function<std::unique_ptr<Strategy>(const StrategySpec&)> make;
  // Checks the strategy against a whole point (e.g. chunk count vs tokens): throws what makes it
  // invalid, returns a warning ("" none) for what is valid but likely not meant; may be empty.
  // Parameter values are checked by constructing the strategy (`make` throws on bad values).
  std::function<std::string(const StrategySpec&, const ExperimentConfig&)> check_point;
  Role role = Role::None;
};

// The registered strategy of a role ("" when none is).
std::string strategy_of_role(Role role);

const std::map<std::string, StrategyInfo>& strategy_registry();
bool register_strategy(StrategyInfo info);
// `spec` typed by its strategy's declared parameters (StrategySpec::resolved on success); problems
// are appended (an unknown strategy is one, key "").
StrategySpec resolve_strategy(const StrategySpec& spec, std::vector<ParamProblem>& problems);
// Resolves `spec` if it is not yet (std::invalid_argument naming the first problem), then makes it.
std::unique_ptr<Strategy> make_strategy(const StrategySpec& spec);

#define MEMFINE_CONCAT_(a, b) a##b
#define MEMFINE_CONCAT(a, b) MEMFINE_CONCAT_(a, b)
#define MEMFINE_REGISTER_STRATEGY(...) \
  static const bool MEMFINE_CONCAT(memfine_registered_, __LINE__) = ::memfine::register_strategy(__VA_ARGS__)

}  // namespace memfine
