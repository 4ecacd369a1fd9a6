// Process set-up shared by the executables.
#pragma once

namespace memfine {

// LibTorch's OpenMP threads spin after each parallel region and starve OpenBLAS's own threads
// (steps then spend most of their time in the system). OpenMP reads its settings when it
// loads, before main, so this sets OMP_WAIT_POLICY=PASSIVE and starts the program again; a value
// the user set wins. Call first thing in main.
void use_passive_openmp_waits(char** argv);

}  // namespace memfine
