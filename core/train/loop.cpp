#include "core/train/train.h"

#include <signal.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <sstream>

#include "core/dist/dist.h"
#include "core/dist/gather.h"
#include "core/record/results.h"
#include "core/record/table.h"
#include "core/record/train_record.h"
#include "core/run/progress.h"
#include "core/run/rank_step.h"
#include "core/run/step.h"
#include "core/run/threads.h"
#include "core/run/verify.h"
#include "core/strategy/registry.h"
#include "core/util/say.h"
#include "core/train/checkpoint.h"
#include "core/train/data.h"
#include "core/train/schedule.h"
#include "core/util/hash.h"
#include "core/workload/corpus.h"
#include "core/workload/workload.h"

namespace memfine {

namespace fs = std::filesystem;

namespace {

// True on every rank when it is on rank 0.
bool rank0_says(const Dist* d, bool v) {
  if (!d) return v;
  at::Tensor t = at::tensor({d->rank() == 0 ? int64_t(v) : int64_t(0)}, at::kLong);
  d->allreduce_sum(t);
  return t.item<int64_t>() != 0;
}

std::string safe_name(const std::string& s) {
  std::string out;
  for (char ch : s) out += (std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '.') ? ch : '_';
  return out;
}

// The configuration a checkpoint belongs to (strategies aside: the checkpoint names its own).
std::string config_digest(const ExperimentConfig& c) {
  json j = config_to_json(c);
  j.erase("strategies");
  const std::string s = j.dump();
  return hex64(hash_bytes(s.data(), s.size()));
}

// s' of a layer as `ep` ranks would see it: the rows of the hottest rank (experts split evenly in
// order). The overload factor is s' over the mean, s' * ep / sum(counts): readers derive it.
int64_t hottest_rank_rows(const at::Tensor& counts, int64_t ep) {
  return counts.view({ep, -1}).sum(1).max().item<int64_t>();
}

struct RunContext {
  const Job& job;
  const SweepPoint& point;
  const Corpus& corpus;
  Progress& progress;
  const PointContext& ctx;
};

// One strategy's training run. Returns false when it failed (an error, not out of memory).
bool train_one(const RunContext& rc, const StrategySpec& spec) {
  const ExperimentConfig& c = rc.point.config;
  const TrainConfig& t = c.train;
  const Dist* dist = rc.job.dist.get();
  const std::string& point = rc.point.id;
  const std::string label = spec.label();
  // The records are the truth: steps 0..n-1 are recorded, whole (start_job checked them).
  int64_t n = 0;
  while (rc.job.has(point, label, n)) ++n;
  if (n == t.steps || (n > 0 && rc.job.status(point, label, n - 1) != "ok")) {
    for (int64_t s = 0; s < t.steps; ++s) rc.progress.tick(label + ": recorded");
    return true;
  }
  std::map<int64_t, double> recorded_loss;  // rank 0's, for the steps that run again
  if (rc.job.results)
    for (const auto& r : rc.job.results->records())
      if (r["point"] == point && r["strategy"] == label && r.value("loss", json()).is_number())
        recorded_loss[r["step"].get<int64_t>()] = r["loss"].get<double>();

  GuardedStep guarded(c, dist, /*plans_agree=*/true);  // MACT over learned routing plans from shared counts
  auto st = dist ? make_rank_state(c, *dist) : make_train_state(c);
  std::vector<at::Tensor> counts;
  st->expert_counts = &counts;
  auto strategy = make_strategy(spec);
  auto plain = make_strategy(StrategySpec{strategy_of_role(Role::Reference)});
  const int64_t static_bytes = st->static_bytes();
  TrainedRun run{static_bytes, t.stats_ep, dist ? dist->world() : 0};
  if (c.verify && n == 0) {  // one process (start_job refuses verify on real ranks)
    set_step_tokens(*st, rc.corpus, 0);
    if (const auto err = verify_on_state(*st, spec))
      run.grad_err = *err, run.verify_tolerance = verify_tolerance(c.dtype);
  }
  const Checkpoints ckpt((fs::path(rc.job.dir) / "checkpoints" / (safe_name(point) + "__" + safe_name(label))).string(),
                         dist, point, label, config_digest(c));
  const int64_t from = ckpt.load(*st, n - 1) + 1;
  for (int64_t s = 0; s < from; ++s) rc.progress.tick("");  // in the checkpoint
  auto append = [&](const TrainedStep& done) {
    if (rc.job.results) rc.job.results->append(trained_step_record(c, rc.ctx, point, spec, run, done));
  };
  // A run that cannot go on: its step's record says why, the rest of its steps are ticked off.
  auto end_run = [&](TrainedStep& done, const std::string& status, const std::string& why) {
    done.status = status;
    done.error = why;
    append(done);
    for (int64_t s = done.step; s < t.steps; ++s) rc.progress.tick(label + ": " + status);
  };
  for (int64_t step = from; step < t.steps; ++step) {
    const bool again = step < n;  // recorded: run again to rebuild the state, not written again
    TrainedStep rec;
    rec.step = step;
    const double lr = learning_rate(t, step);
    st->adam->set_lr(lr);
    set_step_tokens(*st, rc.corpus, step);
    const StepOutcome o = guarded.run(step, static_bytes, [&] { return train_step(*st, *strategy, step); });
    if (again) {
      // A step that runs again must give what its record says, or the records describe another run.
      auto it = recorded_loss.find(step);
      const bool same = o.ok() && it != recorded_loss.end() &&
                        std::abs(o.loss - it->second) <= 1e-6 * std::max(1.0, std::abs(it->second));
      if (!rank0_says(dist, same))
        throw std::runtime_error(
            "step " + std::to_string(step) + " run again to continue the records gave loss " + std::to_string(o.loss) +
            " where its record says " +
            (it != recorded_loss.end() ? std::to_string(it->second) : std::string("nothing")) +
            ": the records were written by another build or machine; continue them there, or --out another folder");
    } else if (!o.ok()) {
      if (o.status == "oom" && dist && o.fullest_peak > 0) rec.peak = o.fullest_peak;
      end_run(rec, o.status, o.error);
      return o.status == "oom";
    }
    if (dist)  // the job's routing: every layer's counts over all ranks
      for (auto& cnt : counts) dist->allreduce_sum(cnt);
    if (t.bias_update > 0) update_expert_bias(st->model, counts, t.bias_update);
    if (again) {
      rc.progress.tick(label + " step " + std::to_string(step) + ": run again");
      continue;
    }
    if (!std::isfinite(o.loss)) {
      end_run(rec, "error",
              "step " + std::to_string(step) + ": the loss is not finite (" + std::to_string(o.loss) +
                  "): training diverged; a lower train.lr may keep it finite");
      return false;
    }
    rec.loss = o.loss;
    rec.lr = lr;
    rec.ms = o.slowest_ms;
    rec.peak = o.fullest_peak;
    rec.ops = o.host.ops, rec.host_syncs = o.host.host_syncs;
    for (const auto& layer : counts) {
      const at::Tensor cnt = layer.cpu();
      rec.expert_tokens.push_back(std::vector<int64_t>(cnt.data_ptr<int64_t>(), cnt.data_ptr<int64_t>() + cnt.numel()));
      rec.tokens_received_per_layer.push_back(hottest_rank_rows(cnt, t.stats_ep));
    }
    rec.counters = strategy->step_counters();
    if (dist) {
      const auto all =
          gather_records(*dist, "train/" + point + "/" + label + "/" + std::to_string(step), {rec.counters});
      rec.counters = dist->rank() == 0 ? strategy->merge_rank_counters(all) : json::object();
    }
    const bool eval = (step + 1) % t.eval_every == 0 || step + 1 == t.steps;
    if (eval) rec.eval_loss = evaluate(*st, *plain, rc.corpus);
    append(rec);
    // The last step needs none: a run whose every step is recorded is skipped on resume.
    if ((step + 1) % t.checkpoint_every == 0 && step + 1 < t.steps) ckpt.save(*st, step);
    char what[160];
    std::snprintf(what, sizeof what, "%s step %lld loss %.3f%s  %.0f tok/s", label.c_str(), (long long)step, o.loss,
                  eval ? (" eval " + std::to_string(*rec.eval_loss).substr(0, 5)).c_str() : "",
                  double(c.model.tokens() * (dist ? dist->world() : 1)) / o.slowest_ms * 1e3);
    rc.progress.tick(what);
  }
  ckpt.remove_all();
  return true;
}

// The first run's routing (first point, first strategy), every recorded step.
std::string first_run_trace(const Job& job) {
  const std::string point = job.points.front().id, label = job.points.front().config.strategies.front().label();
  std::vector<StepRouting> steps;
  for (const auto& r : job.results->records()) {
    if (r["point"] != point || r["strategy"] != label || r["status"] != "ok") continue;
    steps.emplace_back(r["step"].get<int64_t>(), r["expert_tokens"].get<std::vector<std::vector<int64_t>>>());
  }
  return trace_csv(steps);
}

}  // namespace

int train_experiment(const std::string& yaml, const RunOptions& opt) {
  int code = 0;
  const std::unique_ptr<Job> job = start_job(Command::Train, yaml, opt, code);
  if (!job) return code;
  const Dist* dist = job->dist.get();
  const ExperimentConfig& base = job->points.front().config;
  Corpus corpus;
  try {
    corpus = read_corpus(base.train.corpus);
    fs::create_directories(fs::path(job->dir) / "checkpoints");
  } catch (const std::exception& e) {
    if (job->writer) std::cerr << base.where("train.corpus") << ": train.corpus: " << e.what() << "\n";
    return 2;
  }
  if (job->writer)
    std::cerr << "memfine train: corpus " << corpus.dir << ": " << corpus.train.numel() << " training and "
              << corpus.validation.numel() << " held-out byte tokens (" << corpus.entries_train << " and "
              << corpus.entries_validation << " entries, " << corpus.files.size() << " files)"
              << (dist ? "; " + std::to_string(dist->world()) + " real ranks (" + dist->backend() + ")" : std::string())
              << "\n";
  int64_t total = 0;
  for (const auto& p : job->points) total += int64_t(p.config.strategies.size()) * p.config.train.steps;
  Progress progress(total, opt.progress && job->writer);
  bool failed = false;
  const size_t before = job->writer ? job->results->records().size() : 0;
  for (auto& p : job->points) {
    apply_threads(p.config.threads);
    const PointContext ctx = point_context(p.config);
    const RunContext rc{*job, p, corpus, progress, ctx};
    for (const auto& spec : p.config.strategies) {
      try {
        failed |= !train_one(rc, spec);
      } catch (const std::exception& e) {
        std::cerr << "memfine train: " << (dist ? "rank " + std::to_string(dist->rank()) + ": " : std::string()) << p.id
                  << " " << spec.label() << ": " << e.what() << "\n";
        if (dist) return 1;  // the other ranks' collectives time out and they exit too
        failed = true;
      }
    }
  }
  if (!job->writer) return failed ? 1 : 0;
  if (!opt.trace_out.empty()) {
    try {
      const std::string csv = first_run_trace(*job);
      replace_file(opt.trace_out, csv);
      std::cout << "trace: " << opt.trace_out << " (" << job->points.front().id << ", "
                << job->points.front().config.strategies.front().label() << ")\n";
    } catch (const std::exception& e) {
      std::cerr << "memfine train: " << e.what() << "\n";
      failed = true;
    }
  }
  const auto& records = job->results->records();
  std::cout << train_table(records);
  std::cout << "\nrecords: " << job->results->path() << " (" << records.size() - before << " new steps, "
            << records.size() << " in all)\n";
  for (size_t i = before; i < records.size(); ++i) {
    const json& r = records[i];
    if (r["status"] == "error") {
      say("memfine train: " + r["strategy"].get<std::string>() + " at " + r["point"].get<std::string>() +
          " failed: " + r["error"].get<std::string>());
      failed = true;
    }
    if (r.value("verified", json()) == false) {
      std::ostringstream line;
      line << "memfine train: verify: " << r["strategy"].get<std::string>() << " at " << r["point"].get<std::string>()
           << " differs from the reference by " << r["grad_max_rel_err"].get<double>() << " (tolerance "
           << r["verify_tolerance"].get<double>() << ")";
      say(line.str());
      failed = true;
    }
  }
  return failed ? 1 : 0;
}

}  // namespace memfine
