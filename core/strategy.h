// The strategy interface: how a decoder layer's stages run (stored, recomputed, chunked, capped).
// A strategy never changes the math; `verify: true` checks that against no_recompute.
// Add one in one file: derive from Strategy and register it with MEMFINE_REGISTER_STRATEGY.
#pragma once
#include <ATen/ATen.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/ep_rank.h"
#include "core/model.h"
#include "core/moe_stages.h"

namespace memfine {

class Dist;

struct LayerInput {
  const ExperimentConfig* config = nullptr;
  const Model* model = nullptr;
  const LayerWeights* weights = nullptr;
  const EmulatedRank* rank = nullptr;
  int64_t layer = 0;
  int64_t step = 0;
  const Dist* dist = nullptr;  // real expert-parallel ranks; null: one process (emulated peers)
};

struct LayerOutput {
  at::Tensor hidden;    // [tokens, hidden]
  at::Tensor aux_loss;  // the peers' loss terms (scalar)
};

// What a strategy reports about a step, beyond memory and time.
struct StepStats {
  int64_t assignments = 0, dropped = 0;     // capacity capping
  std::vector<int64_t> chunks;               // chunk count per layer this step (MemFine; 0 = stored)
  bool tuned = false;                        // chunks chosen per step (MACT)
  double predicted_ms = -1;                  // objective: time: the cost model's step time (-1: none)
};

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
  virtual void begin_step(int64_t step) { stats_ = StepStats(); }
  virtual LayerOutput run_layer(const at::Tensor& x, const LayerInput& in) = 0;
  // Capacity capping edits the routing here; the default keeps every assignment.
  virtual void cap_routing(MoeRouting& routing, const at::Tensor& probs) {}
  const StepStats& stats() const { return stats_; }

 protected:
  StrategySpec spec_;
  StepStats stats_;
};

// The layer's stages in order: attention block, route, MoE (`moe`), shared expert, residual.
LayerOutput layer_forward(const at::Tensor& x, const LayerInput& in, Strategy& s, const MoeFn& moe);
// The MoE as one pass over all tokens: dispatch -> experts -> combine, activations stored.
Combined moe_stored(const at::Tensor& x_norm, const at::Tensor& probs, const MoeRouting& routing,
                    const LayerWeights& w);
// The whole layer recomputed in backward (Megatron's --recompute-granularity full).
LayerOutput layer_recomputed(const at::Tensor& x, const LayerInput& in, Strategy& s, const MoeFn& moe);

struct StrategyParam {
  std::string name, help;
};

struct StrategyInfo {
  std::string name, description;
  std::vector<StrategyParam> params;
  std::function<std::unique_ptr<Strategy>(const StrategySpec&)> make;
  // Checks the strategy against a whole point (e.g. chunk count vs tokens); may be empty.
  // Parameter values are checked by constructing the strategy (`make` throws on bad values).
  std::function<void(const StrategySpec&, const ExperimentConfig&)> check_point;
};

const std::map<std::string, StrategyInfo>& strategy_registry();
bool register_strategy(StrategyInfo info);
std::unique_ptr<Strategy> make_strategy(const StrategySpec& spec);

#define MEMFINE_CONCAT_(a, b) a##b
#define MEMFINE_CONCAT(a, b) MEMFINE_CONCAT_(a, b)
#define MEMFINE_REGISTER_STRATEGY(...) \
  static const bool MEMFINE_CONCAT(memfine_registered_, __LINE__) = ::memfine::register_strategy(__VA_ARGS__)

}  // namespace memfine
