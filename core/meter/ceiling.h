// The machine's dense-GEMM ceiling, the denominator of every record's `ceiling_fraction`: the best
// rate of a square matmul over a few sizes (float32 on the CPU, bfloat16 on a GPU) at the thread
// count in effect, measured on the machine that runs and cached per machine, never read from
// another one's results.
#pragma once
#include <string>

namespace memfine {

// FLOP/s. `machine` names what the rate depends on (CPU model or GPU name, threads, BLAS); the
// first call for a machine measures (about a second) and caches it in
// $XDG_CACHE_HOME/memfine/ceilings.json (else ~/.cache/..., else /tmp/...); 0 when it cannot.
double matmul_ceiling_flops(const std::string& device, const std::string& machine);

}  // namespace memfine
