#include "core/run/runner.h"

#include <iostream>

#include "core/dist/dist.h"
#include "core/dist/gather.h"
#include "core/meter/ceiling.h"
#include "core/record/record.h"
#include "core/record/table.h"
#include "core/run/measure.h"
#include "core/run/progress.h"
#include "core/run/threads.h"

namespace memfine {

int run_experiment(const std::string& yaml, const RunOptions& opt) {
  int code = 0;
  const std::unique_ptr<Job> job = start_job(Command::Run, yaml, opt, code);
  if (!job) return code;
  const Dist* dist = job->dist.get();
  int64_t total = 0;
  for (const auto& p : job->points) {
    int64_t todo = 0;
    for (const auto& s : p.config.strategies) todo += !job->has(p.id, s.label());
    total += todo * (p.config.warmup + p.config.repeats);
  }
  Progress progress(total, opt.progress && job->writer);
  bool failed = false;
  std::vector<json> fresh;
  for (auto& p : job->points) {
    apply_threads(p.config.threads);
    std::vector<std::string> skip;
    for (const auto& s : p.config.strategies)
      if (job->has(p.id, s.label())) skip.push_back(s.label());
    std::vector<json> recs;
    try {
      const PointResult measured = measure_point(
          p, skip, [&] { progress.tick(p.id); }, dist);
      const PointContext ctx = point_context(p.config);
      const json& env = ctx.env;
      const double ceiling = matmul_ceiling_flops(p.config.device, env["device_name"].get<std::string>() + "|" +
                                                                       std::to_string(env["threads"].get<int64_t>()) +
                                                                       " threads|" + env["blas"].get<std::string>());
      recs = measured_records(p, ctx, measured.routing, measured.strategies, ceiling);
      if (dist) {
        recs = gather_records(*dist, p.id, recs);
        if (!job->writer) continue;
      }
    } catch (const std::exception& e) {
      if (dist) {
        std::cerr << "memfine run: rank " << dist->rank() << " failed at point " << p.id << ": " << e.what() << "\n";
        return 1;  // the other ranks' collectives time out and they exit too
      }
      // A failure outside any one strategy's step: every strategy of the point records it.
      const PointContext ctx = point_context(p.config);
      for (const auto& s : p.config.strategies)
        if (!job->has(p.id, s.label())) recs.push_back(new_record(p.config, ctx, p.id, s, "error", e.what()));
    }
    for (auto& r : recs) {
      try {
        job->results->append(r);
      } catch (const std::exception& e) {  // a full disk: what is written stays, the run stops
        std::cerr << "memfine run: " << e.what() << "\n";
        return 1;
      }
      fresh.push_back(r);
    }
  }
  if (!job->writer) return 0;
  std::cout << summary_table(job->results->records(), job->earlier);
  if (dist) std::cout << hottest_ranks(fresh);
  std::cout << "\nresults: " << job->results->path() << " (" << fresh.size() << " new records, "
            << job->results->records().size() << " in all)\n";
  // What this run measured decides its exit status: an error, or a strategy that does not compute
  // what the reference computes.
  for (const auto& r : fresh) {
    if (r["status"] == "error") {
      std::cerr << "memfine run: " << r["strategy"].get<std::string>() << " at " << r["point"].get<std::string>()
                << " failed: " << r["error"].get<std::string>() << "\n";
      failed = true;
    }
    if (r.value("verified", json()) == false) {
      std::cerr << "memfine run: verify: " << r["strategy"].get<std::string>() << " at "
                << r["point"].get<std::string>()
                << (r.value("world_size", 1) > 1 ? " rank " + std::to_string(r.value("rank", 0)) : std::string())
                << " differs from the reference by " << r["grad_max_rel_err"].get<double>() << " (tolerance "
                << r["verify_tolerance"].get<double>() << " for " << r["config"]["dtype"].get<std::string>() << ")\n";
      failed = true;
    }
  }
  return failed ? 1 : 0;
}

}  // namespace memfine
