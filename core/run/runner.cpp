#include "core/run/runner.h"

#include <iostream>
#include <map>
#include <sstream>

#include "core/dist/dist.h"
#include "core/dist/gather.h"
#include "core/meter/ceiling.h"
#include "core/record/committed_run.h"
#include "core/record/record.h"
#include "core/record/table.h"
#include "core/run/measure.h"
#include "core/run/progress.h"
#include "core/run/threads.h"
#include "core/util/format.h"
#include "core/util/say.h"

namespace memfine {

namespace {

// What a point's typed results say of the run's exit status: a strategy that failed, or one that
// does not compute what the reference computes; each said on stderr.
bool failed(const SweepPoint& p, const std::vector<Measured>& ms, const Dist* dist) {
  bool any = false;
  const std::string at_rank = dist && dist->world() > 1 ? " rank " + std::to_string(dist->rank()) : "";
  for (const auto& m : ms) {
    if (m.status == "error") {
      say("memfine run: " + m.spec.label() + " at " + p.id + at_rank + " failed: " + m.error);
      any = true;
    }
    if (!m.lossy && m.grad_err >= 0 && m.grad_err > m.verify_tolerance) {
      std::ostringstream line;
      line << "memfine run: verify: " << m.spec.label() << " at " << p.id << at_rank << " differs from the reference by "
           << m.grad_err << " (tolerance " << m.verify_tolerance << " for " << p.config.dtype << ")";
      say(line.str());
      any = true;
    }
  }
  return any;
}

}  // namespace

// The budgets the points run under, as read (a size written in MB and one in MiB are different
// numbers): "none", or each distinct one in MiB and MB with the points it holds at.
std::string budgets_text(const std::vector<SweepPoint>& points) {
  std::map<int64_t, int64_t> at;
  for (const auto& p : points) ++at[p.config.budget];
  std::string out;
  for (const auto& [b, n] : at) {
    out += out.empty() ? "" : "; ";
    out += b < 0 ? "none" : fmt_bytes(double(b)) + " (" + fmt_double("%.1f", double(b) / 1e6) + " MB)";
    if (at.size() > 1) out += " at " + std::to_string(n) + " point" + (n == 1 ? "" : "s");
  }
  return out;
}

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
  if (job->writer && opt.progress)
    say("memfine run: " + std::to_string(job->points.size()) + " point" + (job->points.size() == 1 ? "" : "s") +
        ", " + std::to_string(total) + " steps to run; memory.budget: " + budgets_text(job->points));
  Progress progress(total, opt.progress && job->writer);
  bool any_failed = false;
  std::vector<json> fresh;
  for (auto& p : job->points) {
    apply_threads(p.config.threads);
    std::vector<std::string> skip;
    for (const auto& s : p.config.strategies)
      if (job->has(p.id, s.label())) skip.push_back(s.label());
    std::vector<json> recs;
    try {
      const PointResult measured = measure_point(
          p, skip, [&] { progress.tick(p.id); }, dist, &opt);
      any_failed |= failed(p, measured.strategies, dist);
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
      // A failure outside any one strategy (the point's state could not be made): every strategy
      // of the point records it.
      std::cerr << "memfine run: point " << p.id << " failed: " << e.what() << "\n";
      any_failed = true;
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
  // Every rank's verdict: any rank's failure fails the job.
  if (dist) any_failed = dist->allreduce_max(at::tensor({double(any_failed)}, at::kDouble)).item<double>() > 0;
  if (!job->writer) return any_failed ? 1 : 0;
  std::cout << summary_table(job->results->records(), job->earlier);
  if (!dist) std::cout << committed_speed_note(fresh, job->results->path());
  if (dist) std::cout << hottest_ranks(fresh);
  std::cout << "\nresults: " << job->results->path() << " (" << fresh.size() << " new records, "
            << job->results->records().size() << " in all)\n";
  return any_failed ? 1 : 0;
}

}  // namespace memfine
