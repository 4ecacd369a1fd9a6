// What the host does in a step: the operators it dispatches and the reads of device values it
// waits for. On a GPU every operator costs host time (its dispatch, and the kernel launches under
// it) whether or not the device is busy, and every read stalls the host until the device drains its
// queue: a step that is many small operators, or that reads back often, is bound by the host.
// Counted by a callback on LibTorch's dispatcher, not estimated: the same count on every device.
#pragma once
#include <ATen/record_function.h>

#include <cstdint>

namespace memfine {

struct HostWork {
  // Operators dispatched at the top level: those no other operator called (autograd's backward
  // included, each derivative's operators; not the operators they call inside).
  int64_t ops = 0;
  // Reads of device values on the host: `item` (`_local_scalar_dense`) outside another such read,
  // and the copies to the host the code asks for (core/util/host_sync.h), each one.
  int64_t host_syncs = 0;
};

// Counts while it lives, on every thread of the process (backward may run on the engine's own).
// One at a time.
class HostWorkCounter {
 public:
  HostWorkCounter();
  ~HostWorkCounter();
  HostWorkCounter(const HostWorkCounter&) = delete;
  HostWorkCounter& operator=(const HostWorkCounter&) = delete;
  HostWork counted() const;

 private:
  at::CallbackHandle handle_ = 0;
  int64_t noted_at_start_ = 0;
};

}  // namespace memfine
