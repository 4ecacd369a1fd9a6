#include "core/run/threads.h"

#include <ATen/Parallel.h>
#include <dlfcn.h>

#include <algorithm>
#include <thread>

namespace memfine {

int64_t apply_threads(int64_t threads) {
  const int64_t n = threads > 0 ? threads : int64_t(std::max(1u, std::thread::hardware_concurrency()));
  at::set_num_threads(int(n));
  // OpenBLAS's pthreads build keeps its own pool (one thread per core) that LibTorch's setting does
  // not reach: without this, `threads: 1` still multiplies on every core, and ranks sharing a
  // machine oversubscribe it.
  using SetBlasThreads = void (*)(int);
  if (auto set_blas = reinterpret_cast<SetBlasThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads")))
    set_blas(int(n));
  return at::get_num_threads();
}

}  // namespace memfine
