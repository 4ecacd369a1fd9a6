// `memfine launch FILE.yaml --nproc N`: run or train a file as real expert-parallel ranks
// (core/dist/launch.h), one rank per expert-parallel rank.
#include <algorithm>
#include <iostream>
#include <thread>

#include "core/cli/commands.h"
#include "core/cli/run_flags.h"
#include "core/dist/launch.h"
#include "core/run/job.h"

namespace memfine::cli {

namespace {

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

}  // namespace

Command launch_command() {
  return {"launch",
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
          launch};
}

}  // namespace memfine::cli
