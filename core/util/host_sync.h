// The host's traffic with the device inside a step. Reads of device values on the host: a read the
// dispatcher names (`item`) is counted by the host work meter (core/meter/host_work.h); a copy to
// the host is not distinguishable there from any other copy, so code that brings a device tensor
// to the host calls to_host, which notes the read, on the CPU as well (the same call that blocks on
// a GPU). Uploads of what the host decided (routing) go through to_device or pinned_buffer.
#pragma once
#include <ATen/ATen.h>

#include <atomic>
#include <cstdint>
#include <vector>

namespace memfine {

// Reads noted so far by to_host, in this process (the meter takes differences).
std::atomic<int64_t>& noted_host_reads();

// `t` on the host: a blocking copy where it lives on a device, noted as one read.
at::Tensor to_host(const at::Tensor& t);
// A read made another way (a collective's result copied back to the host).
void note_host_read();

// Host data (routing decided on the host) on `device` without waiting for it: from pinned memory
// and non-blocking, so the host does not wait for the device's queue to drain first (a pageable
// upload does). `t` itself where it is on that device already.
at::Tensor to_device(const at::Tensor& t, const at::Device& device);
// Pinned host memory for an upload of `numel` values. While a step is captured as a CUDA graph
// (core/run/graph_step.h) the buffers its warmup pass made are handed back in the same order
// instead: nothing is pinned inside a capture (the caching host allocator queries events there,
// which a capture forbids), and the buffers live as long as the graph that reads them.
at::Tensor pinned_buffer(int64_t numel, at::ScalarType dtype);

// The pinned buffers of one captured step. While a Scope lives (one at a time, in this process:
// a recomputation in backward uploads from autograd's thread), pinned_buffer keeps what it makes
// (`reuse` false: the warmup) or hands back what was kept, in order (`reuse` true: the capture),
// and throws where the capture asks for other sizes than its warmup did.
class PinnedUploads {
 public:
  class Scope {
   public:
    Scope(PinnedUploads& uploads, bool reuse);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
  };
 private:
  friend at::Tensor pinned_buffer(int64_t, at::ScalarType);
  std::vector<at::Tensor> buffers_;
  size_t next_ = 0;
  bool reuse_ = false;
};

}  // namespace memfine
