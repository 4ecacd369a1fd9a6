#include "core/runner.h"

#include <ATen/Parallel.h>
#include <dlfcn.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <thread>

#include "core/dist.h"
#include "core/flops.h"
#include "core/memory_meter.h"
#include "core/memory_model.h"
#include "core/strategy.h"
#include "core/timer.h"
#include "core/train_step.h"
#include "core/workload.h"

extern char** environ;

namespace memfine {

int64_t apply_threads(int64_t threads) {
  const int64_t n = threads > 0 ? threads : int64_t(std::max(1u, std::thread::hardware_concurrency()));
  at::set_num_threads(int(n));
  // OpenBLAS's pthreads build keeps its own pool (one thread per core) that LibTorch's setting does
  // not reach: without this, `threads: 1` still multiplies on every core, and ranks sharing a
  // machine oversubscribe it.
  using SetBlasThreads = void (*)(int);
  if (auto set_blas = reinterpret_cast<SetBlasThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) set_blas(int(n));
  return at::get_num_threads();
}

namespace {

struct Contender {
  StrategySpec spec;
  std::unique_ptr<Strategy> strategy;
  std::unique_ptr<TrainState> state;
  std::string status = "ok", error;
  int64_t static_bytes = 0;
  std::vector<double> ms, peaks;
  double loss = NAN;
  StepStats stats;
  std::vector<std::vector<int64_t>> chunk_history;  // per timed step, per layer (tuned strategies)
  double grad_err = NAN;
};

// Largest relative gradient difference over parameters (and the input when it has one).
double max_rel_err(TrainState& a, TrainState& b) {
  auto pa = a.model.parameters(), pb = b.model.parameters();
  if (a.input.requires_grad()) pa.push_back(a.input), pb.push_back(b.input);
  double worst = 0;
  for (size_t i = 0; i < pa.size(); ++i) {
    const double scale = pb[i].grad().abs().max().item<double>();
    const double diff = (pa[i].grad() - pb[i].grad()).abs().max().item<double>();
    worst = std::max(worst, diff / std::max(scale, 1e-30));
  }
  return worst;
}

std::string fmt_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (std::fabs(b) >= 1024 && u < 4) b /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", b, units[u]);
  return buf;
}

class Progress {
 public:
  Progress(int64_t total, bool on) : total_(total), on_(on && total > 0), tty_(isatty(2)) {}
  void tick(const std::string& what) {
    ++done_;
    if (!on_) return;
    const double el = timer_.elapsed_ms() / 1e3;
    const double left = done_ > 0 ? el / double(done_) * double(total_ - done_) : 0;
    const int width = 30, fill = int(double(width) * double(done_) / double(total_));
    char line[256];
    std::snprintf(line, sizeof line, "[%s%s] %lld/%lld steps  elapsed %s  left ~%s  %s",
                  std::string(size_t(fill), '#').c_str(), std::string(size_t(width - fill), '.').c_str(),
                  (long long)done_, (long long)total_, clock(el).c_str(), clock(left).c_str(), what.c_str());
    if (tty_) {
      std::fprintf(stderr, "\r%-120s", line);
      if (done_ == total_) std::fprintf(stderr, "\n");
    } else if (done_ == total_ || timer_.elapsed_ms() - last_ > 5000) {
      std::fprintf(stderr, "%s\n", line);
      last_ = timer_.elapsed_ms();
    }
  }

 private:
  static std::string clock(double s) {
    char b[32];
    std::snprintf(b, sizeof b, "%02d:%02d", int(s) / 60, int(s) % 60);
    return b;
  }
  int64_t total_, done_ = 0;
  bool on_, tty_;
  double last_ = -1e9;
  Timer timer_;
};

// The machine's dense matmul rate (same BLAS and threads) when scripts/fit-cost-model measured
// it, else 0. Read once per device class, not once per point.
double matmul_ceiling(const std::string& device) {
  static std::map<std::string, double> known;
  const std::string cls = device_class(device);
  auto it = known.find(cls);
  if (it != known.end()) return it->second;
  double ceiling = 0;
  std::ifstream cm("results/" + cls + "/cost_model.json");
  if (cm) {
    try {
      const json j = json::parse(cm);
      if (j.contains("matmul_ceiling_flops") && j["matmul_ceiling_flops"].is_number())
        ceiling = j["matmul_ceiling_flops"].get<double>();
    } catch (const std::exception&) {
    }
  }
  return known[cls] = ceiling;
}

}  // namespace

std::vector<json> measure_point(const SweepPoint& pt, const std::vector<std::string>& skip,
                                const std::function<void()>& tick, const Dist* dist) {
  const ExperimentConfig& c = pt.config;
  MemoryMeter& meter = MemoryMeter::get(c.device);
  std::vector<Contender> cs;
  for (const auto& spec : c.strategies) {
    if (std::find(skip.begin(), skip.end(), spec.label()) != skip.end()) continue;
    Contender k;
    k.spec = spec;
    k.strategy = make_strategy(spec);
    cs.push_back(std::move(k));
  }
  if (cs.empty()) return {};

  // Correctness: loss and gradients of each dropless strategy against no_recompute, one step
  // on fresh states with the input's gradient included.
  if (c.verify && !dist) {  // real ranks: tests/test_dist.cpp checks them against one process
    auto reference = make_train_state(c, true);
    auto ref_strategy = make_strategy(StrategySpec{"no_recompute", {}});
    train_step(*reference, *ref_strategy, 0, false);
    for (auto& k : cs) {
      if (!k.strategy->dropless()) continue;
      auto st = make_train_state(c, true);
      auto s = make_strategy(k.spec);
      train_step(*st, *s, 0, false);
      k.grad_err = max_rel_err(*st, *reference);
    }
  }

  for (auto& k : cs) {
    const int64_t before = meter.current_bytes();
    k.state = dist ? make_rank_state(c, *dist) : make_train_state(c);
    k.static_bytes = k.state->static_bytes();
    const int64_t counted = meter.current_bytes() - before;
    if (c.device == "cpu" && counted < k.static_bytes)
      throw std::logic_error("static accounting: " + std::to_string(k.static_bytes) + " bytes claimed, " +
                             std::to_string(counted) + " allocated");
    if (c.budget >= 0 && k.static_bytes > c.budget) {
      k.status = "oom";
      k.error = "static memory " + fmt_bytes(double(k.static_bytes)) + " exceeds the budget " + fmt_bytes(double(c.budget));
      k.state.reset();
    }
  }

  const int64_t steps = c.warmup + c.repeats;
  for (int64_t it = 0; it < steps; ++it) {
    for (auto& k : cs) {
      if (k.status != "ok") {
        tick();
        continue;
      }
      route_step(k.state->rank, c, it);  // a scheduled workload routes differently each step
      k.static_bytes = k.state->static_bytes();
      meter.reset_peak();
      const int64_t start = meter.current_bytes();
      const int64_t limit = c.budget >= 0 ? start - k.static_bytes + c.budget : -1;
      Timer t(c.device);
      try {
        MemoryLimitGuard guard(meter, limit);
        k.loss = train_step(*k.state, *k.strategy, it);
      } catch (const std::exception& e) {
        // A real rank cannot skip a step alone: the others wait in its collectives. End the job.
        if (dist) throw;
        k.status = is_out_of_memory(e) ? "oom" : "error";
        std::string msg = e.what();
        k.error = msg.substr(0, msg.find('\n'));
        if (k.status == "oom")
          k.error = "step " + std::to_string(it) + ": activation peak exceeds the budget " + fmt_bytes(double(c.budget)) +
                    " - static " + fmt_bytes(double(k.static_bytes)) + " (" + k.error + ")";
        k.state.reset();
      }
      const double ms = t.elapsed_ms();
      if (k.status == "ok" && it >= c.warmup) {
        k.ms.push_back(ms);
        k.peaks.push_back(double(meter.peak_bytes() - start));
        k.stats = k.strategy->stats();
        k.chunk_history.push_back(k.stats.chunks);
      }
      tick();
    }
  }

  json env = environment(c);
  json cfg = config_to_json(c);
  const double ceiling = matmul_ceiling(c.device);
  if (ceiling > 0) env["matmul_ceiling_tflops"] = ceiling / 1e12;
  // Routing only: cheap next to a step. A real rank's routing is its own.
  const EmulatedRank er = make_emulated_rank(c, dist ? dist->rank() : c.rank);
  int64_t recv_max = 0, recv_sum = 0;
  double overload = 0;
  json per_layer = json::array();
  // Tokens each expert receives per layer (all ranks), for Figure 2-style plots; with a schedule,
  // at its peak step.
  json expert_tokens = json::array();
  const int64_t expert_tokens_step = c.workload.schedule == "none" ? 0 : int64_t(c.workload.peak_step);
  if (c.workload.kind != "router" && c.model.experts * c.model.layers <= 8192)
    for (int64_t l = 0; l < c.model.layers; ++l)
      expert_tokens.push_back(expert_counts(c.workload, c.model, c.ep, l, c.seed, expert_tokens_step));
  json per_step = json::array();  // scheduled workloads: s' per timed step and layer
  if (c.workload.schedule != "none") {
    EmulatedRank stepped = er;
    for (int64_t it = c.warmup; it < steps; ++it) {
      route_step(stepped, c, it);
      json row = json::array();
      for (const auto& l : stepped.layers) row.push_back(l.tokens_received);
      per_step.push_back(row);
    }
  }
  for (const auto& l : er.layers) {
    recv_max = std::max(recv_max, l.tokens_received);
    recv_sum += l.tokens_received;
    overload = std::max(overload, l.overload_factor);
    per_layer.push_back(l.tokens_received);
  }
  std::vector<json> records;
  for (auto& k : cs) {
    json r;
    r["experiment"] = c.name;
    r["point"] = pt.id;
    r["strategy"] = k.spec.label();
    r["status"] = k.status;
    r["error"] = k.error.empty() ? json(nullptr) : json(k.error);
    r["seed"] = c.seed;
    r["rank"] = er.rank;
    r["world_size"] = dist ? dist->world() : 1;
    if (dist) r["backend"] = dist->backend();
    r["ep"] = c.ep;
    if (k.stats.chunks.empty()) {
      r["chunks"] = nullptr;
    } else if (k.stats.tuned) {
      r["chunks"] = k.chunk_history;  // [timed step][layer]; 0 = stored without recomputation
      r["chunk_steps"] = json::array();
      for (int64_t i = 0; i < int64_t(k.chunk_history.size()); ++i) r["chunk_steps"].push_back(c.warmup + i);
    } else if (std::all_of(k.stats.chunks.begin(), k.stats.chunks.end(), [&](int64_t v) { return v == k.stats.chunks[0]; })) {
      r["chunks"] = k.stats.chunks[0];
    } else {
      r["chunks"] = k.stats.chunks;
    }
    r["tokens_received"] = recv_max;
    r["tokens_received_per_layer"] = per_layer;
    if (!expert_tokens.empty()) r["expert_tokens"] = expert_tokens, r["expert_tokens_step"] = expert_tokens_step;
    if (!per_step.empty()) r["tokens_received_per_step"] = per_step;
    r["overload_factor"] = overload;
    r["static_bytes"] = k.static_bytes;
    const bool measured = !k.ms.empty();
    r["peak_activation_bytes"] = measured ? json(int64_t(*std::max_element(k.peaks.begin(), k.peaks.end()))) : json(nullptr);
    try {
      StrategyShape shape = strategy_shape(k.spec);
      std::vector<int64_t> plan;
      if (k.stats.tuned && !k.chunk_history.empty()) {
        // MACT: the model's view of the last timed step's choice (all stored, or all chunked).
        plan = k.chunk_history.back();
        if (std::all_of(plan.begin(), plan.end(), [](int64_t v) { return v == 0; })) shape = StrategyShape{}, plan.clear();
        else std::replace(plan.begin(), plan.end(), int64_t(0), int64_t(1));
      }
      EmulatedRank last = er;
      if (k.stats.tuned) route_step(last, c, steps - 1);
      r["predicted_activation_bytes"] = shape.chunks == 0 && plan.empty() && shape.moe == MoeMode::Chunked
                                            ? json(nullptr)
                                            : json(predict_step(c, last, shape, plan).activation_bytes);
    } catch (const std::invalid_argument&) {
      r["predicted_activation_bytes"] = nullptr;
    }
    r["budget_bytes"] = c.budget < 0 ? json(nullptr) : json(c.budget);
    if (measured) {
      const Spread s = spread(k.ms);
      r["step_ms"] = {{"median", s.median}, {"min", s.min}, {"max", s.max}};
      r["step_ms_all"] = k.ms;
      r["tokens_per_s"] = double(c.model.tokens()) / (s.median / 1e3);
      r["tflops"] = step_flops(c.model, recv_sum).total() / (s.median / 1e3) / 1e12;
      if (ceiling > 0) r["ceiling_fraction"] = r["tflops"].get<double>() * 1e12 / ceiling;
      r["loss"] = k.loss;
    } else {
      r["step_ms"] = nullptr;
      r["tokens_per_s"] = nullptr;
      r["tflops"] = nullptr;
      r["loss"] = nullptr;
    }
    if (k.stats.predicted_ms >= 0) r["predicted_step_ms"] = k.stats.predicted_ms;
    r["dropped_fraction"] = k.stats.assignments > 0 ? double(k.stats.dropped) / double(k.stats.assignments) : 0.0;
    r["grad_max_rel_err"] = std::isnan(k.grad_err) ? json(nullptr) : json(k.grad_err);
    r["config"] = cfg;
    r["env"] = env;
    records.push_back(std::move(r));
  }
  return records;
}

std::string summary_table(const std::vector<json>& records) {
  std::ostringstream out;
  char line[400];
  std::snprintf(line, sizeof line, "%-28s %-34s %-6s %9s %7s %11s %11s %10s %8s %8s\n", "point", "strategy", "status",
                "s'", "chunks", "static", "act peak", "step ms", "act/full", "time/full");
  out << line << std::string(140, '-') << "\n";
  for (const auto& r : records) {
    const json* full = nullptr;
    for (const auto& o : records)
      if (o["point"] == r["point"] && o.value("rank", 0) == r.value("rank", 0) && o["strategy"] == "full_recompute" &&
          o["status"] == "ok")
        full = &o;
    auto num = [](const json& j) { return j.is_null() ? NAN : j.get<double>(); };
    const double act = num(r["peak_activation_bytes"]);
    const double ms = r["step_ms"].is_null() ? NAN : r["step_ms"]["median"].get<double>();
    std::string act_ratio = "-", time_ratio = "-";
    if (full && !std::isnan(act)) {
      char b[32];
      std::snprintf(b, sizeof b, "%.3f", act / num((*full)["peak_activation_bytes"]));
      act_ratio = b;
      std::snprintf(b, sizeof b, "%.3f", ms / (*full)["step_ms"]["median"].get<double>());
      time_ratio = b;
    }
    const std::string chunks = r["chunks"].is_null() ? "-" : r["chunks"].is_array() ? "tuned" : r["chunks"].dump();
    std::string point = r["point"].get<std::string>();
    const std::string at_rank = r.value("world_size", 1) > 1 ? " r" + std::to_string(r.value("rank", 0)) : "";
    if (point.size() + at_rank.size() > 28) point = point.substr(0, 25 - at_rank.size()) + "...";
    point += at_rank;
    std::snprintf(line, sizeof line, "%-28s %-34s %-6s %9lld %7s %11s %11s %10s %8s %8s\n", point.c_str(),
                  r["strategy"].get<std::string>().c_str(), r["status"].get<std::string>().c_str(),
                  (long long)r["tokens_received"].get<int64_t>(), chunks.c_str(),
                  fmt_bytes(num(r["static_bytes"])).c_str(), std::isnan(act) ? "-" : fmt_bytes(act).c_str(),
                  std::isnan(ms) ? "-" : (std::to_string(ms).substr(0, std::to_string(ms).find('.') + 2)).c_str(),
                  act_ratio.c_str(), time_ratio.c_str());
    out << line;
  }
  return out.str();
}

int run_experiment(const std::string& yaml, const RunOptions& opt) {
  std::vector<std::string> errors;
  std::vector<SweepPoint> points = load_experiment(yaml, errors);
  if (!errors.empty()) {
    for (const auto& e : errors) std::cerr << e << "\n";
    return 2;
  }
  std::unique_ptr<Dist> dist;
  try {
    dist = Dist::from_env(std::chrono::seconds(60), points.front().config.device);
  } catch (const std::exception& e) {
    std::cerr << "memfine run: " << yaml << ": " << e.what() << "\n";
    return 2;
  }
  const bool writer = !dist || dist->rank() == 0;
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
        const YAML::Node v = YAML::LoadFile(yaml)["verify"];
        std::cerr << yaml << ":" << (v ? v.Mark().line + 1 : 1)
                  << ": verify: not available on real ranks (memfine launch, or RANK set); set it to false. "
                     "tests/test_dist.cpp holds real ranks to one process computing the whole batch (1e-10, fp64); "
                     "memfine run of the same file verifies the emulated rank\n";
        return 2;
      }
  }
  const ExperimentConfig& base = points.front().config;
  if (base.paper.enabled) {
    std::cerr << "memfine run: " << yaml << " is a paper-scale projection (it has a 'paper' section): use memfine predict\n";
    return 2;
  }
  const std::string dir = opt.out_dir.empty()
                              ? (std::filesystem::path("results") / device_class(base.device) / base.name).string()
                              : opt.out_dir;
  std::unique_ptr<ResultsFile> results;
  try {
    results = std::make_unique<ResultsFile>(dir, opt.resume);
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
      recs = measure_point(p, skip, [&] { progress.tick(p.id); }, dist.get());
      if (dist) {
        // Rank 0 gathers every rank's records of the point through the store and writes them.
        json mine = recs;
        dist->store_set("records/" + p.id + "/" + std::to_string(dist->rank()), mine.dump());
        if (!writer) continue;
        recs.clear();
        for (int r = 0; r < dist->world(); ++r)
          for (auto& rec : json::parse(dist->store_get("records/" + p.id + "/" + std::to_string(r)))) recs.push_back(rec);
      }
    } catch (const std::exception& e) {
      if (dist) {
        std::cerr << "memfine run: rank " << dist->rank() << " failed at point " << p.id << ": " << e.what() << "\n";
        return 1;  // the other ranks' collectives time out and they exit too
      }
      // A failure outside any one strategy's step: every strategy of the point records it.
      for (const auto& s : p.config.strategies) {
        if (results->has(p.id, s.label())) continue;
        json r = {{"experiment", p.config.name}, {"point", p.id}, {"strategy", s.label()}, {"status", "error"},
                  {"error", e.what()}, {"seed", p.config.seed}, {"tokens_received", 0}, {"static_bytes", nullptr},
                  {"peak_activation_bytes", nullptr}, {"step_ms", nullptr}, {"chunks", nullptr},
                  {"config", config_to_json(p.config)}, {"env", environment(p.config)}};
        recs.push_back(r);
      }
    }
    for (auto& r : recs) {
      if (r["status"] == "error") failed = true;
      results->append(r);
      fresh.push_back(r);
    }
  }
  if (!writer) return failed ? 1 : 0;
  std::cout << summary_table(results->records());
  if (dist) {
    // The rank that limits the job: the largest activation peak of each strategy.
    std::map<std::string, std::pair<int64_t, int64_t>> hottest;
    for (const auto& r : fresh)
      if (r["status"] == "ok") {
        auto& h = hottest[r["point"].get<std::string>() + " " + r["strategy"].get<std::string>()];
        const int64_t peak = r["peak_activation_bytes"].get<int64_t>();
        if (peak > h.second) h = {r["rank"].get<int64_t>(), peak};
      }
    for (const auto& [what, h] : hottest)
      std::cout << "hottest rank for " << what << ": rank " << h.first << " (" << fmt_bytes(double(h.second)) << ")\n";
  }
  std::cout << "\nresults: " << results->path() << " (" << fresh.size() << " new records, "
            << results->records().size() << " in all)\n";
  if (failed) std::cerr << "memfine run: some points failed; see 'error' in the records\n";
  return failed ? 1 : 0;
}

int launch_experiment(const std::string& self, int nproc, const std::vector<std::string>& run_args) {
  const int port = free_loopback_port();
  std::vector<pid_t> pids;
  for (int r = 0; r < nproc; ++r) {
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e) {
      const std::string kv = *e;
      if (kv.rfind("RANK=", 0) && kv.rfind("WORLD_SIZE=", 0) && kv.rfind("MASTER_ADDR=", 0) && kv.rfind("MASTER_PORT=", 0))
        env.push_back(kv);
    }
    for (const std::string& kv : std::initializer_list<std::string>{"RANK=" + std::to_string(r), "WORLD_SIZE=" + std::to_string(nproc),
                                 std::string("MASTER_ADDR=127.0.0.1"), "MASTER_PORT=" + std::to_string(port)})
      env.push_back(kv);
    std::vector<std::string> args = {self, "run"};
    args.insert(args.end(), run_args.begin(), run_args.end());
    if (r > 0) args.push_back("--no-progress");
    std::vector<char*> argv, envp;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    pid_t pid;
    if (posix_spawn(&pid, self.c_str(), nullptr, nullptr, argv.data(), envp.data()) != 0) {
      std::cerr << "memfine launch: cannot start rank " << r << "\n";
      for (pid_t p : pids) ::kill(p, SIGTERM);
      return 1;
    }
    pids.push_back(pid);
  }
  int worst = 0;
  std::string first_failure;
  for (size_t done = 0; done < pids.size(); ++done) {
    int status = 0;
    const pid_t pid = ::wait(&status);
    const auto it = std::find(pids.begin(), pids.end(), pid);
    const int rank = int(it - pids.begin());
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (code != 0 && first_failure.empty())
      first_failure = "rank " + std::to_string(rank) + " exited with status " + std::to_string(code);
    worst = std::max(worst, code);
  }
  if (!first_failure.empty()) {
    std::cerr << "memfine launch: " << first_failure << " (the others stop when their collectives time out)\n";
    return worst == 2 ? 2 : 1;
  }
  return 0;
}

int predict_experiment(const std::string& yaml) {
  std::vector<std::string> errors;
  std::vector<SweepPoint> points = load_experiment(yaml, errors, /*runnable_here=*/false);
  if (!errors.empty()) {
    for (const auto& e : errors) std::cerr << e << "\n";
    return 2;
  }
  double work_tflop = 0;
  int64_t modelled_points = 0;
  for (const auto& p : points) {
    if (p.config.paper.enabled) {
      // Paper scale: the paper's equations only (building this model for real is not the point).
      for (const auto& s : p.config.strategies) {
        json r = {{"experiment", p.config.name}, {"point", p.id}, {"strategy", s.label()}, {"model", "paper"}};
        try {
          const PaperProjection pr = project_paper(p.config, s);
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
        } catch (const std::exception& e) {
          r["note"] = e.what();
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
    for (const auto& s : p.config.strategies) {
      json r = {{"experiment", p.config.name}, {"point", p.id}, {"strategy", s.label()},
                {"predicted_static_bytes", nullptr}, {"predicted_activation_bytes", nullptr}, {"fits", nullptr},
                {"rank", er.rank}, {"tokens_received", recv_max}, {"step_tflop", step_tflop}};
      try {
        const Prediction pr = predict_step(p.config, er, strategy_shape(s));
        r["predicted_static_bytes"] = pr.static_bytes;
        r["predicted_activation_bytes"] = pr.activation_bytes;
        r["peak_phase"] = pr.phase;
        r["fits"] = p.config.budget < 0 ? json(nullptr) : json(pr.static_bytes + pr.activation_bytes <= p.config.budget);
      } catch (const std::invalid_argument& e) {
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
