#include "core/run/predict.h"

#include <iostream>

#include "core/meter/memory_meter.h"
#include "core/model/flops.h"
#include "core/predict/paper_model.h"
#include "core/record/record.h"
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
        json r = new_record(p.config, ctx, p.id, s, "predicted");
        r["model"] = "paper";
        const std::optional<PaperChunks> chunks = make_strategy(s)->paper_chunks(scale.received, scale.s_recv_max);
        if (!chunks) {
          r["status"] = "unpredicted";
          r["unpredicted_why"] = "the paper's model does not cover '" + s.name + "'";
        } else {
          const PaperProjection pr = project_paper(p.config, *chunks);
          r["parameters"] = pr.parameters;
          r["static_gb"] = pr.static_bytes / 1e9;
          r["activation_gb"] = pr.activation_bytes / 1e9;
          r["total_gb"] = (pr.static_bytes + pr.activation_bytes) / 1e9;
          r["tokens_received"] = pr.received;
          r["s_recv_max"] = pr.s_recv_max;
          r["chunks"] = pr.chunks;
          r["fits"] = pr.fits;
          r["device_gb"] = double(p.config.paper.device_memory) / 1e9;
          r["assumptions"] = pr.assumptions;
        }
        out.push_back(std::move(r));
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
    struct Predicted {
      json record;
      std::unique_ptr<Strategy> strategy;
      Prediction worst;
      json chunks = json::array();
      bool chunked = false, done = false;
    };
    std::vector<Predicted> ps;
    for (const auto& s : p.config.strategies) {
      Predicted x;
      x.record = new_record(p.config, ctx, p.id, s, "predicted");
      json& r = x.record;
      r["model"] = "implementation";
      r["rank"] = er.rank, r["tokens_received"] = recv_max, r["step_tflop"] = step_tflop;
      r["routing"] = tokens ? "tokens" : "counts";
      r["predicted_static_bytes"] = nullptr, r["predicted_activation_bytes"] = nullptr, r["fits"] = nullptr;
      x.strategy = make_strategy(s);
      ps.push_back(std::move(x));
    }
    for (int64_t it : steps_to_model) {
      EmulatedRank at = er;
      route_step(at, on_host, it);
      for (auto& x : ps) {
        if (x.done) continue;
        try {
          const Prediction pr = x.strategy->predict(on_host, at);
          if (x.worst.phase.empty() || pr.activation_bytes > x.worst.activation_bytes) x.worst = pr;
          x.chunked |= !pr.chunks.empty();
          x.chunks.push_back(pr.chunks);
        } catch (const NotModelled& e) {
          x.record["status"] = "unpredicted";
          x.record["unpredicted_why"] = e.what();
          x.done = true;
        } catch (const std::exception& e) {
          if (!is_out_of_memory(e)) throw;
          // A strategy that plans per step found nothing that fits the budget.
          x.record["fits"] = false;
          x.record["fits_why"] = e.what();
          x.done = true;
        }
      }
    }
    for (auto& x : ps) {
      json& r = x.record;
      if (!x.done) {
        r["predicted_static_bytes"] = x.worst.static_bytes;
        r["predicted_activation_bytes"] = x.worst.activation_bytes;
        r["peak_phase"] = x.worst.phase;
        if (x.chunked) {  // per layer; per step and layer under a schedule, as run records them
          r["chunks"] = steps_to_model.size() == 1 ? x.chunks[0] : x.chunks;
          if (steps_to_model.size() > 1) r["chunk_steps"] = steps_to_model;
        }
        r["fits"] = p.config.budget < 0 ? json(nullptr)
                                        : json(x.worst.static_bytes + x.worst.activation_bytes <= p.config.budget);
      }
      out.push_back(std::move(r));
    }
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
