// Baseline: capacity capping with Megatron-Core's semantics. Each sending rank lets at most
// capacity = ceil(tokens * topk / experts * capacity_factor) of its assignments reach an expert;
// the rest are dropped (drop_policy "probs": lowest router probability first; "position": latest
// tokens first). With pad: true every expert's input is padded to the most it can receive.
#include <algorithm>
#include <cmath>

#include "core/moe/capacity.h"
#include "core/strategy/registry.h"

namespace memfine {
namespace {

// Which assignments beyond capacity are dropped: the lowest router probability first, or the
// latest tokens first.
enum class DropPolicy { Probs, Position };

}  // namespace
template <>
struct EnumNames<DropPolicy> {
  static constexpr std::pair<DropPolicy, const char*> all[] = {{DropPolicy::Probs, "probs"},
                                                               {DropPolicy::Position, "position"}};
};
namespace {

// What it keeps: a stored (or recomputed) layer whose experts receive only the capped rows, padded
// with pad. The rows that survive the cap are known from the counts alone (which ones survive
// depends on the probabilities, how many does not), so the model predicts it before the step; not
// with recompute: full, where the model misses a transient of the recomputed layer that shows once
// the MoE keeps few rows (tests/test_memory_model.cpp measures how far).
struct CapacityParams {
  StrategyShape shape;
  DropPolicy policy = DropPolicy::Probs;
};

ParamsOf<CapacityParams> params() {
  using P = CapacityParams;
  using S = StrategyShape;
  return {nest(&P::shape, bind(&S::capacity_factor,
                                said(named(number_param("capacity_factor",
                                                        "capacity = ceil(tokens*topk/experts*capacity_factor) per "
                                                        "expert and sending rank",
                                                        1.0, 1e-6, 1e6)),
                                     "factor {v:g}"))),
          bind(&P::policy, said(named(enum_param("drop_policy",
                                                 "'probs' drops the lowest-probability assignments, 'position' the "
                                                 "latest tokens",
                                                 DropPolicy::Probs)),
                                "drops by {v}", {{"probs", "drops lowest prob."}, {"position", "drops by position"}})),
          nest(&P::shape, bind(&S::pad_to_capacity, said(bool_param("pad", "pad each expert's input to capacity", false),
                                                         "", {{"true", "padded"}, {"false", ""}}))),
          nest(&P::shape, bind<S>(said(choice_param("recompute", "'none' stores activations, 'full' recomputes each layer",
                                                    "none", {"none", "full"}),
                                       "recompute {v}", {{"none", "no recompute"}}),
                                  [](const nlohmann::json& v, S& s) { s.recompute_layer = v == "full"; }))};
}

class Capacity : public Strategy {
 public:
  Capacity(const StrategySpec& spec, const CapacityParams& p)
      : Strategy(
            spec, p.shape,
            p.shape.recompute_layer
                ? "capacity with recompute: full is not predicted: the model misses a transient of the recomputed layer"
                : ""),
        factor_(p.shape.capacity_factor),
        policy_(p.policy),
        pad_(p.shape.pad_to_capacity) {}
  void begin_own_step(int64_t) override { assignments_ = dropped_ = local_rows_ = local_kept_ = 0; }
  json own_step_counters() const override {
    // kept_row_fraction: of the rows this rank's experts would compute dropless, the share they do
    // (the records' model FLOPs); on the hottest rank it is below 1 - dropped_fraction.
    return {{"assignments", assignments_},
            {"dropped", dropped_},
            {"dropped_fraction", assignments_ > 0 ? double(dropped_) / double(assignments_) : 0.0},
            {"kept_row_fraction", local_rows_ > 0 ? double(local_kept_) / double(local_rows_) : 1.0}};
  }
  // Real ranks: the job's assignments and drops; the kept share of the rank that keeps the least.
  json merge_rank_counters(const std::vector<json>& ranks) const override {
    int64_t assignments = 0, dropped = 0;
    double kept = 1;
    for (const auto& r : ranks) {
      assignments += r["assignments"].get<int64_t>(), dropped += r["dropped"].get<int64_t>();
      kept = std::min(kept, r["kept_row_fraction"].get<double>());
    }
    return {{"assignments", assignments},
            {"dropped", dropped},
            {"dropped_fraction", assignments > 0 ? double(dropped) / double(assignments) : 0.0},
            {"kept_row_fraction", kept}};
  }
  std::string graph_blocker() const override {
    if (policy_ == DropPolicy::Probs) return "capping by probability reads the router's probabilities on the host";
    return Strategy::graph_blocker();
  }
  void cap_routing(MoeRouting& r, const at::Tensor& probs) override {
    const RankRouting& rr = *r.rank;
    const int64_t T = r.expert_ids.size(0), k = r.expert_ids.size(1);
    const int64_t experts = rr.local_experts * rr.ep;
    const int64_t cap = capacity_per_expert(T, k, experts, factor_);
    // This rank's own tokens, grouped by destination expert.
    at::Tensor own_priority = policy_ == DropPolicy::Probs ? probs.to(at::kDouble).reshape(-1)
                                                 : -at::arange(T, at::kDouble).unsqueeze(1).expand({T, k}).reshape(-1);
    r.own_keep = keep_within_capacity(r.expert_ids.reshape(-1), own_priority, cap).view({T, k});
    // Each peer caps its own tokens the same way before sending.
    at::Tensor group = rr.peer_rank * rr.local_experts + rr.peer_expert;
    at::Tensor peer_priority = policy_ == DropPolicy::Probs ? rr.peer_score : -rr.peer_pos.to(at::kDouble);
    r.peer_keep = keep_within_capacity(group, peer_priority, cap);
    if (pad_) r.pad_rows = cap * rr.ep;
    assignments_ += T * k + rr.peer_pos.numel();
    dropped_ += (T * k - r.own_keep.sum().item<int64_t>()) + (rr.peer_pos.numel() - r.peer_keep.sum().item<int64_t>());
    const at::Tensor local =
        (r.expert_ids >= rr.first_expert).logical_and(r.expert_ids < rr.first_expert + rr.local_experts);
    local_rows_ += local.sum().item<int64_t>() + rr.peer_pos.numel();
    local_kept_ +=
        r.own_keep.to(at::kBool).logical_and(local).sum().item<int64_t>() + r.peer_keep.sum().item<int64_t>();
  }

 private:
  double factor_;
  DropPolicy policy_;
  bool pad_;
  int64_t assignments_ = 0, dropped_ = 0, local_rows_ = 0, local_kept_ = 0;
};

MEMFINE_REGISTER_STRATEGY(drawn(with_counters(
    coded("capacity", "capacity capping (Megatron-Core semantics): drop assignments beyond each expert's capacity",
          params(),
          [](const StrategySpec& s, const CapacityParams& p) { return std::unique_ptr<Strategy>(new Capacity(s, p)); }),
    {{"assignments", "integer", "", "the token-expert assignments this rank's tokens and its peers' made",
      "measured train"},
     {"dropped", "integer", "", "of them, dropped by the cap", "measured train"},
     {"dropped_fraction", "number", "", "dropped over assignments (another model: tables set it apart)",
      "measured train"},
     {"kept_row_fraction", "number", "",
      "of the rows this rank's experts would compute dropless, the share they do (the model FLOPs' rows)",
      "measured train"}}), "#e377c2", "X"));

}  // namespace
}  // namespace memfine
