// Offloading's copies on a device, on streams of their own, one each way (as Megatron's offloading
// keeps a D2H and an H2D stream), so that the compute stream waits for a copy only where it reads
// the tensor back. Each copy starts after what the compute stream has queued so far and is timed by
// a pair of events on its stream. Generic over the device (c10's stream and event interfaces), used
// on CUDA; a CPU's copies are plain memcpy (core/strategy/offload.cpp).
#pragma once
#include <ATen/ATen.h>
#include <c10/core/Event.h>
#include <c10/core/Stream.h>

#include <memory>
#include <optional>
#include <utility>
#include <vector>

namespace memfine {

class CopyStreams {
 public:
  using Done = std::shared_ptr<c10::Event>;  // null: nothing to wait for
  // dst.copy_(src) on the stream out (`to_host`) or back, once `after` (if any) is done; the
  // allocator keeps `stream_side`'s memory from reuse until the copy has run. Returns its event.
  Done copy(const at::Tensor& dst, const at::Tensor& src, const at::Device& device, bool to_host,
            const c10::DataPtr& stream_side, const Done& after = nullptr);
  // The compute stream waits for `done` before it reads what that copy wrote (null: nothing to do).
  static void wait_for(const Done& done, const at::Device& device);
  // The copies' measured milliseconds, out and back, once the device has run them (LibTorch 2.x:
  // 1.13's events have no elapsed time); nullopt where no copy ran.
  std::optional<std::pair<double, double>> milliseconds() const;

 private:
  struct Timed {
    Done start, end;
    bool to_host;
  };
  std::optional<c10::Stream> out_, back_;
  std::vector<Timed> copies_;
};

}  // namespace memfine
