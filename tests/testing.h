// Small configurations and comparisons shared by the tests.
#pragma once
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "core/config/config.h"
#include "core/meter/memory_meter.h"
#include "core/run/rank_step.h"
#include "core/strategy/registry.h"

namespace memfine::test_util {

inline ExperimentConfig tiny_config(const std::string& dtype = "float64", const std::string& workload = "zipf",
                                    int64_t ep = 4) {
  ExperimentConfig c;
  c.name = "test";
  c.seed = 3;
  c.dtype = dtype;
  c.model.layers = 2;
  c.model.hidden = 16;
  c.model.heads = 4;
  c.model.kv_heads = 2;
  c.model.head_dim = 4;
  c.model.ffn_hidden = 24;
  c.model.experts = 8;
  c.model.topk = 2;
  c.model.seq = 24;
  c.model.micro_batch = 2;
  c.model.shared_experts = 1;
  c.ep = ep;
  c.workload.kind = workload;
  c.workload.alpha = 2.0;
  return c;
}

inline StrategySpec spec(const std::string& name, std::map<std::string, std::string> params = {}) {
  StrategySpec s;
  s.name = name;
  for (auto& [k, v] : params) s.written[k] = YAML::Load(v);
  return s;
}

// The activation peak of one training step on the CPU meter: bytes allocated beyond those in use
// when the step began. `warm_steps` run first, unmeasured (state settled, as in a timed step).
inline int64_t step_peak(const ExperimentConfig& c, const StrategySpec& sp, int64_t warm_steps = 0) {
  MemoryMeter& meter = MemoryMeter::get("cpu");
  auto st = make_train_state(c);
  auto s = make_strategy(sp);
  for (int64_t i = 0; i < warm_steps; ++i) train_step(*st, *s, i);
  meter.reset_peak();
  const int64_t start = meter.current_bytes();
  train_step(*st, *s, warm_steps);
  return meter.peak_bytes() - start;
}

// Loss and gradients (parameters, then the input) after one step without the update.
struct Grads {
  double loss;
  std::vector<at::Tensor> grads;
};

inline Grads loss_and_grads(const ExperimentConfig& c, const StrategySpec& sp) {
  auto st = make_train_state(c, true);
  auto s = make_strategy(sp);
  Grads g;
  g.loss = train_step(*st, *s, 0, false);
  for (const auto& p : st->model.parameters()) g.grads.push_back(p.grad().clone());
  g.grads.push_back(st->input.grad().clone());
  return g;
}

// max |a - b| / max |b|, in double on the CPU (the two may be on different devices and dtypes).
inline double rel_diff(const at::Tensor& a, const at::Tensor& b) {
  const at::Tensor ad = a.to(at::kCPU, at::kDouble), bd = b.to(at::kCPU, at::kDouble);
  return (ad - bd).abs().max().item<double>() / std::max(bd.abs().max().item<double>(), 1e-300);
}

inline double max_rel_diff(const Grads& a, const Grads& b) {
  double worst = std::abs(a.loss - b.loss) / std::max(std::abs(b.loss), 1e-300);
  for (size_t i = 0; i < a.grads.size(); ++i) worst = std::max(worst, rel_diff(a.grads[i], b.grads[i]));
  return worst;
}

}  // namespace memfine::test_util
