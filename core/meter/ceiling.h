// The machine's dense-GEMM ceiling, the denominator of every record's `ceiling_fraction`: the best
// rate of a square matmul over a few sizes (float32 on the CPU, bfloat16 on a GPU) at the thread
// count in effect, measured in the process that runs the steps (never kept between processes: VMs
// of one name differ between sessions, and a ceiling measured while the machine was busy made
// fractions above 1).
#pragma once
#include <string>

namespace memfine {

// FLOP/s. `machine` names what the rate depends on (CPU model or GPU name, threads, BLAS); the
// first call for a machine in a process measures (under a second); 0 when it cannot.
double matmul_ceiling_flops(const std::string& device, const std::string& machine);

}  // namespace memfine
