// `memfine launch --nproc N`: N local ranks of `memfine run` (or `memfine train`) on loopback.
#pragma once
#include <memory>
#include <string>
#include <vector>

namespace memfine {

class Dist;

// Starts N local ranks of `memfine COMMAND` (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT on
// loopback) and reports the first that fails.
int launch_experiment(const std::string& self, int nproc, const std::string& command,
                      const std::vector<std::string>& args);

// What a rank does first: a rank of `memfine launch` dies with it (no orphan keeps writing after
// the launch is killed; throws if it is already gone), then joins the process group from the
// environment (null: one process). Collectives wait MEMFINE_COLLECTIVE_TIMEOUT seconds (60) for
// a silent rank.
std::unique_ptr<Dist> join_job(const std::string& device);

}  // namespace memfine
