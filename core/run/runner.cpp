#include "core/run/runner.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>

#include "core/dist/dist.h"
#include "core/dist/gather.h"
#include "core/dist/launch.h"
#include "core/meter/ceiling.h"
#include "core/record/environment.h"
#include "core/record/record.h"
#include "core/record/results.h"
#include "core/run/measure.h"
#include "core/run/progress.h"
#include "core/run/threads.h"
#include "core/run/validate.h"

namespace memfine {

int run_experiment(const std::string& yaml, const RunOptions& opt) {
  std::vector<std::string> errors;
  std::vector<SweepPoint> points = load_and_validate(yaml, errors);
  if (!errors.empty()) {
    for (const auto& e : errors) std::cerr << e << "\n";
    return 2;
  }
  std::unique_ptr<Dist> dist;
  try {
    dist = join_job(points.front().config.device);
  } catch (const std::exception& e) {
    std::cerr << "memfine run: " << yaml << ": " << e.what() << "\n";
    return 2;
  }
  const bool writer = !dist || dist->rank() == 0;
  // Fault injection for the tests (tests/test_faults.cpp): this rank stops as a hung one would.
  if (const char* stop = std::getenv("MEMFINE_FAULT_STOP_RANK"); stop && dist && std::atoi(stop) == dist->rank())
    ::raise(SIGSTOP);
  // `memfine launch --nproc 1` (WORLD_SIZE=1) of an expert-parallel file would quietly emulate.
  if (!dist && std::getenv("WORLD_SIZE"))
    for (const auto& p : points)
      if (p.config.ep != 1) {
        std::cerr << p.config.where("parallel.ep") << ": parallel.ep is " << p.config.ep
                  << " but WORLD_SIZE is 1: run one rank per expert-parallel rank (memfine launch --nproc "
                  << p.config.ep << "), or memfine run alone to emulate them\n";
        return 2;
      }
  if (dist) {
    for (const auto& p : points)
      if (p.config.device != points.front().config.device) {
        std::cerr << yaml << ": every point of a multi-rank run must use one device (the process group is made once)\n";
        return 2;
      } else if (p.config.ep != dist->world()) {
        std::cerr << yaml << ": parallel.ep is " << p.config.ep << " but WORLD_SIZE is " << dist->world()
                  << ": run one rank per expert-parallel rank\n";
        return 2;
      } else if (p.config.verify) {
        // Checking a rank needs the whole global batch computed in one process beside it; the
        // tests do that (tests/test_dist.cpp), a measured run does not.
        // One write: every rank says it at once.
        std::cerr << p.config.where("verify") +
                         ": verify: not available on real ranks (memfine launch, or RANK set); set it to false. "
                         "tests/test_dist.cpp holds real ranks to one process computing the whole batch (1e-10, fp64); "
                         "memfine run of the same file verifies the emulated rank\n";
        return 2;
      }
  }
  const ExperimentConfig& base = points.front().config;
  if (base.train.enabled) {
    std::cerr << "memfine run: " << yaml << " trains a language model (it has a 'train' section): use memfine train\n";
    return 2;
  }
  if (base.paper.enabled) {
    std::cerr << "memfine run: " << yaml << " is a paper-scale projection (it has a 'paper' section): use memfine predict\n";
    return 2;
  }
  const std::string dir = opt.out_dir.empty()
                              ? (std::filesystem::path("results") / device_class(base.device) / base.name).string()
                              : opt.out_dir;
  std::unique_ptr<ResultsFile> results;
  try {
    results = std::make_unique<ResultsFile>(dir, opt.resume, writer);
  } catch (const std::exception& e) {
    std::cerr << "memfine run: " << e.what() << "\n";
    return 2;
  }
  if (!results->repaired_note().empty()) std::cerr << "memfine run: " << results->repaired_note() << "\n";
  int64_t total = 0;
  for (const auto& p : points) {
    int64_t todo = 0;
    for (const auto& s : p.config.strategies) todo += !results->has(p.id, s.label());
    total += todo * (p.config.warmup + p.config.repeats);
  }
  Progress progress(total, opt.progress && writer);
  bool failed = false;
  std::vector<json> fresh;
  for (auto& p : points) {
    if (opt.threads >= 0) p.config.threads = opt.threads;
    p.config.threads = apply_threads(p.config.threads);
    std::vector<std::string> skip;
    for (const auto& s : p.config.strategies)
      if (results->has(p.id, s.label())) skip.push_back(s.label());
    std::vector<json> recs;
    try {
      const PointResult measured = measure_point(p, skip, [&] { progress.tick(p.id); }, dist.get());
      const PointContext ctx = point_context(p.config);
      const json& env = ctx.env;
      const double ceiling = matmul_ceiling_flops(
          p.config.device, env["device_name"].get<std::string>() + "|" + std::to_string(env["threads"].get<int64_t>()) +
                               " threads|" + env["blas"].get<std::string>());
      recs = measured_records(p, ctx, measured.routing, measured.strategies, ceiling);
      if (dist) {
        recs = gather_records(*dist, p.id, recs);
        if (!writer) continue;
      }
    } catch (const std::exception& e) {
      if (dist) {
        std::cerr << "memfine run: rank " << dist->rank() << " failed at point " << p.id << ": " << e.what() << "\n";
        return 1;  // the other ranks' collectives time out and they exit too
      }
      // A failure outside any one strategy's step: every strategy of the point records it.
      const PointContext ctx = point_context(p.config);
      for (const auto& s : p.config.strategies)
        if (!results->has(p.id, s.label())) recs.push_back(new_record(p.config, ctx, p.id, s, "error", e.what()));
    }
    for (auto& r : recs) {
      if (r["status"] == "error") failed = true;
      try {
        results->append(r);
      } catch (const std::exception& e) {  // a full disk: what is written stays, the run stops
        std::cerr << "memfine run: " << e.what() << "\n";
        return 1;
      }
      fresh.push_back(r);
    }
  }
  if (!writer) return failed ? 1 : 0;
  std::cout << summary_table(results->records(), results->records().size() - fresh.size());
  if (dist) std::cout << hottest_ranks(fresh);
  std::cout << "\nresults: " << results->path() << " (" << fresh.size() << " new records, "
            << results->records().size() << " in all)\n";
  if (failed) std::cerr << "memfine run: some points failed; see 'error' in the records\n";
  return failed ? 1 : 0;
}

}  // namespace memfine
