#include "core/cli/commands.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <thread>

#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>

#include "core/config/config.h"
#include "core/dist/launch.h"
#include "core/dist/process.h"
#include "core/meter/memory_meter.h"
#include "core/project/project.h"
#include "core/record/environment.h"
#include "core/run/compare.h"
#include "core/run/export.h"
#include "core/run/job.h"
#include "core/run/predict.h"
#include "core/run/report.h"
#include "core/run/runner.h"
#include "core/run/train/train.h"
#include "core/run/validate.h"

namespace memfine::cli {

namespace {

// What a projection or a formula's JSON names: the commit and the date it was made at.
std::map<std::string, std::string> made_stamp() {
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return {{"git_commit", git_commit()}, {"date", date}};
}

// `memfine project FILE` (and `memfine predict` of a project file).
int project_command(const Args& a) {
  const std::string file = a.operands[0];
  ProjectConfig pc;
  try {
    pc = read_project(file, a.text("--presets", default_presets_dir(file)));
  } catch (const std::invalid_argument& e) {
    std::cerr << e.what() << "\n";
    return 2;
  }
  pc.gpus = a.integer("--gpus", pc.gpus);  // the parser held both to the file's own ranges
  pc.global_batch = a.integer("--global-batch", pc.global_batch);
  const ProjectResult r = run_project(pc);
  std::cout << (a.has("--json") ? project_json(pc, r, made_stamp()) : project_table(pc, r));
  return 0;
}

// The flags `run` and `train` share; `launch` passes them on to its ranks.
const Flag kOut{"--out", "DIR", "results folder (default: a new folder results/runs/<device>/<name>/<date-time>/)"};
const Flag kResume{"--resume", "", "continue DIR's records (without --out: the experiment's newest folder)"};
const Flag kThreads{
    "--threads", "N", "LibTorch intra-op threads (0 = all cores); overrides the YAML's `threads`", 1, true, 0, 1024};
const Flag kNoProgress{"--no-progress", "", "no progress bar on stderr"};
const Flag kTraceOut{"--trace-out", "CSV",
                     "write the first run's routing (first point, first strategy) as\n"
                     "step,layer,expert,tokens: the trace workload's format, which replays it at any\n"
                     "size (workload: {kind: trace, trace: CSV, schedule: trace}) in memfine run,\n"
                     "memfine predict or on a GPU"};

RunOptions run_options(const Args& a) {
  RunOptions o;
  o.out_dir = a.text("--out");
  o.resume = a.has("--resume");
  o.threads = a.integer("--threads", -1);
  o.progress = !a.has("--no-progress");
  o.trace_out = a.text("--trace-out");
  return o;
}

// Prints the problems of an experiment file; its points when there are none.
std::vector<SweepPoint> load_or_say(const std::string& yaml, bool& ok) {
  std::vector<std::string> errors;
  auto points = load_and_validate(yaml, errors);
  for (const auto& e : errors) std::cerr << e << "\n";
  ok = errors.empty();
  return points;
}

int launch(const Args& a) {
  LaunchPlace place;
  place.nproc = int(a.integer("--nproc", 0));
  place.nnodes = int(a.integer("--nnodes", 1));
  place.node_rank = int(a.integer("--node-rank", 0));
  place.master_port = int(a.integer("--master-port", 0));
  place.master_addr = a.text("--master-addr", place.master_addr);
  if (place.nproc < 1) throw UsageError("launch needs --nproc N (1 or more)");
  if (place.node_rank >= place.nnodes)
    throw UsageError("--node-rank must be below --nnodes (" + std::to_string(place.nnodes) + ")");
  if (place.nnodes > 1 && place.master_port == 0)
    throw UsageError("several nodes need --master-addr and --master-port: where node 0's rank 0 listens");
  // One rank per expert-parallel rank: a mismatch is said once, before any rank starts. A file
  // with a train: section is trained (memfine train), any other measured (memfine run).
  const std::string yaml = a.operands[0];
  bool ok = false;
  const auto points = load_or_say(yaml, ok);
  if (!ok) return 2;
  const bool train = !points.empty() && points.front().config.train.enabled;
  if (a.has("--trace-out") && !train)
    throw UsageError("--trace-out is for training: " + yaml + " has no train: section");
  if (const std::string why = ranks_problem(points, place.nnodes * place.nproc, true); !why.empty()) {
    std::cerr << why << "\n";
    return 2;
  }
  // The ranks get the run's own flags, as given; --threads defaults to the cores shared out.
  std::vector<std::string> rest = {yaml};
  for (const Flag* f : {&kOut, &kResume, &kThreads, &kNoProgress, &kTraceOut}) {
    if (!a.has(f->name)) continue;
    rest.push_back(f->name);
    for (const auto& v : a.flags.at(f->name)) rest.push_back(v);
  }
  if (!a.has("--threads")) {
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    rest.push_back("--threads");
    rest.push_back(std::to_string(std::max(1u, cores / unsigned(place.nproc))));
  }
  return launch_experiment("/proc/self/exe", place, train ? "train" : "run", rest);
}

std::vector<Command> declare() {
  std::vector<Command> c;
  c.push_back({"run",
               "FILE.yaml",
               "measure an experiment's sweep: a record per point and strategy",
               R"(Runs every sweep point of FILE.yaml. For each point the strategies run interleaved, step by step
(warmup steps, then `repeats` timed steps), so their ratios are fair on a noisy machine.
A point that exceeds memory.budget is recorded with status "oom"; the sweep goes on.
--resume skips recorded points and repairs a torn last line; a file written under another
configuration is refused, naming the keys that differ.

exit status: 0 all points measured (oom is a result), 1 a point failed or did not verify, 2 bad input
)",
               {kOut, kResume, kThreads, kNoProgress},
               1,
               1,
               [](const Args& a) { return run_experiment(a.operands[0], run_options(a)); }});
  c.push_back({"train",
               "FILE.yaml",
               "train a MoE language model on real text: a record per step",
               R"(Trains FILE.yaml's language model (model.vocab, a train: section) on real text with learned
routing: every strategy of every sweep point in turn, from the same weights on the same data
order. One record per step in DIR/train.jsonl: loss, evaluation loss every train.eval_every steps,
the router's tokens per layer and expert, s' of the hottest of train.stats_ep ranks (its
overload factor: s' * stats_ep over the layer's assignments), the activation peak, step time
and the strategy's counters (MACT's chunks, capacity's dropped share). The whole training state
is saved every train.checkpoint_every steps in DIR/checkpoints/; --resume continues from there
on the same data, without gap or repeat in the records. Out of memory ends that run with a
record of status "oom"; the others go on. With parallel.ep N > 1 it trains on N real ranks:
start it with memfine launch --nproc N (see memfine launch --help).
The corpus (train.corpus) defaults to Debian's 'fortunes' package (scripts/setup-deps installs it).

exit status: 0 every run trained (oom is a result), 1 a run failed, 2 bad input
)",
               {kOut, kResume, kThreads, kNoProgress, kTraceOut},
               1,
               1,
               [](const Args& a) { return train_experiment(a.operands[0], run_options(a)); }});
  c.push_back({"launch",
               "FILE.yaml",
               "run or train FILE.yaml as real expert-parallel ranks (--nproc N)",
               R"(Starts N local ranks of `memfine run FILE.yaml` (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR=127.0.0.1
and a free MASTER_PORT), one per expert-parallel rank: FILE.yaml's parallel.ep must be N (N x M on
M nodes). Tokens really move between ranks through c10d's all-to-all (Gloo). Rank 0 gathers every
rank's records into the one results file (--out on node 0); the summary names the hottest rank. A
rank that fails ends the job: its exit status is reported, and the others stop when their
collectives time out (60 s; MEMFINE_COLLECTIVE_TIMEOUT seconds). `memfine run` and `memfine train`
alone join a job started by torchrun-style launchers (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)
or Slurm's srun (SLURM_PROCID, SLURM_NTASKS).

Several machines: run the same launch on each, with --nnodes M, its own --node-rank (0..M-1), and
node 0's address and a free port on it (--master-addr, --master-port); node R's ranks are
R*N..R*N+N-1. GLOO_SOCKET_IFNAME (NCCL_SOCKET_IFNAME on GPUs) picks the network interface.

A file with a train: section is trained instead (`memfine train` on every rank): each rank holds
its E/N experts and micro_batch sequences of the global batch, routing is learned across the
ranks, and rank 0 writes one record per step (s' is the hottest real rank's). The run's flags
(--out, --resume, --threads, --no-progress, --trace-out) go to every rank; --threads defaults to
the cores divided by N.
)",
               {{"--nproc", "N", "ranks on this machine", 1, true, 1, 1024},
                {"--nnodes", "M", "machines in the job (default 1)", 1, true, 1, 65536},
                {"--node-rank", "R", "this machine's place among them, 0..M-1 (default 0)", 1, true, 0, 65535},
                {"--master-addr", "HOST", "node 0's host name or address (default 127.0.0.1)"},
                {"--master-port", "PORT", "a free port on node 0 (default: a free loopback port)", 1, true, 1, 65535},
                kOut,
                kResume,
                kThreads,
                kNoProgress,
                kTraceOut},
               1,
               1,
               launch});
  c.push_back({"validate",
               "FILE.yaml",
               "check an experiment file without running it",
               R"(Checks FILE.yaml and every point of its sweep without running anything. Prints one line per
problem on stderr, as FILE:LINE: key.path: what is wrong, and exits 2; exits 0 when valid. A project
file (`memfine project`'s: it names a `hardware`) is checked as one.
)",
               {},
               1,
               1,
               [](const Args& a) {
                 if (is_project_file(a.operands[0])) {
                   const std::string file = a.operands[0];
                   try {
                     const ProjectConfig pc = read_project(file, default_presets_dir(file));
                     std::cout << file << ": valid project file, " << pc.model.name << " on " << pc.gpus << " x "
                               << pc.hardware.name << ", " << pc.strategies.size() << " strategies\n";
                     return 0;
                   } catch (const std::invalid_argument& e) {
                     std::cerr << e.what() << "\n";
                     return 2;
                   }
                 }
                 bool ok = false;
                 const auto points = load_or_say(a.operands[0], ok);
                 if (!ok) return 2;
                 std::cout << a.operands[0] << ": valid, " << points.size() << " point(s) x "
                           << points[0].config.strategies.size() << " strategies\n";
                 return 0;
               }});
  c.push_back({"predict",
               "FILE.yaml",
               "the memory model's view of an experiment, nothing run",
               R"(Prints, without running anything, the memory model's predictions per point and strategy: static,
activation and total bytes, whether they fit memory.budget, MACT's chunks per layer, and why a
strategy is not predicted or does not fit; on stderr, the FLOPs a `memfine run` of the file would
do. Any build predicts any experiment: a CPU build predicts a GPU one (device: cuda), which the
memory model does not need. Files with a paper: section use the paper's own equations; a project
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
               [](const Args& a) {
                 // A project file (it names a hardware): the cluster-scale projection, as `memfine project`.
                 if (is_project_file(a.operands[0])) return project_command(a);
                 return predict_experiment(a.operands[0], a.has("--json"));
               }});
  c.push_back({"project",
               "FILE.yaml",
               "will it fit, how fast, how much survives failures: layouts x strategies at cluster scale",
               R"(Projects a whole model (a preset of experiments/project/models.yaml or its keys) on a cluster (a
hardware preset and a GPU count) for every layout of the file's search space (TP, PP with its
virtual stages, EP, DP, CP, micro-batch) x memory strategy (no, full, moe_act and MemFine
recomputation with MACT's chunks, offloading, capacity capping), under the file's routing
imbalance: the hottest GPU's memory and whether it fits, the step time in parts (compute,
recomputation, exposed communication, pipeline bubble), tokens per second per GPU beside the
balanced figure, model TFLOP/s (recomputation not counted) and goodput (ETTR at the optimal
checkpoint interval x tokens per second), ranked by goodput, with why the rest were rejected.
Nothing is run; each part's model prints its assumptions. experiments/README.md lists the keys.

exit status: 0, or 2 for a file with problems (FILE:LINE: key.path: problem).
)",
               {{"--json", "", "one JSON line per layout and strategy (fitting ones ranked first) instead"},
                {"--gpus", "N", "the cluster's GPU count instead of the file's (a sweep over cluster sizes)", 1, true,
                 1, int64_t(1) << 24},
                {"--global-batch", "N", "sequences per step instead of the file's", 1, true, 1, int64_t(1) << 30},
                {"--presets", "DIR",
                 "where the model and hardware presets are (default: the file's folder's project/, or the folder "
                 "itself or its parent where models.yaml is)"}},
               1,
               1,
               project_command});
  c.push_back({"checkpoint",
               "",
               "how often to checkpoint, and what failures leave: Young's, Daly's and Kokolis et al.'s formulas",
               R"(For a job that fails every --mtbf-h hours on average (or on --nodes nodes at a --reliability
preset's or a written rate of failures per 1000 node-days), writing a checkpoint in --write-min and
restarting in --restart-min: the checkpoint interval by Young's formula (Kokolis et al.'s optimum is
the same) and by Daly's higher-order one, Kokolis et al.'s expected effective training time ratio
(ETTR) at Young's interval, and Daly's efficiency (time without failures over expected wall time)
at his. core/project/goodput.h names each source; memfine project applies the same formulas.

exit status: 0, or 2 for a missing or absurd value.
)",
               {{"--mtbf-h", "H", "the job's mean time between failures, hours"},
                {"--nodes", "N", "nodes in the job (with --reliability instead of --mtbf-h)"},
                {"--reliability", "NAME|RATE", "llama3, rsc1, rsc2, or failures per 1000 node-days (default llama3)"},
                {"--write-min", "MIN", "a checkpoint's write time, minutes"},
                {"--restart-min", "MIN", "a restart's cost, minutes (default 10)"},
                {"--json", "", "one JSON object instead of the text"}},
               0,
               0,
               [](const Args& a) {
                 auto number = [&](const char* flag, double fallback) {
                   const std::string t = a.text(flag, "");
                   if (t.empty()) return fallback;
                   size_t used = 0;
                   double v = std::nan("");
                   try {
                     v = std::stod(t, &used);
                   } catch (const std::exception&) {
                   }
                   if (used != t.size() || !std::isfinite(v) || v < 0)
                     throw std::invalid_argument(std::string(flag) + ": expected a number >= 0, got '" + t + "'");
                   return v;
                 };
                 CheckpointPlan plan;
                 std::string rate_source;
                 try {
                   double mtbf = number("--mtbf-h", 0);
                   if (mtbf <= 0) {
                     const double nodes = number("--nodes", 0);
                     if (nodes < 1) throw std::invalid_argument("give --mtbf-h, or --nodes (and --reliability)");
                     const std::string rel = a.text("--reliability", "llama3");
                     const double rate = std::isdigit(static_cast<unsigned char>(rel[0]))
                                             ? number("--reliability", 0) / 24000
                                             : reliability_preset(rel).node_failure_rate;
                     if (rate <= 0) throw std::invalid_argument("--reliability: a rate must be above 0");
                     rate_source = rel;
                     mtbf = job_mttf(int64_t(nodes), rate);
                   }
                   const double write = number("--write-min", -1);
                   if (write <= 0) throw std::invalid_argument("--write-min: give a checkpoint's write time above 0");
                   plan = checkpoint_plan(mtbf, write / 60, number("--restart-min", 10) / 60);
                 } catch (const std::invalid_argument& e) {
                   std::cerr << "memfine checkpoint: " << e.what() << "\n";
                   return 2;
                 }
                 if (a.has("--json")) {
                   nlohmann::json j{{"mttf_h", plan.mttf},
                                    {"write_min", plan.write * 60},
                                    {"restart_min", plan.restart * 60},
                                    {"reliability", rate_source},
                                    {"young_interval_min", plan.young * 60},
                                    {"daly_interval_min", plan.daly * 60},
                                    {"ettr", plan.ettr},
                                    {"daly_efficiency", plan.daly_efficiency}};
                   for (const auto& [k, v] : made_stamp()) j[k] = v;
                   std::cout << j.dump() << "\n";
                   return 0;
                 }
                 std::printf("job MTBF %.3g h, checkpoint write %.3g min, restart %.3g min\n", plan.mttf,
                             plan.write * 60, plan.restart * 60);
                 std::printf("interval: Young (and Kokolis et al.'s optimum) %.3g min, Daly %.3g min\n",
                             plan.young * 60, plan.daly * 60);
                 std::printf("expected ETTR at Young's interval (Kokolis et al.): %.3f\n", plan.ettr);
                 std::printf("Daly's efficiency at his interval (time without failures / wall time): %.3f\n",
                             plan.daly_efficiency);
                 return 0;
               }});
  c.push_back(
      {"table",
       "DIR",
       "the run table of a results folder (text, Markdown or CSV)",
       R"(Prints the table of an existing results folder (DIR/results.jsonl, or DIR/train.jsonl for a
training run; DIR may also be the file), as `memfine run` (or `train`) ends with it.
)",
       {{"--markdown", "", "the same as a Markdown table"},
        {"--csv", "",
         "every record as one row with flat columns (config.model.hidden,\n"
         "step_ms.median, ...; lists as JSON text), for pandas and spreadsheets"}},
       1,
       1,
       [](const Args& a) {
         if (a.has("--csv") && a.has("--markdown")) throw UsageError("--csv or --markdown, not both");
         return table_command(a.operands[0], a.has("--csv") ? "csv" : a.has("--markdown") ? "markdown" : "text");
       }});
  c.push_back(
      {"compare",
       "A [B]",
       "two runs, or two strategies of one, with a verdict",
       R"(Compares two results folders A and B of one experiment point by point (point, strategy and
rank), or two strategies X and Y within one folder (--strategies): activation peak and median
step time as B / A, and a verdict on the step times from every timed step (step_ms_all): a
two-sided Mann-Whitney U test, faster or slower at p < 0.05, else no difference; it needs 4 or
more timed steps per side (repeats). Then what differs between A and B: machine, commit,
LibTorch, threads, BLAS, configuration, so that a change's effect is not taken for a machine's.
)",
       {{"--strategies", "X Y", "compare strategy Y with X within folder A (labels as the table shows them)", 2}},
       1,
       2,
       [](const Args& a) {
         if (a.has("--strategies") != (a.operands.size() == 1))
           throw UsageError("compare needs two results folders, or one and --strategies X Y");
         return compare_command(a.operands,
                                a.has("--strategies") ? a.flags.at("--strategies") : std::vector<std::string>{});
       }});
  c.push_back({"plot",
               "DIR...",
               "figures of any results folders (PNG and PDF)",
               R"(Draws the figures of any results folder from its records alone (scripts/plots, matplotlib through
scripts/python): activation peak and step time per strategy at each point (out of memory marked,
capacity's dropped share on its bar, ratios against the baseline), a swept key as the x-axis with
a line per strategy, and for a training run loss and held-out loss against tokens, the peak per
step against the budget, MACT's chunk grid and s' per layer. Several folders are drawn side by side.
)",
               {{"--out", "FOLDER", "where the PNG and PDF files go (default DIR/figures)"}},
               1,
               64,
               [](const Args& a) {
                 std::vector<std::string> words = a.operands;
                 if (a.has("--out")) words.push_back("--out"), words.push_back(a.text("--out"));
                 return plot_command(words);
               }});
  c.push_back({"strategies",
               "",
               "the registered strategies and their parameters",
               R"(Lists the registered strategies, each with a one-line description and its parameters (type and
default).
)",
               {{"--json", "", "the same as one JSON object (name -> description, role, params)"},
                {"--markdown", "", "a table (experiments/README.md's strategy reference is this output)"}},
               0,
               0,
               [](const Args& a) {
                 return strategies_command(a.has("--markdown") ? "markdown" : a.has("--json") ? "json" : "text");
               }});
  c.push_back({"keys",
               "",
               "every key of an experiment file",
               R"(Prints every key of an experiment file with its type, range, default and meaning (a Markdown table:
experiments/README.md's key reference is this output).
)",
               {},
               0,
               0,
               [](const Args&) {
                 std::cout << key_reference_markdown();
                 return 0;
               }});
  c.push_back({"export",
               "FILE.yaml",
               "a point's weights, data and routing for eager PyTorch",
               R"(Writes what a training step of sweep point N (0-based, default 0) starts from: every parameter,
the input and target, and the routing of each of the warmup + repeats steps, as DIR/state.bin
(raw little-endian tensors) and DIR/state.json (the resolved configuration and a table of tensor
names, dtypes, shapes and byte offsets). tests/pytorch_reference.py reads it; scripts/compare-pytorch
puts the two side by side. One process only: parallel.ep must be 1, device cpu, routing fixed.
)",
               {{"--out", "DIR", "where state.bin and state.json go (required)"},
                {"--point", "N", "the sweep point (default 0)", 1, true, 0, int64_t(kMaxSweepPoints)}},
               1,
               1,
               [](const Args& a) {
                 if (!a.has("--out")) throw UsageError("export needs --out DIR");
                 return export_experiment(a.operands[0], a.text("--out"), a.integer("--point", 0));
               }});
  return c;
}

std::string overview() {
  std::string out =
      "memfine - memory-aware MoE training benchmarks (MemFine, arXiv 2511.21431)\n\n"
      "usage: memfine <command> [options]\n       memfine --version\n\ncommands:\n";
  for (const auto& c : commands()) {
    const std::string head = c.name + (c.operands.empty() ? "" : " " + c.operands);
    out += "  " + head + (head.size() < 22 ? std::string(24 - head.size(), ' ') : "\n" + std::string(26, ' ')) +
           c.summary + "\n";
  }
  return out + "\nRun 'memfine <command> --help' for a command's options. Experiment keys: experiments/README.md.\n";
}

}  // namespace

const std::vector<Command>& commands() {
  static const std::vector<Command> all = declare();
  return all;
}

int run_command_line(int argc, char** argv) {
  use_passive_openmp_waits(argv);
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    std::cout << overview();
    return args.empty() ? 2 : 0;
  }
  if (args[0] == "--version" || args[0] == "version") {
    std::cout << version_text() << "\n";
    return 0;
  }
  const auto& all = commands();
  const auto it = std::find_if(all.begin(), all.end(), [&](const Command& c) { return c.name == args[0]; });
  if (it == all.end()) {
    std::cerr << "memfine: unknown command '" << args[0] << "'\n\n" << overview();
    return 2;
  }
  const Command& cmd = *it;
  args.erase(args.begin());
  if (std::find(args.begin(), args.end(), "--help") != args.end() ||
      std::find(args.begin(), args.end(), "-h") != args.end()) {
    std::cout << help(cmd);
    return 0;
  }
  // Count every CPU byte from the start: installed before any tensor exists.
  MemoryMeter::get("cpu");
  try {
    return cmd.run(parse(cmd, args));
  } catch (const UsageError& e) {
    std::cerr << "memfine: " << e.what() << "\n\n" << help(cmd);
    return 2;
  } catch (const c10::Error& e) {  // LibTorch's own, without its stack of frames
    std::cerr << "memfine " << cmd.name << ": " << e.what_without_backtrace() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "memfine " << cmd.name << ": " << e.what() << "\n";
    return 1;
  }
}

}  // namespace memfine::cli
