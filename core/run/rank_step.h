// One rank's state and its step, the benchmark's and training's alike: forward through the layers
// as the strategy says, loss, backward, Adam. Static memory (parameters, gradients, optimizer
// state, inputs) is allocated when the state is made, so a step's allocations are its activations
// alone.
#pragma once
#include <ATen/ATen.h>

#include <memory>

#include "core/config/config.h"
#include "core/dist/dist.h"
#include "core/model/model.h"
#include "core/model/optimizer.h"
#include "core/run/graph_step.h"
#include "core/strategy/strategy.h"
#include "core/workload/ep_rank.h"

namespace memfine {

struct TrainState {
  ExperimentConfig cfg;
  Model model;
  EmulatedRank rank;
  // The stand-in model (vocab 0): [tokens, hidden] first layer's input and the final RMSNorm's
  // regression target. A language model: [tokens] token ids in, and the next tokens (int64),
  // filled per step by its trainer (core/train/train.h).
  at::Tensor input;
  at::Tensor target;
  // Set: each layer's router assignments per expert of the last forward (LayerInput::expert_counts).
  std::vector<at::Tensor>* expert_counts = nullptr;
  std::unique_ptr<Adam> adam;
  const Dist* dist = nullptr;  // real ranks: this is rank dist->rank() of the expert-parallel group
  // Parameters + gradients + optimizer state + inputs: the paper's static memory for this rank.
  int64_t static_bytes() const;
};

// `input_requires_grad` makes the input a leaf with a gradient (gradient tests).
std::unique_ptr<TrainState> make_train_state(const ExperimentConfig& c, bool input_requires_grad = false);

// The single-process computation of the whole global batch that `ep` real ranks share: every
// rank's tokens (as micro-batches), every expert, the same weights, routing and data. Real ranks'
// loss and gradients must equal it.
std::unique_ptr<TrainState> make_global_reference(const ExperimentConfig& c, bool input_requires_grad = false);

// Another strategy's state at the same point: the same weights, data and routing as `src` (which
// has not stepped yet), in memory of its own. Drawing them again (float64 on the CPU from one
// generator) is what an experiment's first step waited on at GPU sizes: minutes for nine strategies.
std::unique_ptr<TrainState> copy_train_state(const TrainState& src);

// For real ranks: make this rank's state (its tokens, its experts).
std::unique_ptr<TrainState> make_rank_state(const ExperimentConfig& c, const Dist& dist,
                                            bool input_requires_grad = false);

// Forward and loss only (the graph is kept for a later backward).
at::Tensor forward_loss(TrainState& st, Strategy& s, int64_t step);

// A pass: gradients zeroed, forward, backward; the loss as a device scalar (read it after).
at::Tensor forward_backward(TrainState& st, Strategy& s, int64_t step);

// A full step; returns the loss. Gradients are zeroed first; `update` false skips Adam (tests).
double train_step(TrainState& st, Strategy& s, int64_t step, bool update = true);

// `graphs: step` (core/run/graph_step.h): step `step`'s pass captured into `graph` (nothing
// computed: the timed steps replay it), and one step replayed with Adam's update after it.
void capture_train_step(TrainState& st, Strategy& s, int64_t step, StepGraph& graph);
double replay_train_step(TrainState& st, StepGraph& graph, bool update = true);

}  // namespace memfine
