#include "core/run/predict.h"

#include <iostream>

#include "core/meter/flops.h"
#include "core/predict/paper_model.h"
#include "core/record/record.h"
#include "core/run/validate.h"
#include "core/strategy/strategy.h"
#include "core/meter/memory_meter.h"
#include "core/workload/ep_rank.h"

namespace memfine {

int predict_experiment(const std::string& yaml) {
  std::vector<std::string> errors;
  std::vector<SweepPoint> points = load_and_validate(yaml, errors, /*runnable_here=*/false);
  if (!errors.empty()) {
    for (const auto& e : errors) std::cerr << e << "\n";
    return 2;
  }
  double work_tflop = 0;
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
          r["note"] = "the paper's model does not cover '" + s.name + "'";
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
        std::cout << r.dump() << "\n";
      }
      continue;
    }
    // Routing on the host: a CPU build predicts a GPU experiment, and predictions need no device.
    ExperimentConfig on_host = p.config;
    on_host.device = "cpu";
    const EmulatedRank er = make_emulated_rank(on_host, on_host.rank);
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
    if (p.config.workload.schedule == "none") steps_to_model = {p.config.warmup};
    else
      for (int64_t it = p.config.warmup; it < p.config.warmup + p.config.repeats; ++it) steps_to_model.push_back(it);
    const PointContext ctx = point_context(p.config);
    for (const auto& s : p.config.strategies) {
      json r = new_record(p.config, ctx, p.id, s, "predicted");
      r["model"] = "implementation";
      r["rank"] = er.rank, r["tokens_received"] = recv_max, r["step_tflop"] = step_tflop;
      r["predicted_static_bytes"] = nullptr, r["predicted_activation_bytes"] = nullptr, r["fits"] = nullptr;
      try {
        const auto strategy = make_strategy(s);
        Prediction worst;
        json chunks = json::array();
        bool chunked = false;
        for (int64_t it : steps_to_model) {
          EmulatedRank at = er;
          route_step(at, on_host, it);
          const Prediction pr = strategy->predict(on_host, at);
          if (worst.phase.empty() || pr.activation_bytes > worst.activation_bytes) worst = pr;
          chunked |= !pr.chunks.empty();
          chunks.push_back(pr.chunks);
        }
        r["predicted_static_bytes"] = worst.static_bytes;
        r["predicted_activation_bytes"] = worst.activation_bytes;
        r["peak_phase"] = worst.phase;
        if (chunked) {  // per layer; per step and layer under a schedule, as run records them
          r["chunks"] = steps_to_model.size() == 1 ? chunks[0] : chunks;
          if (steps_to_model.size() > 1) r["chunk_steps"] = steps_to_model;
        }
        r["fits"] = p.config.budget < 0 ? json(nullptr) : json(worst.static_bytes + worst.activation_bytes <= p.config.budget);
      } catch (const NotModelled& e) {
        r["status"] = "unpredicted";
        r["note"] = e.what();
      } catch (const std::exception& e) {
        if (!is_out_of_memory(e)) throw;
        // A strategy that plans per step found nothing that fits the budget.
        r["fits"] = false;
        r["note"] = e.what();
      }
      std::cout << r.dump() << "\n";
    }
  }
  if (modelled_points > 0)
    std::cerr << "memfine predict: " << yaml << ": " << modelled_points << " point(s); `memfine run` would do "
              << work_tflop << " TFLOP of model work (warmup and timed steps of every strategy, recomputation not counted)\n";
  return 0;
}

}  // namespace memfine
