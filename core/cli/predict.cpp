// `memfine predict FILE.yaml`: the memory models' view of an experiment, nothing run (the
// implementation model at the experiment's scale, the paper's equations for a paper: section, the
// cluster-scale projection of a project file).
#include <filesystem>
#include <iostream>

#include "core/cli/commands.h"
#include "core/cli/project_run.h"
#include "core/project/config.h"
#include "core/meter/memory_meter.h"
#include "core/model/flops.h"
#include "core/predict/cost_model.h"
#include "core/predict/paper_model.h"
#include "core/record/environment.h"
#include "core/record/prediction_record.h"
#include "core/record/table.h"
#include "core/run/validate.h"
#include "core/strategy/registry.h"
#include "core/workload/ep_rank.h"

namespace memfine::cli {

namespace fs = std::filesystem;

namespace {
// The most token-expert assignments predict routes one by one before it predicts from counts.
constexpr double kMaxRoutedAssignments = double(1 << 25);

// Paper scale: the paper's equations only (building this model for real is not the point); each
// strategy's shape chosen by what fits there.
void predict_paper(const SweepPoint& p, std::vector<json>& out) {
  const PaperScale scale(p.config);
  const PointContext ctx = point_context(p.config);
  for (const auto& s : p.config.strategies) {
    const ShapeChoice choice =
        make_strategy(s)->choose_shape([&](const StrategyShape& shape) { return scale.fits(shape); });
    std::optional<PaperProjection> projection;
    if (scale.covers(choice.shape)) projection = scale.project(choice.shape, choice.found);
    out.push_back(paper_prediction_record(p.config, ctx, p.id, s, projection));
  }
}

// The timed steps' routing, as `run` sees them: a scheduled workload routes each step anew, and a
// strategy that plans per step (MACT) chooses per step; without a schedule every step is alike.
std::vector<int64_t> steps_to_model(const ExperimentConfig& c) {
  if (c.workload.schedule == "none") return {c.warmup};
  std::vector<int64_t> steps;
  for (int64_t it = c.warmup; it < c.warmup + c.repeats; ++it) steps.push_back(it);
  return steps;
}

// The implementation model at one point: each modelled step routed once and every strategy
// predicted on it. Returns the model FLOPs of one training step (recomputation not counted): what
// `run` divides by the step time for its tflops, here to size a run before spending device time.
double predict_point(const SweepPoint& p, bool route_tokens, std::vector<json>& out) {
  // Routing on the host: a CPU build predicts a GPU experiment, and predictions need no device.
  ExperimentConfig on_host = p.config;
  on_host.device = "cpu";
  const bool tokens = on_host.workload.kind == "router" || route_tokens;
  const EmulatedRank er =
      tokens ? make_emulated_rank(on_host, on_host.rank, 0, /*tables=*/false) : make_counts_rank(on_host, on_host.rank);
  // As `run` records them: the largest s' over layers, and their sum for the FLOPs.
  int64_t recv_max = 0, recv_sum = 0;
  for (const auto& l : er.layers) recv_max = std::max(recv_max, l.tokens_received), recv_sum += l.tokens_received;
  const double step_tflop = step_flops(p.config.model, recv_sum).total() / 1e12;
  struct Predicting {
    std::unique_ptr<Strategy> strategy;
    ImplementationPrediction prediction;
  };
  std::vector<Predicting> ps;
  for (const auto& s : p.config.strategies) {
    Predicting x{make_strategy(s), {}};
    x.prediction.rank = er.rank, x.prediction.tokens_received = recv_max, x.prediction.step_tflop = step_tflop;
    x.prediction.routed_tokens = tokens, x.prediction.steps = steps_to_model(p.config);
    ps.push_back(std::move(x));
  }
  for (int64_t it : steps_to_model(p.config)) {
    EmulatedRank at = er;
    route_step(at, on_host, it);
    for (auto& x : ps) {
      ImplementationPrediction& ip = x.prediction;
      if (!ip.unpredicted_why.empty() || !ip.fits_why.empty()) continue;
      try {
        // The model prices the experiment's own device (a GPU's softmax backward differs).
        const Prediction pr = x.strategy->predict(p.config, at);
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
  const PointContext ctx = point_context(p.config);
  for (size_t i = 0; i < ps.size(); ++i)
    out.push_back(implementation_prediction_record(p.config, ctx, p.id, p.config.strategies[i], ps[i].prediction));
  return step_tflop;
}

// The work's wall time at a cost model's rate: the experiment's own, else its device class's committed
// one (results/cpu/cost_model.json); nothing where there is none.
std::string wall_time(const ExperimentConfig& c, double work_tflop) {
  const fs::path path = !c.cost_model.empty()
                            ? fs::path(c.cost_model)
                            : fs::path(source_dir()) / "results" / device_class(c.device) / "cost_model.json";
  std::error_code ec;
  if (!fs::exists(path, ec)) return "";
  try {
    const CostModel cm = CostModel::load(path.string());
    const double s = work_tflop * 1e12 / cm.flops_per_s();
    const std::string t = s < 90 ? four_digits(s) + " s" : four_digits(s / 60) + " min";
    return "; at least " + t + " at the cost model's rate (" + fs::relative(path, fs::current_path(), ec).string() +
           ": " + four_digits(cm.flops_per_s() / 1e9) + " GFLOP/s of model work in its benchmarked layer's step on " +
           cm.machine() + "; this machine may differ, recomputation and chunks add to it)";
  } catch (const std::exception& e) {
    return "; no wall time: " + std::string(e.what());
  }
}

int predict(const Args& a) {
  const std::string yaml = a.operands[0];
  // A project file (it names a hardware): the cluster-scale projection, as `memfine project`.
  if (is_project_file(yaml)) return project_file(a);
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
  double work_tflop = 0;
  std::vector<json> out;
  int64_t modelled_points = 0;
  for (const auto& p : points) {
    if (p.config.paper.enabled) {
      predict_paper(p, out);
      continue;
    }
    const double step_tflop = predict_point(p, assignments <= kMaxRoutedAssignments, out);
    work_tflop += step_tflop * double((p.config.warmup + p.config.repeats) * int64_t(p.config.strategies.size()));
    ++modelled_points;
  }
  if (a.has("--json"))
    for (const auto& r : out) std::cout << r.dump() << "\n";
  else
    std::cout << predict_table(out);
  if (modelled_points > 0)
    std::cerr << "memfine predict: " << yaml << ": " << modelled_points << " point(s); `memfine run` would do "
              << four_digits(work_tflop)
              << " TFLOP of model work (warmup and timed steps of every strategy, recomputation not counted)"
              << wall_time(points.front().config, work_tflop) << "\n";
  return 0;
}

}  // namespace

Command predict_command() {
  return {"predict",
          "FILE.yaml",
          "the memory model's view of an experiment, nothing run",
          R"(Prints, without running anything, the memory model's predictions per point and strategy: static,
activation and total bytes, whether they fit memory.budget, MACT's chunks per layer, and why a
strategy is not predicted or does not fit; on stderr, the FLOPs a `memfine run` of the file would
do, and the least wall time they take at a cost model's rate (the experiment's cost_model:, else its
device class's committed results/<class>/cost_model.json; recomputation and chunks add to it). Any
build predicts any experiment: a CPU build predicts a GPU one (device: cuda), which the memory model
does not need. Files with a paper: section use the paper's own equations; a project
file (memfine project's: it names a hardware) is projected as `memfine project` projects it.

Routing is made token by token as `run` makes it while the whole file's is small (2^25 token
assignments); beyond, from the workload's counts per layer and expert, each rank and chunk taking
its share ("routing": "counts"), so that memory and time follow the experts, not the tokens.
)",
          {{"--json", "",
            "one JSON line per point and strategy instead (the records' head, then the model's\n"
            "fields: predicted_static_bytes, predicted_activation_bytes, fits, chunks,\n"
            "unpredicted_why, fits_why, tokens_received, step_tflop, routing)"}},
          1,
          1,
          predict};
}

}  // namespace memfine::cli
