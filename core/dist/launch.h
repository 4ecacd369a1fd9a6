// `memfine launch --nproc N`: N local ranks of `memfine run` (or `memfine train`), meeting through
// a file only this user reads (one machine) or rank 0's store at the master address (several).
#pragma once
#include <memory>
#include <string>
#include <vector>

namespace memfine {

class Dist;

// Where a launch's ranks are: `nproc` on this machine, `nnodes` machines in all (this one is
// `node_rank`), rank 0 listening at master_addr:master_port (loopback and a free port for one node).
struct LaunchPlace {
  int nproc = 1, nnodes = 1, node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;  // 0: a free loopback port (one node only)
};

// Starts this node's ranks of `memfine COMMAND` (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
// MASTER_PORT) and reports the first that fails.
int launch_experiment(const std::string& self, const LaunchPlace& place, const std::string& command,
                      const std::vector<std::string>& args);

// What a rank does first: a rank of `memfine launch` dies with it (no orphan keeps writing after
// the launch is killed; throws if it is already gone), then joins the process group from the
// environment (null: one process). Collectives wait MEMFINE_COLLECTIVE_TIMEOUT seconds (60) for
// a silent rank.
std::unique_ptr<Dist> join_job(const std::string& device);

}  // namespace memfine
