#include "core/run/measure.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <memory>

#include "core/dist/dist.h"
#include "core/meter/memory_meter.h"
#include "core/meter/profile.h"
#include "core/record/schema.h"
#include "core/run/rank_step.h"
#include "core/run/step.h"
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
  std::unique_ptr<StepGraph> graph;  // `graphs: step`: its timed steps replay this
  int64_t capture_peak = 0;          // the capture's activation peak: what the graph's pool holds
  bool runs() const { return m.status == "ok"; }
};

// Each strategy made from its spec; one that cannot be made is its own error.
std::vector<Contender> contenders(const ExperimentConfig& c, const std::vector<std::string>& skip) {
  std::vector<Contender> cs;
  for (const auto& spec : c.strategies) {
    if (std::find(skip.begin(), skip.end(), spec.label()) != skip.end()) continue;
    Contender k;
    k.m.spec = spec;
    try {
      k.strategy = make_strategy(spec);
      k.m.lossy = k.strategy->lossy();
    } catch (const std::exception& e) {
      k.m.status = "error", k.m.error = e.what();
    }
    cs.push_back(std::move(k));
  }
  return cs;
}

// The point's one state: its weights, data and routing, made once. The first strategy that runs
// takes it; every other strategy's state, and verify's, is a copy (the same weights, data and
// routing in memory of its own: drawing them again, float64 on the CPU from one generator, is what
// an experiment's first step waited on at GPU sizes).
struct PointState {
  std::unique_ptr<TrainState> state;
  int64_t counted = 0;  // what the meter saw allocated while it was made
};
PointState make_point_state(const ExperimentConfig& c, const Dist* dist) {
  MemoryMeter& meter = MemoryMeter::get(c.device);
  const int64_t before = meter.current_bytes();
  PointState p;
  p.state = dist ? make_rank_state(c, *dist) : make_train_state(c);
  p.counted = meter.current_bytes() - before;
  return p;
}

// Static memory: allocated when a strategy's state is made, audited against what the meter saw on
// the CPU (one process: on real ranks the collective library's threads allocate tensors of their
// own meanwhile).
void allocate(const ExperimentConfig& c, PointState& point, std::vector<Contender>& cs, const Dist* dist) {
  MemoryMeter& meter = MemoryMeter::get(c.device);
  const TrainState* source = point.state.get();
  for (auto& k : cs) {
    if (!k.runs()) continue;
    int64_t counted = point.counted;
    if (point.state) {
      k.state = std::move(point.state);
    } else {
      const int64_t before = meter.current_bytes();
      k.state = copy_train_state(*source);
      counted = meter.current_bytes() - before;
    }
    k.m.static_bytes = k.state->static_bytes();
    if (c.device == "cpu" && !dist && counted < k.m.static_bytes)
      throw std::logic_error("static accounting: " + std::to_string(k.m.static_bytes) + " bytes claimed, " +
                             std::to_string(counted) + " allocated");
    if (c.budget >= 0 && k.m.static_bytes > c.budget) {
      k.m.status = "oom";
      k.m.error =
          "static memory " + fmt_bytes(double(k.m.static_bytes)) + " exceeds the budget " + fmt_bytes(double(c.budget));
      if (k.state.get() != source) k.state.reset();
    }
  }
  // A source over the budget is dropped only once every copy of it is made.
  for (auto& k : cs)
    if (k.state && k.m.status != "ok") k.state.reset();
}

// `verify: true`: each dropless strategy against the reference computed once on the point's state
// (`all` false: the lossy ones only, whose error is measured in every run). On one process, a
// strategy whose check runs out of memory (MACT finding nothing that fits) is not verified, and is
// measured, or out of memory, on its own; one that fails otherwise is its own error.
void verify(const ExperimentConfig& c, const TrainState& point, std::vector<Contender>& cs, const Dist* dist,
            bool all) {
  const Verifier verifier(point, dist);
  for (auto& k : cs) {
    if (!k.runs() || (!all && !k.m.lossy)) continue;
    try {
      if (const auto err = verifier.error_of(k.m.spec))
        k.m.grad_err = *err, k.m.verify_tolerance = verify_tolerance(c.dtype);
    } catch (const std::exception& e) {
      if (dist) throw;  // the other ranks would wait in its collectives: the job ends
      if (!is_out_of_memory(e)) k.m.status = "error", k.m.error = std::string("verify: ") + e.what();
    }
  }
}

// `graphs: step`, before the first timed step: the strategy's pass captured (under the budget, as
// a step; out of memory is a result) and its replay held to the same step run eagerly (a replay
// that differs is an error), or why it runs eagerly.
void capture(const ExperimentConfig& c, GuardedStep& guarded, Contender& k, int64_t it, const Dist* dist) {
  std::string why = dist ? "real ranks: their collectives run eagerly" : k.strategy->graph_blocker();
  if (why.empty()) {
    auto graph = std::make_unique<StepGraph>();
    StepOutcome o = guarded.run(it, k.m.static_bytes, [&] {
      capture_train_step(*k.state, *k.strategy, it, *graph);
      return 0.0;
    });
    const int64_t peak = o.peak;
    if (o.ok())
      o = guarded.run(it, k.m.static_bytes, [&] {
        k.m.graph_err = replay_error(*k.state, *k.strategy, *graph, it);
        return 0.0;
      });
    if (o.ok() && k.m.graph_err > verify_tolerance(c.dtype)) {
      k.m.status = "error";
      k.m.error = "graphs: the replayed step differs from the eager one by " + std::to_string(k.m.graph_err) +
                  " (tolerance " + std::to_string(verify_tolerance(c.dtype)) + ")";
      k.state.reset();
      return;
    }
    if (o.ok()) {
      k.capture_peak = peak, k.m.graph_pool_bytes = graph->pool_bytes(), k.m.graphs = "step";
      k.graph = std::move(graph);
      return;
    }
    if (o.status == "oom") {
      k.m.status = o.status, k.m.error = o.error;
      k.state.reset();
      return;
    }
    why = "its capture failed: " + o.error;
  }
  k.m.graphs_why = why;
}

// Warmup and timed steps, each strategy in turn within a step; out of memory is a result.
void run_steps(const ExperimentConfig& c, std::vector<Contender>& cs, const std::function<void()>& tick,
               const Dist* dist) {
  GuardedStep guarded(c, dist);
  const int64_t steps = c.warmup + c.repeats;
  for (int64_t it = 0; it < steps; ++it) {
    for (auto& k : cs) {
      if (!k.state) {
        tick();
        continue;
      }
      route_step(k.state->rank, c, it);  // a scheduled workload routes differently each step
      k.m.static_bytes = k.state->static_bytes();
      if (c.graphs == "step" && it == c.warmup) {
        capture(c, guarded, k, it, dist);
        if (!k.state) {
          tick();
          continue;
        }
      }
      const StepOutcome o = guarded.run(it, k.m.static_bytes, [&] {
        return k.graph ? replay_train_step(*k.state, *k.graph) : train_step(*k.state, *k.strategy, it);
      });
      if (!o.ok()) {
        k.m.status = o.status, k.m.error = o.error;
        k.state.reset();
      } else if (it >= c.warmup) {
        k.m.loss = o.loss;
        k.m.ms.push_back(o.ms);
        k.m.peaks.push_back(double(std::max(o.peak, k.capture_peak)));
        k.m.ops.push_back(o.host.ops), k.m.host_syncs.push_back(o.host.host_syncs);
        k.step_counters.push_back(k.strategy->step_counters());
      }
      tick();
    }
  }
}

// `--profile DIR` and `--memory-history DIR`: one more step of each strategy still running, under
// the profiler or with the allocator's history recorded (its time and peak are not recorded: that
// work would be in them). `watch` runs a step and writes what it saw to the path it is given.
using Watch = std::function<void(const std::string&, const std::function<void()>&)>;
void watched_steps(const SweepPoint& pt, std::vector<Contender>& cs, const std::string& dir, const char* ext,
                   const Watch& watch, const Dist* dist) {
  const ExperimentConfig& c = pt.config;
  GuardedStep guarded(c, dist);
  const int64_t step = c.warmup + c.repeats;
  auto safe = [](std::string s) {
    for (char& ch : s)
      if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '-' && ch != '_' && ch != '.' && ch != '=') ch = '_';
    return s;
  };
  for (auto& k : cs) {
    if (!k.state) continue;
    const std::string path = dir + "/" + safe(c.name) + "." + safe(pt.id) + "." + safe(k.m.spec.label()) +
                             (dist ? ".rank" + std::to_string(dist->rank()) : std::string()) + ext;
    route_step(k.state->rank, c, step);
    guarded.run(step, k.state->static_bytes(), [&] {
      double loss = 0;
      watch(path, [&] { loss = k.graph ? replay_train_step(*k.state, *k.graph) : train_step(*k.state, *k.strategy, step); });
      return loss;
    });
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
  for (const auto& l : er.layers) {
    rt.tokens_received = std::max(rt.tokens_received, l.tokens_received);
    rt.tokens_received_sum += l.tokens_received;
    rt.overload = std::max(rt.overload, l.overload_factor);
    rt.per_layer.push_back(l.tokens_received);
  }
  if (c.workload.schedule != "none") {  // s' per timed step and layer; the record's s' is the hottest step's
    EmulatedRank stepped = er;
    for (int64_t it = c.warmup; it < c.warmup + c.repeats; ++it) {
      route_step(stepped, c, it);
      json row = json::array();
      for (size_t l = 0; l < stepped.layers.size(); ++l) {
        const auto& layer = stepped.layers[l];
        row.push_back(layer.tokens_received);
        if (it == c.warmup) rt.tokens_received = 0, rt.overload = 0, rt.per_layer[l] = 0;
        rt.tokens_received = std::max(rt.tokens_received, layer.tokens_received);
        rt.overload = std::max(rt.overload, layer.overload_factor);
        rt.per_layer[l] = std::max(rt.per_layer[l].get<int64_t>(), layer.tokens_received);
      }
      rt.per_step.push_back(row);
    }
  }
  return rt;
}

// The strategy's counters over its timed steps, each declared by the schema or by the strategy.
json declared_counters(const Contender& k, int64_t first_step) {
  json counters = k.strategy->record_counters(k.step_counters, first_step);
  for (const auto& [key, value] : counters.items())
    if (!record_field(key) && !strategy_counter(k.m.spec.name, key))
      throw std::logic_error("strategy '" + k.m.spec.name + "' writes counter '" + key +
                             "', which it does not declare (StrategyInfo::counters)");
  return counters;
}

// The model's prediction for the step whose peak each record reports (a schedule routes each
// step differently; the step before the first timed one when none was measured), each step's
// routing made once.
void predict(const ExperimentConfig& c, const EmulatedRank& er, std::vector<Contender>& cs) {
  std::map<int64_t, EmulatedRank> routed;
  for (auto& k : cs) {
    if (!k.strategy) continue;
    const int64_t worst =
        k.m.peaks.empty() ? 0 : int64_t(std::max_element(k.m.peaks.begin(), k.m.peaks.end()) - k.m.peaks.begin());
    auto it = routed.find(c.warmup + worst);
    if (it == routed.end()) {
      it = routed.emplace(c.warmup + worst, er).first;
      route_step(it->second, c, c.warmup + worst);
    }
    try {
      const Prediction pr = k.strategy->predict(c, it->second);
      k.m.predicted_activation_bytes = pr.activation_bytes;
      if (pr.host_bytes > 0) k.m.predicted_host_bytes = pr.host_bytes;
    } catch (const std::exception& e) {  // not modelled, or nothing it may choose fits
      k.m.predicted_activation_bytes = nullptr;
      k.m.unpredicted_why = e.what();
    }
  }
}

}  // namespace

PointResult measure_point(const SweepPoint& pt, const std::vector<std::string>& skip, const std::function<void()>& tick,
                          const Dist* dist, const RunOptions* opt) {
  const ExperimentConfig& c = pt.config;
  std::vector<Contender> cs = contenders(c, skip);
  PointResult out;
  if (cs.empty()) return out;
  PointState point = make_point_state(c, dist);
  const EmulatedRank er = point.state->rank;  // the records' routing, taken before any step
  const bool lossy = std::any_of(cs.begin(), cs.end(), [](const Contender& k) { return k.runs() && k.m.lossy; });
  if (c.verify || lossy) verify(c, *point.state, cs, dist, c.verify);
  allocate(c, point, cs, dist);
  point.state.reset();  // where no strategy runs
  run_steps(c, cs, tick, dist);
  if (opt && !opt->profile_dir.empty()) watched_steps(pt, cs, opt->profile_dir, ".json", profile_step, dist);
  if (opt && !opt->history_dir.empty()) watched_steps(pt, cs, opt->history_dir, ".pickle", memory_history_step, dist);
  out.routing = point_routing(c, er, dist);
  predict(c, er, cs);
  for (auto& k : cs) {
    if (k.strategy) k.m.counters = declared_counters(k, c.warmup);
    out.strategies.push_back(std::move(k.m));
  }
  return out;
}

}  // namespace memfine
