// Activation offloading's capture: inside an OffloadScope, every tensor autograd saves (at least
// `min_bytes`) leaves device memory for a host pool when it is saved and comes back when backward
// unpacks it. No module is rewritten: LibTorch's own saved-variable hooks do it, through an
// autograd engine that hands them out (the engine is how the Python frontend installs its hooks;
// LibTorch's SavedTensorDefaultHooks take Python objects only, in 1.13 and 2.x).
//   On a CPU, host and device are one memory: the pool's tensors are allocated outside the counting
// allocator, so the device meter no longer sees them and the pool keeps its own count (the host
// meter); the copies' times are modelled by the caller from what the pool moved.
#pragma once
#include <cstdint>

namespace memfine {

// What one scope's offloading moved and held, in bytes.
struct HostPool {
  int64_t current = 0, peak = 0;           // held on the host
  int64_t to_host = 0, to_device = 0;      // moved each way
  int64_t tensors = 0;                     // tensors offloaded
};

// Offloads what autograd saves on this thread while it lives; the tensors come back whenever
// backward needs them (the scope may be gone by then; the pool must outlive backward).
class OffloadScope {
 public:
  OffloadScope(HostPool& pool, int64_t min_bytes = 0);
  ~OffloadScope();
  OffloadScope(const OffloadScope&) = delete;
  OffloadScope& operator=(const OffloadScope&) = delete;

 private:
  HostPool* previous_pool_;
  int64_t previous_min_;
};

}  // namespace memfine
