#include "core/util/host_sync.h"

namespace memfine {

std::atomic<int64_t>& noted_host_reads() {
  static std::atomic<int64_t> n{0};
  return n;
}

void note_host_read() { noted_host_reads().fetch_add(1, std::memory_order_relaxed); }

at::Tensor to_host(const at::Tensor& t) {
  note_host_read();
  return t.to(at::kCPU);
}

}  // namespace memfine
