#include "core/run/measure.h"

#include <algorithm>
#include <memory>

#include "core/dist/dist.h"
#include "core/meter/memory_meter.h"
#include "core/run/step.h"
#include "core/run/train_step.h"
#include "core/run/verify.h"
#include "core/strategy/registry.h"
#include "core/workload/workload.h"

namespace memfine {
namespace {

struct Contender {
  Measured m;
  std::unique_ptr<Strategy> strategy;
  std::unique_ptr<TrainState> state;
  std::vector<json> step_counters;  // per timed step
};

// Static memory: allocated when a state is made, audited against what the meter saw on the CPU
// (one process).
void allocate(const ExperimentConfig& c, std::vector<Contender>& cs, const Dist* dist) {
  MemoryMeter& meter = MemoryMeter::get(c.device);
  const TrainState* first = nullptr;  // every later strategy copies it: same weights, data, routing
  for (auto& k : cs) {
    const int64_t before = meter.current_bytes();
    k.state = first ? copy_train_state(*first) : dist ? make_rank_state(c, *dist) : make_train_state(c);
    k.m.static_bytes = k.state->static_bytes();
    const int64_t counted = meter.current_bytes() - before;
    // One process only: on real ranks the collective library's threads allocate and free tensors
    // of their own while the state is made (the meter counts the whole process), so the difference
    // is not this state's alone.
    if (c.device == "cpu" && !dist && counted < k.m.static_bytes)
      throw std::logic_error("static accounting: " + std::to_string(k.m.static_bytes) + " bytes claimed, " +
                             std::to_string(counted) + " allocated");
    if (c.budget >= 0 && k.m.static_bytes > c.budget) {
      k.m.status = "oom";
      k.m.error =
          "static memory " + fmt_bytes(double(k.m.static_bytes)) + " exceeds the budget " + fmt_bytes(double(c.budget));
      k.state.reset();
    }
    if (k.state && !first) first = k.state.get();
  }
}

// Warmup and timed steps, each strategy in turn within a step; out of memory is a result.
void run_steps(const ExperimentConfig& c, std::vector<Contender>& cs, const std::function<void()>& tick,
               const Dist* dist) {
  GuardedStep guarded(c, dist);
  const int64_t steps = c.warmup + c.repeats;
  for (int64_t it = 0; it < steps; ++it) {
    for (auto& k : cs) {
      if (k.m.status != "ok") {
        tick();
        continue;
      }
      route_step(k.state->rank, c, it);  // a scheduled workload routes differently each step
      k.m.static_bytes = k.state->static_bytes();
      const StepOutcome o = guarded.run(it, k.m.static_bytes, [&] { return train_step(*k.state, *k.strategy, it); });
      if (!o.ok()) {
        k.m.status = o.status, k.m.error = o.error;
        k.state.reset();
      } else if (it >= c.warmup) {
        k.m.loss = o.loss;
        k.m.ms.push_back(o.ms);
        k.m.peaks.push_back(double(o.peak));
        k.step_counters.push_back(k.strategy->step_counters());
      }
      tick();
    }
  }
}

PointRouting point_routing(const ExperimentConfig& c, const EmulatedRank& er, const Dist* dist) {
  PointRouting rt;
  rt.rank = er.rank;
  rt.world = dist ? dist->world() : 1;
  if (dist) rt.backend = dist->backend();
  // Tokens each expert receives per layer (all ranks), for Figure 2-style plots; with a schedule,
  // at its peak step.
  rt.expert_tokens_step = c.workload.schedule == "none" ? 0 : int64_t(c.workload.peak_step);
  if (c.workload.kind != "router" && c.model.experts * c.model.layers <= 8192)
    for (int64_t l = 0; l < c.model.layers; ++l)
      rt.expert_tokens.push_back(expert_counts(c.workload, c.model, c.ep, l, c.seed, rt.expert_tokens_step));
  if (c.workload.schedule != "none") {  // s' per timed step and layer
    EmulatedRank stepped = er;
    for (int64_t it = c.warmup; it < c.warmup + c.repeats; ++it) {
      route_step(stepped, c, it);
      json row = json::array();
      for (const auto& l : stepped.layers) row.push_back(l.tokens_received);
      rt.per_step.push_back(row);
    }
  }
  for (const auto& l : er.layers) {
    rt.tokens_received = std::max(rt.tokens_received, l.tokens_received);
    rt.tokens_received_sum += l.tokens_received;
    rt.overload = std::max(rt.overload, l.overload_factor);
    rt.per_layer.push_back(l.tokens_received);
  }
  return rt;
}

}  // namespace

PointResult measure_point(const SweepPoint& pt, const std::vector<std::string>& skip, const std::function<void()>& tick,
                          const Dist* dist) {
  const ExperimentConfig& c = pt.config;
  std::vector<Contender> cs;
  for (const auto& spec : c.strategies) {
    if (std::find(skip.begin(), skip.end(), spec.label()) != skip.end()) continue;
    Contender k;
    k.m.spec = spec;
    k.strategy = make_strategy(spec);
    cs.push_back(std::move(k));
  }
  PointResult out;
  if (cs.empty()) return out;
  if (c.verify) {
    std::vector<StrategySpec> specs;
    for (const auto& k : cs) specs.push_back(k.m.spec);
    const auto errors = verify_strategies(c, specs, dist);
    for (size_t i = 0; i < cs.size(); ++i)
      if (errors[i]) cs[i].m.grad_err = *errors[i], cs[i].m.verify_tolerance = verify_tolerance(c.dtype);
  }
  allocate(c, cs, dist);
  run_steps(c, cs, tick, dist);

  // Routing only: cheap next to a step. A real rank's routing is its own.
  EmulatedRank er = make_emulated_rank(c, dist ? dist->rank() : c.rank);
  er.real = dist != nullptr;
  out.routing = point_routing(c, er, dist);
  for (auto& k : cs) {
    k.m.counters = k.strategy->record_counters(k.step_counters, c.warmup);
    // The prediction is for the step whose peak the record reports (a schedule routes each step
    // differently); the step before the first timed one when none was measured.
    const int64_t worst =
        k.m.peaks.empty() ? 0 : int64_t(std::max_element(k.m.peaks.begin(), k.m.peaks.end()) - k.m.peaks.begin());
    EmulatedRank at = er;
    route_step(at, c, c.warmup + worst);
    try {
      const Prediction pr = k.strategy->predict(c, at);
      k.m.predicted_activation_bytes = pr.activation_bytes;
      if (pr.host_bytes > 0) k.m.predicted_host_bytes = pr.host_bytes;
    } catch (const std::exception& e) {  // not modelled, or nothing it may choose fits
      k.m.predicted_activation_bytes = nullptr;
      k.m.unpredicted_why = e.what();
    }
    out.strategies.push_back(std::move(k.m));
  }
  return out;
}

}  // namespace memfine
