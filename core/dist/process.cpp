#include "core/dist/process.h"

#include <unistd.h>

#include <cstdlib>

namespace memfine {

void use_passive_openmp_waits(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY")) return;
  setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
  execv("/proc/self/exe", argv);  // returns only on failure: then go on as we are
}

}  // namespace memfine
