// memfine: the command line. One harness, one flag set, one table for every strategy.
#include <algorithm>
#include <cstring>
#include <thread>
#include <iostream>
#include <string>
#include <vector>

#include <c10/util/Exception.h>

#include "core/run/validate.h"
#include "core/config/config.h"
#include "core/run/export.h"
#include "core/meter/memory_meter.h"
#include "core/dist/process.h"
#include "core/dist/launch.h"
#include "core/record/environment.h"
#include "core/run/compare.h"
#include "core/run/job.h"
#include "core/run/predict.h"
#include "core/run/report.h"
#include "core/run/runner.h"
#include "core/run/train/train.h"
#include "core/strategy/registry.h"

namespace {

const char* kUsage = R"(memfine - memory-aware MoE training benchmarks (MemFine, arXiv 2511.21431)

usage: memfine <command> [options]
       memfine --version

commands:
  run FILE.yaml [--out DIR] [--resume] [--threads N]
                        run an experiment sweep; one JSON line per point and strategy in
                        DIR/results.jsonl (default results/<device class>/<experiment name>/)
  train FILE.yaml [--out DIR] [--resume] [--threads N] [--trace-out CSV]
                        train a language model on real text (a file with a train: section),
                        one JSON line per step in DIR/train.jsonl; checkpoints for --resume
  validate FILE.yaml    check an experiment file without running it (exit 2 on problems)
  launch --nproc N FILE.yaml [run or train options]
                        run (or train) FILE.yaml as N local expert-parallel ranks (c10d, Gloo
                        on loopback); `run` and `train` alone join a job started by
                        torchrun-style launchers (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)
  predict FILE.yaml     print the memory model's predictions, one JSON line per point and strategy
  table DIR [--csv | --markdown]
                        the run table of a results folder (results.jsonl or train.jsonl);
                        CSV: one row per record, flat columns
  compare A B | compare DIR --strategies X Y
                        two runs (or two strategies of one) point by point: peak and time
                        ratios, a Mann-Whitney U verdict on every timed step, what differs
  plot DIR... [--out FOLDER]
                        figures of any results folder (PNG and PDF), side by side for several
  strategies            list the registered strategies and their parameters
  keys                  every key of an experiment file: type, range, default, meaning
  export FILE.yaml --out DIR [--point N]
                        write a point's weights, data and routing for an outside reference
                        (scripts/compare-pytorch checks our baselines against eager PyTorch)

Run 'memfine <command> --help' for a command's options. Experiment keys: experiments/README.md.
)";

const char* kRunHelp = R"(usage: memfine run FILE.yaml [--out DIR] [--resume] [--threads N] [--no-progress]

Runs every sweep point of FILE.yaml. For each point the strategies run interleaved, step by step
(warmup steps, then `repeats` timed steps), so their ratios are fair on a noisy machine.
A point that exceeds memory.budget is recorded with status "oom"; the sweep goes on.

  --out DIR      results folder (default results/<device class>/<experiment name>)
  --resume       continue DIR/results.jsonl: skip recorded points, repair a torn last line
  --threads N    LibTorch intra-op threads (0 = all cores); overrides the YAML's `threads`
  --no-progress  no progress bar on stderr

exit status: 0 all points measured (oom is a result), 1 a point failed, 2 bad input
)";

const char* kTrainHelp = R"(usage: memfine train FILE.yaml [--out DIR] [--resume] [--threads N] [--no-progress]
                          [--trace-out CSV]

Trains FILE.yaml's language model (model.vocab, a train: section) on real text with learned
routing: every strategy of every sweep point in turn, from the same weights on the same data
order. One record per step in DIR/train.jsonl: loss, evaluation loss every train.eval_every steps,
the router's tokens per layer and expert, s' of the hottest of train.stats_ep ranks (its
overload factor: s' * stats_ep over the layer's assignments), the activation peak, step time
and the strategy's counters (MACT's chunks, capacity's dropped share). The whole training state
is saved every train.checkpoint_every steps in DIR/checkpoints/; --resume continues from there
on the same data, without gap or repeat in the records. Out of memory ends that run with a
record of status "oom"; the others go on. With parallel.ep N > 1 it trains on N real ranks:
start it with memfine launch --nproc N (see memfine launch --help).

  --out DIR        results folder (default results/<device class>/<experiment name>)
  --resume         continue DIR/train.jsonl from the checkpoints
  --threads N      LibTorch intra-op threads (0 = all cores); overrides the YAML's `threads`
  --no-progress    no progress bar on stderr
  --trace-out CSV  write the first run's routing (first point, first strategy) as
                   step,layer,expert,tokens: the trace workload's format, which replays it at any
                   size (workload: {kind: trace, trace: CSV, schedule: trace}) in memfine run,
                   memfine predict or on a GPU

The corpus (train.corpus) defaults to Debian's 'fortunes' package (scripts/setup-deps installs it).
exit status: 0 every run trained (oom is a result), 1 a run failed, 2 bad input
)";

const char* kLaunchHelp = R"(usage: memfine launch --nproc N FILE.yaml [--out DIR] [--resume] [--threads N] [--trace-out CSV]
       memfine launch --nproc N --nnodes M --node-rank R --master-addr HOST --master-port PORT FILE.yaml ...

Starts N local ranks of `memfine run FILE.yaml` (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR=127.0.0.1
and a free MASTER_PORT), one per expert-parallel rank: FILE.yaml's parallel.ep must be N (N x M on
M nodes). Tokens really move between ranks through c10d's all-to-all (Gloo). Rank 0 gathers every
rank's records into the one results file (--out on node 0); the summary names the hottest rank. A
rank that fails ends the job: its exit status is reported, and the others stop when their
collectives time out (60 s; MEMFINE_COLLECTIVE_TIMEOUT seconds).

Several machines: run the same launch on each, with --nnodes M, its own --node-rank (0..M-1), and
node 0's address and a free port on it (--master-addr, --master-port); node R's ranks are
R*N..R*N+N-1. GLOO_SOCKET_IFNAME (NCCL_SOCKET_IFNAME on GPUs) picks the network interface.

A file with a train: section is trained instead (`memfine train` on every rank): each rank holds
its E/N experts and micro_batch sequences of the global batch, routing is learned across the
ranks, and rank 0 writes one record per step (s' is the hottest real rank's). --trace-out as train.
--threads defaults to the cores divided by N.
)";

const char* kValidateHelp = R"(usage: memfine validate FILE.yaml

Checks FILE.yaml and every point of its sweep without running anything. Prints one line per
problem on stderr, as FILE:LINE: key.path: what is wrong, and exits 2; exits 0 when valid.
)";

const char* kPredictHelp = R"(usage: memfine predict FILE.yaml [--json]

Prints, without running anything, the memory model's predictions per point and strategy: static,
activation and total bytes, whether they fit memory.budget, MACT's chunks per layer, and why a
strategy is not predicted or does not fit; on stderr, the FLOPs a `memfine run` of the file would
do. Any build predicts any experiment: a CPU build predicts a GPU one (device: cuda), which the
memory model does not need. Files with a paper: section use the paper's own equations.

  --json   one JSON line per point and strategy instead (the records' head, then the model's
           fields: predicted_static_bytes, predicted_activation_bytes, fits, chunks,
           unpredicted_why, fits_why, tokens_received, step_tflop, routing)

Routing is made token by token as `run` makes it while the whole file's is small (2^25 token
assignments); beyond, from the workload's counts per layer and expert, each rank and chunk taking
its share ("routing": "counts"), so that memory and time follow the experts, not the tokens.
)";

const char* kExportHelp = R"(usage: memfine export FILE.yaml --out DIR [--point N]

Writes what a training step of sweep point N (0-based, default 0) starts from: every parameter,
the input and target, and the routing of each of the warmup + repeats steps, as DIR/state.bin
(raw little-endian tensors) and DIR/state.json (the resolved configuration and a table of tensor
names, dtypes, shapes and byte offsets). tests/pytorch_reference.py reads it; scripts/compare-pytorch
puts the two side by side. One process only: parallel.ep must be 1, device cpu, routing fixed.
)";

const char* kTableHelp = R"(usage: memfine table DIR [--csv | --markdown]

Prints the table of an existing results folder (DIR/results.jsonl, or DIR/train.jsonl for a
training run; DIR may also be the file), as `memfine run` (or `train`) ends with it. --markdown: the
same as a Markdown table; --csv: every record as one row with flat columns (config.model.hidden,
step_ms.median, ...; lists as JSON text), for pandas and spreadsheets.
)";

const char* kCompareHelp = R"(usage: memfine compare A B
       memfine compare DIR --strategies X Y

Compares two results folders of one experiment point by point (point, strategy and rank), or two
strategies X and Y within one folder: activation peak and median step time as B / A, and a verdict
on the step times from every timed step (step_ms_all): a two-sided Mann-Whitney U test, faster or
slower at p < 0.05, else no difference; it needs 4 or more timed steps per side (repeats). Then what
differs between A and B: machine, commit, LibTorch, threads, BLAS, configuration, so that a change's
effect is not taken for a machine's.
)";

const char* kPlotHelp = R"(usage: memfine plot DIR... [--out FOLDER]

Draws the figures of any results folder from its records alone (scripts/plots, matplotlib through
scripts/python): activation peak and step time per strategy at each point (out of memory marked,
capacity's dropped share on its bar, ratios against the baseline), a swept key as the x-axis with
a line per strategy, and for a training run loss and held-out loss against tokens, the peak per
step against the budget, MACT's chunk grid and s' per layer. PNG and PDF into FOLDER (default
DIR/figures); several folders are drawn side by side.
)";

const char* kKeysHelp = R"(usage: memfine keys

Prints every key of an experiment file with its type, range, default and meaning (a Markdown table:
experiments/README.md's key reference is this output).
)";

const char* kStrategiesHelp = R"(usage: memfine strategies [--json | --markdown]

Lists the registered strategies, each with a one-line description and its parameters (type and
default); --json: the same as one JSON object (name -> description, role, params); --markdown: a
table (experiments/README.md's strategy reference is this output).
)";

bool wants_help(const std::vector<std::string>& args) {
  for (const auto& a : args)
    if (a == "--help" || a == "-h") return true;
  return false;
}

// A whole decimal integer in [lo, hi]: "1e3", "2.9", "2x" and values past the range are refused,
// not cut to what a prefix reads as.
bool parse_flag_int(const std::string& text, int64_t lo, int64_t hi, int64_t& out) {
  if (text.empty() || text.size() > 19) return false;
  for (char ch : text)
    if (ch < '0' || ch > '9') return false;
  const long long v = std::stoll(text);
  if (v < lo || v > hi) return false;
  out = v;
  return true;
}

int usage_error(const std::string& msg, const char* help) {
  std::cerr << "memfine: " << msg << "\n\n" << help;
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  memfine::use_passive_openmp_waits(argv);
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    std::cout << kUsage;
    return args.empty() ? 2 : 0;
  }
  if (args[0] == "--version" || args[0] == "version") {
    std::cout << memfine::version_text() << "\n";
    return 0;
  }
  const std::string cmd = args[0];
  args.erase(args.begin());
  // Count every CPU byte from the start: installed before any tensor exists.
  memfine::MemoryMeter::get("cpu");
  try {
    if (cmd == "run" || cmd == "train") {
      const char* help = cmd == "run" ? kRunHelp : kTrainHelp;
      if (wants_help(args)) return std::cout << help, 0;
      memfine::RunOptions opt;
      std::string file;
      for (size_t i = 0; i < args.size(); ++i) {
        const std::string& a = args[i];
        if (a == "--out") {
          if (i + 1 >= args.size() || args[i + 1].empty()) return usage_error("--out needs a folder", help);
          opt.out_dir = args[++i];
        } else if (a == "--trace-out" && cmd == "train") {
          if (i + 1 >= args.size() || args[i + 1].empty()) return usage_error("--trace-out needs a file", help);
          opt.trace_out = args[++i];
        } else if (a == "--resume") opt.resume = true;
        else if (a == "--no-progress") opt.progress = false;
        else if (a == "--threads") {
          if (i + 1 >= args.size() || !parse_flag_int(args[i + 1], 0, 1024, opt.threads))
            return usage_error("--threads needs a whole number in [0, 1024] (0: all cores), got '" +
                                   (i + 1 < args.size() ? args[i + 1] : std::string()) + "'",
                               help);
          ++i;
        } else if (!a.empty() && a[0] == '-') return usage_error("unknown option '" + a + "'", help);
        else if (file.empty()) file = a;
        else return usage_error("one experiment file at a time", help);
      }
      if (file.empty()) return usage_error(cmd + " needs an experiment file", help);
      return cmd == "run" ? memfine::run_experiment(file, opt) : memfine::train_experiment(file, opt);
    }
    if (cmd == "launch") {
      if (wants_help(args)) return std::cout << kLaunchHelp, 0;
      memfine::LaunchPlace place;
      place.nproc = 0;
      std::vector<std::string> rest;
      bool threads_given = false;
      for (size_t i = 0; i < args.size(); ++i) {
        const std::string& a = args[i];
        auto number = [&](int64_t lo, int64_t hi, int& dst) {
          int64_t n = 0;
          if (i + 1 >= args.size() || !parse_flag_int(args[i + 1], lo, hi, n)) return false;
          dst = int(n), ++i;
          return true;
        };
        const std::string got = i + 1 < args.size() ? args[i + 1] : std::string();
        if (a == "--nproc") {
          if (!number(1, 1024, place.nproc))
            return usage_error("--nproc needs a whole number in [1, 1024], got '" + got + "'", kLaunchHelp);
        } else if (a == "--nnodes") {
          if (!number(1, 65536, place.nnodes))
            return usage_error("--nnodes needs a whole number in [1, 65536], got '" + got + "'", kLaunchHelp);
        } else if (a == "--node-rank") {
          if (!number(0, 65535, place.node_rank))
            return usage_error("--node-rank needs a whole number in [0, 65535], got '" + got + "'", kLaunchHelp);
        } else if (a == "--master-port") {
          if (!number(1, 65535, place.master_port))
            return usage_error("--master-port needs a port in [1, 65535], got '" + got + "'", kLaunchHelp);
        } else if (a == "--master-addr") {
          if (got.empty()) return usage_error("--master-addr needs rank 0's host name or address", kLaunchHelp);
          place.master_addr = got, ++i;
        } else {
          threads_given |= a == "--threads";
          rest.push_back(a);
        }
      }
      if (place.nproc < 1) return usage_error("launch needs --nproc N (1 or more)", kLaunchHelp);
      if (place.node_rank >= place.nnodes)
        return usage_error("--node-rank must be below --nnodes (" + std::to_string(place.nnodes) + ")", kLaunchHelp);
      if (place.nnodes > 1 && place.master_port == 0)
        return usage_error("several nodes need --master-addr and --master-port: where node 0's rank 0 listens", kLaunchHelp);
      // One rank per expert-parallel rank: a mismatch is said once, before any rank starts. A file
      // with a train: section is trained (memfine train), any other measured (memfine run).
      std::string command = "run";
      for (size_t i = 0; i < rest.size(); ++i) {
        if (rest[i] == "--out" || rest[i] == "--threads" || rest[i] == "--trace-out") {
          ++i;
          continue;
        }
        if (rest[i].empty() || rest[i][0] == '-') continue;
        std::vector<std::string> errors;
        const auto points = memfine::load_and_validate(rest[i], errors);
        for (const auto& e : errors) std::cerr << e << "\n";
        if (!errors.empty()) return 2;
        if (!points.empty() && points.front().config.train.enabled) command = "train";
        if (const std::string why = memfine::ranks_problem(points, place.nnodes * place.nproc, true); !why.empty()) {
          std::cerr << why << "\n";
          return 2;
        }
        break;
      }
      if (!threads_given) {
        const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
        rest.push_back("--threads");
        rest.push_back(std::to_string(std::max(1u, cores / unsigned(place.nproc))));
      }
      return memfine::launch_experiment("/proc/self/exe", place, command, rest);
    }
    if (cmd == "validate" || cmd == "predict") {
      const char* help = cmd == "validate" ? kValidateHelp : kPredictHelp;
      if (wants_help(args)) return std::cout << help, 0;
      if (cmd == "validate" && args.size() != 1) return usage_error(cmd + " needs exactly one experiment file", help);
      if (cmd == "predict") {
        const bool json_lines = std::find(args.begin(), args.end(), "--json") != args.end();
        std::vector<std::string> files;
        for (const auto& a : args)
          if (a != "--json") files.push_back(a);
        if (files.size() != 1) return usage_error("predict needs exactly one experiment file", help);
        return memfine::predict_experiment(files[0], json_lines);
      }
      std::vector<std::string> errors;
      auto points = memfine::load_and_validate(args[0], errors);
      for (const auto& e : errors) std::cerr << e << "\n";
      if (!errors.empty()) return 2;
      std::cout << args[0] << ": valid, " << points.size() << " point(s) x " << points[0].config.strategies.size()
                << " strategies\n";
      return 0;
    }
    if (cmd == "export") {
      if (wants_help(args)) return std::cout << kExportHelp, 0;
      std::string file, dir;
      int64_t point = 0;
      for (size_t i = 0; i < args.size(); ++i) {
        if (args[i] == "--out") {
          if (i + 1 >= args.size() || args[i + 1].empty()) return usage_error("--out needs a folder", kExportHelp);
          dir = args[++i];
        } else if (args[i] == "--point") {
          if (i + 1 >= args.size() || !parse_flag_int(args[i + 1], 0, int64_t(memfine::kMaxSweepPoints), point))
            return usage_error("--point needs a whole number, got '" + (i + 1 < args.size() ? args[i + 1] : std::string()) + "'",
                               kExportHelp);
          ++i;
        } else if (!args[i].empty() && args[i][0] == '-') return usage_error("unknown option '" + args[i] + "'", kExportHelp);
        else if (file.empty()) file = args[i];
        else return usage_error("one experiment file at a time", kExportHelp);
      }
      if (file.empty() || dir.empty()) return usage_error("export needs an experiment file and --out DIR", kExportHelp);
      return memfine::export_experiment(file, dir, point);
    }
    if (cmd == "table") {
      if (wants_help(args)) return std::cout << kTableHelp, 0;
      std::string dir, as = "text";
      for (const auto& a : args) {
        if (a == "--csv" || a == "--markdown") as = a.substr(2);
        else if (!a.empty() && a[0] == '-') return usage_error("unknown option '" + a + "'", kTableHelp);
        else if (dir.empty()) dir = a;
        else return usage_error("one results folder at a time", kTableHelp);
      }
      if (dir.empty()) return usage_error("table needs a results folder", kTableHelp);
      return memfine::table_command(dir, as);
    }
    if (cmd == "compare") {
      if (wants_help(args)) return std::cout << kCompareHelp, 0;
      try {
        return memfine::compare_command(args);
      } catch (const std::invalid_argument& e) {
        return usage_error(e.what(), kCompareHelp);
      }
    }
    if (cmd == "plot") {
      if (wants_help(args)) return std::cout << kPlotHelp, 0;
      return memfine::plot_command(args);
    }
    if (cmd == "keys") {
      if (wants_help(args)) return std::cout << kKeysHelp, 0;
      std::cout << memfine::key_reference_markdown();
      return 0;
    }
    if (cmd == "strategies") {
      if (wants_help(args)) return std::cout << kStrategiesHelp, 0;
      if (std::find(args.begin(), args.end(), "--markdown") != args.end()) {
        std::cout << "| strategy | parameter | type | default | meaning |\n|---|---|---|---|---|\n";
        for (const auto& [name, info] : memfine::strategy_registry()) {
          std::cout << "| `" << name << "` | | | | " << info.description << " |\n";
          for (const auto& p : info.params)
            std::cout << "| | `" << p.name << "` | " << p.type << " | " << memfine::label_value(p.fallback)
                      << (p.named ? " (always in the label)" : "") << " | " << p.help << " |\n";
        }
        return 0;
      }
      if (std::find(args.begin(), args.end(), "--json") != args.end()) {
        nlohmann::json all = nlohmann::json::object();
        for (const auto& [name, info] : memfine::strategy_registry()) {
          nlohmann::json params = nlohmann::json::object();
          for (const auto& p : info.params)
            params[p.name] = {{"help", p.help}, {"type", p.type}, {"default", p.fallback}, {"named", p.named}};
          const memfine::Role role = info.role;
          all[name] = {{"description", info.description}, {"params", params},
                       {"role", role == memfine::Role::Reference ? "reference" : role == memfine::Role::Baseline ? "baseline" : ""}};
        }
        std::cout << all.dump(2) << "\n";
        return 0;
      }
      for (const auto& [name, info] : memfine::strategy_registry()) {
        std::cout << name << "\n    " << info.description << "\n";
        for (const auto& p : info.params)
          std::cout << "    " << p.name << ": " << p.help << " (" << p.type << "; default "
                    << memfine::label_value(p.fallback) << ")\n";
      }
      return 0;
    }
    return usage_error("unknown command '" + cmd + "'", kUsage);
  } catch (const c10::Error& e) {  // LibTorch's own, without its stack of frames
    std::cerr << "memfine " << cmd << ": " << e.what_without_backtrace() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "memfine " << cmd << ": " << e.what() << "\n";
    return 1;
  }
}
