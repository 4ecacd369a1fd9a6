// `memfine predict`'s records: the head every record has, then what a model predicted for one
// strategy at one point (the paper's equations at paper scale, the implementation model at ours).
// The predictions are made in core/cli/predict.cpp; this file alone turns them into records.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/predict/memory_model.h"
#include "core/predict/paper_model.h"
#include "core/record/record.h"

namespace memfine {

// The paper's model at paper scale; no projection: the model does not cover the strategy.
json paper_prediction_record(const ExperimentConfig& c, const PointContext& ctx, const std::string& point,
                             const StrategySpec& s, const std::optional<PaperProjection>& projection);

// The implementation model at one point, over the steps it modelled.
struct ImplementationPrediction {
  int64_t rank = 0;
  int64_t tokens_received = 0;               // largest s' over layers, as `run` records it
  double step_tflop = 0;                     // model FLOPs of one training step
  bool routed_tokens = true;                 // token-level routing (as `run` makes it); false: the workload's counts
  std::string unpredicted_why;               // the model does not cover the strategy
  std::string fits_why;                      // a strategy that plans found no plan that fits the budget
  std::optional<Prediction> worst;           // the largest activation peak over the modelled steps
  std::vector<std::vector<int64_t>> chunks;  // per modelled step, the chunks per layer (empty: unchunked)
  std::vector<int64_t> steps;                // the steps modelled
};
json implementation_prediction_record(const ExperimentConfig& c, const PointContext& ctx, const std::string& point,
                                      const StrategySpec& s, const ImplementationPrediction& p);

}  // namespace memfine
