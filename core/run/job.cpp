#include "core/run/job.h"

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <thread>
#include <tuple>

#include "core/dist/dist.h"
#include "core/dist/launch.h"
#include "core/meter/profile.h"
#include "core/record/environment.h"
#include "core/run/resume.h"
#include "core/run/validate.h"

namespace memfine {

namespace fs = std::filesystem;

Job::~Job() = default;

int64_t resolve_threads(int64_t threads) {
  return threads > 0 ? threads : int64_t(std::max(1u, std::thread::hardware_concurrency()));
}

std::string default_results_dir(const ExperimentConfig& c, bool resume) {
  const fs::path base = fs::path("results") / "runs" / device_class(c.device) / c.name;
  if (resume) {
    std::vector<std::string> runs;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(base, ec))
      if (e.is_directory()) runs.push_back(e.path().string());
    std::sort(runs.begin(), runs.end());  // named by date and time: the last is the newest
    return runs.empty() ? "" : runs.back();
  }
  char stamp[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", std::localtime(&now));
  fs::path dir = base / stamp;
  for (int n = 2; fs::exists(dir); ++n) dir = base / (std::string(stamp) + "-" + std::to_string(n));
  return dir.string();
}

std::string ranks_problem(const std::vector<SweepPoint>& points, int world, bool launched) {
  for (const auto& p : points) {
    const ExperimentConfig& c = p.config;
    if (world > 1 && c.device != points.front().config.device)
      return c.where("device") +
             ": device: every point of a multi-rank job must use one device (the process group is made once)";
    const bool real = world > 1 || launched;
    if (real && c.ep != std::max(world, 1))
      return c.where("parallel.ep") + ": parallel.ep is " + std::to_string(c.ep) + " but the job has " +
             std::to_string(std::max(world, 1)) +
             " rank(s): start one rank per expert-parallel rank (memfine launch --nproc " + std::to_string(c.ep) + " " +
             c.source + ")" + (c.train.enabled ? "" : ", or memfine run alone to emulate them");
    if (!real && c.train.enabled && c.ep != 1)
      return c.where("parallel.ep") + ": parallel.ep is " + std::to_string(c.ep) +
             " and this is one process: train on one real rank per expert-parallel rank (memfine launch --nproc " +
             std::to_string(c.ep) + " " + c.source +
             "), or set parallel.ep to 1 (train.stats_ep computes s' for more ranks)";
  }
  return "";
}

namespace {

// Rank 0's message to every rank, through the process group's store (one per job).
json from_rank0(const Dist* dist, const json& mine) {
  if (!dist) return mine;
  if (dist->rank() == 0) dist->store_set("memfine/job", mine.dump());
  return dist->rank() == 0 ? mine : json::parse(dist->store_get("memfine/job"));
}

}  // namespace

std::unique_ptr<Job> start_job(Command command, const std::string& yaml, const RunOptions& opt, int& code) {
  // The checkout as the job starts (asked once per process): edits made while it measures must not
  // decide which commit its records name.
  git_commit();
  auto job = std::make_unique<Job>();
  job->yaml = yaml;
  job->command = command;
  const std::string who = std::string("memfine ") + job->name() + ": ";
  code = 2;
  std::vector<std::string> errors;
  job->points = load_and_validate(yaml, errors);
  if (!errors.empty()) {
    for (const auto& e : errors) std::cerr << e << "\n";
    return nullptr;
  }
  const ExperimentConfig& base = job->points.front().config;
  if (command == Command::Run && base.train.enabled) {
    std::cerr << who << yaml << " trains a language model (it has a 'train' section): use memfine train\n";
    return nullptr;
  }
  if (command == Command::Run && base.paper.enabled) {
    std::cerr << who << yaml << " is a paper-scale projection (it has a 'paper' section): use memfine predict\n";
    return nullptr;
  }
  if (command == Command::Train && !base.train.enabled) {
    std::cerr << yaml << ": no train: section (memfine run benchmarks such a file)\n";
    return nullptr;
  }
  for (const auto& [flag, dir, available, needs] :
       {std::tuple<const char*, std::string, bool, const char*>{"--profile", opt.profile_dir, step_profiler_available(),
                                                                "no step profiler (it needs a CUDA LibTorch with Kineto"},
        {"--memory-history", opt.history_dir, memory_history_available(),
         "no allocator history (it needs a CUDA LibTorch"}}) {
    if (dir.empty()) continue;
    if (!available) {
      std::cerr << who << flag << ": this build has " << needs << ": scripts/gpu-build)\n";
      return nullptr;
    }
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) {
      std::cerr << who << flag << " " << dir << ": " << ec.message() << "\n";
      return nullptr;
    }
  }
  try {
    job->dist = join_job(base.device);
  } catch (const std::exception& e) {
    std::cerr << who << yaml << ": " << e.what() << "\n";
    return nullptr;
  }
  Dist* dist = job->dist.get();
  job->writer = !dist || dist->rank() == 0;
  // Every rank finds what the file asks that ranks cannot do; rank 0 says it, and none leaves before
  // all have joined (a rank still connecting would fail on the closed connection instead).
  std::string why = ranks_problem(job->points, dist ? dist->world() : 0, job_place().launched);
  if (why.empty() && command == Command::Train && dist)
    for (const auto& p : job->points)
      if (p.config.verify) {
        why = p.config.where("verify") +
              ": verify: training on real ranks is not verified (each rank's learned routing has no one-process "
              "equivalent to hold it to); set it to false, or verify the same model on one process (parallel.ep: 1)";
        break;
      }
  if (!why.empty()) {
    if (job->writer) std::cerr << why << "\n";
    if (dist) {
      try {
        dist->barrier();
      } catch (const std::exception&) {  // a rank already gone: nothing left to wait for
      }
    }
    return nullptr;
  }
  for (auto& p : job->points) p.config.threads = resolve_threads(opt.threads >= 0 ? opt.threads : p.config.threads);

  // Rank 0 finds the folder, opens the records and checks them; every rank learns what it found.
  json found = {{"ok", false}};
  if (job->writer) {
    try {
      job->dir = opt.out_dir.empty() ? default_results_dir(base, opt.resume) : opt.out_dir;
      if (job->dir.empty())
        throw std::runtime_error("no earlier run of '" + base.name + "' under " +
                                 (fs::path("results") / "runs" / device_class(base.device) / base.name).string() +
                                 " to resume: give --out the folder to continue");
      job->results = std::make_unique<ResultsFile>(job->dir, opt.resume, true,
                                                   command == Command::Run ? "results.jsonl" : "train.jsonl");
      if (!job->results->repaired_note().empty()) std::cerr << who << job->results->repaired_note() << "\n";
      job->results->update_records([](json& r) { r["strategy"] = canonical_label(r); });
      const auto problems =
          resume_problems(job->results->path(), job->results->records(), job->points, command == Command::Train);
      for (const auto& pr : problems) std::cerr << pr << "\n";
      if (problems.empty()) {
        json recorded = json::array();
        for (const auto& r : job->results->records())
          recorded.push_back({r["point"], r["strategy"],
                              r.contains("step") && r["step"].is_number_integer() ? r["step"] : json(-1), r["status"]});
        found = {{"ok", true}, {"dir", job->dir}, {"recorded", recorded}};
      }
    } catch (const std::exception& e) {
      std::cerr << who << e.what() << "\n";
    }
  }
  found = from_rank0(dist, found);
  if (!found["ok"].get<bool>()) return nullptr;
  job->dir = found["dir"].get<std::string>();
  for (const auto& r : found["recorded"])
    job->recorded[{r[0].get<std::string>(), r[1].get<std::string>(), r[2].get<int64_t>()}] = r[3].get<std::string>();
  job->earlier = found["recorded"].size();
  code = 0;
  return job;
}

}  // namespace memfine
