// `memfine launch --nproc N`: N local ranks of `memfine run` on loopback.
#pragma once
#include <string>
#include <vector>

namespace memfine {

// Starts N local ranks of `memfine run` (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT on loopback)
// and reports the first that fails.
int launch_experiment(const std::string& self, int nproc, const std::vector<std::string>& run_args);

}  // namespace memfine
