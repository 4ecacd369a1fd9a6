#include "core/run/predict.h"

#include <iostream>

#include "core/meter/memory_meter.h"
#include "core/model/flops.h"
#include "core/predict/paper_model.h"
#include "core/record/prediction_record.h"
#include "core/record/table.h"
#include "core/run/validate.h"
#include "core/strategy/registry.h"
#include "core/workload/ep_rank.h"

namespace memfine {

namespace {
// The most token-expert assignments predict routes one by one before it predicts from counts.
constexpr double kMaxRoutedAssignments = double(1 << 25);
}  // namespace

int predict_experiment(const std::string& yaml, bool json_lines) {
  std::vector<std::string> errors;
  std::vector<SweepPoint> points = load_and_validate(yaml, errors, /*runnable_here=*/false);
  if (!errors.empty()) {
    for (const auto& e : errors) std::cerr << e << "\n";
    return 2;
  }
  // Token-level routing as `run` makes it (the same predictions as run's) where the whole file's
  // is small; beyond, the workload's counts per layer and expert, each rank and chunk taking its
  // share: memory and time in proportion to the experts, not to the tokens.
  double assignments = 0;
  for (const auto& p : points) {
    const ExperimentConfig& c = p.config;
    const double routed = c.workload.schedule == "none" ? 2 : double(c.warmup + c.repeats) + 1;  // +1: the hottest rank
    assignments += double(c.ep) * double(c.model.tokens()) * double(c.model.topk) * double(c.model.layers) * routed;
  }
  const bool route_tokens = assignments <= kMaxRoutedAssignments;
  double work_tflop = 0;
  std::vector<json> out;
  int64_t modelled_points = 0;
  for (const auto& p : points) {
    if (p.config.paper.enabled) {
      // Paper scale: the paper's equations only (building this model for real is not the point).
      const PaperScale scale = paper_scale(p.config);
      const PointContext ctx = point_context(p.config);
      for (const auto& s : p.config.strategies) {
        const std::optional<PaperChunks> chunks = make_strategy(s)->paper_chunks(scale.received, scale.s_recv_max);
        out.push_back(paper_prediction_record(
            p.config, ctx, p.id, s,
            chunks ? std::optional<PaperProjection>(project_paper(p.config, *chunks)) : std::nullopt));
      }
      continue;
    }
    // Routing on the host: a CPU build predicts a GPU experiment, and predictions need no device.
    ExperimentConfig on_host = p.config;
    on_host.device = "cpu";
    // Token-level routing as `run` makes it where that is cheap (the same predictions as run's);
    // beyond, the workload's counts per layer and expert, each rank and chunk taking its share:
    // memory in proportion to the experts, not to the tokens.
    const bool tokens = on_host.workload.kind == "router" || route_tokens;
    const EmulatedRank er = tokens ? make_emulated_rank(on_host, on_host.rank, 0, /*tables=*/false)
                                   : make_counts_rank(on_host, on_host.rank);
    // As `run` records them: the largest s' over layers, and their sum for the FLOPs.
    int64_t recv_max = 0, recv_sum = 0;
    for (const auto& l : er.layers) recv_max = std::max(recv_max, l.tokens_received), recv_sum += l.tokens_received;
    // Model FLOPs of one training step (recomputation not counted): what `run` divides by the step
    // time for its tflops, here to size a run before spending device time on it.
    const double step_tflop = step_flops(p.config.model, recv_sum).total() / 1e12;
    const int64_t steps = p.config.warmup + p.config.repeats;
    work_tflop += step_tflop * double(steps * int64_t(p.config.strategies.size()));
    ++modelled_points;
    // The timed steps' routing, as `run` sees them: a scheduled workload routes each step anew, and a
    // strategy that plans per step (MACT) chooses per step; without a schedule every step is alike.
    std::vector<int64_t> steps_to_model;
    if (p.config.workload.schedule == "none")
      steps_to_model = {p.config.warmup};
    else
      for (int64_t it = p.config.warmup; it < p.config.warmup + p.config.repeats; ++it) steps_to_model.push_back(it);
    const PointContext ctx = point_context(p.config);
    // Each step is routed once and every strategy predicted on it.
    struct Predicting {
      std::unique_ptr<Strategy> strategy;
      ImplementationPrediction prediction;
    };
    std::vector<Predicting> ps;
    for (const auto& s : p.config.strategies) {
      Predicting x{make_strategy(s), {}};
      x.prediction.rank = er.rank, x.prediction.tokens_received = recv_max, x.prediction.step_tflop = step_tflop;
      x.prediction.routed_tokens = tokens, x.prediction.steps = steps_to_model;
      ps.push_back(std::move(x));
    }
    for (int64_t it : steps_to_model) {
      EmulatedRank at = er;
      route_step(at, on_host, it);
      for (auto& x : ps) {
        ImplementationPrediction& ip = x.prediction;
        if (!ip.unpredicted_why.empty() || !ip.fits_why.empty()) continue;
        try {
          const Prediction pr = x.strategy->predict(on_host, at);
          if (!ip.worst || pr.activation_bytes > ip.worst->activation_bytes) ip.worst = pr;
          ip.chunks.push_back(pr.chunks);
        } catch (const NotModelled& e) {
          ip.unpredicted_why = e.what();
        } catch (const std::exception& e) {
          if (!is_out_of_memory(e)) throw;
          ip.fits_why = e.what();  // a strategy that plans per step found nothing that fits the budget
        }
      }
    }
    for (size_t i = 0; i < ps.size(); ++i)
      out.push_back(implementation_prediction_record(p.config, ctx, p.id, p.config.strategies[i], ps[i].prediction));
  }
  if (json_lines)
    for (const auto& r : out) std::cout << r.dump() << "\n";
  else
    std::cout << predict_table(out);
  if (modelled_points > 0)
    std::cerr << "memfine predict: " << yaml << ": " << modelled_points << " point(s); `memfine run` would do "
              << work_tflop
              << " TFLOP of model work (warmup and timed steps of every strategy, recomputation not counted)\n";
  return 0;
}

}  // namespace memfine
