#include "core/strategy/copy_streams.h"

#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/version.h>

namespace memfine {

CopyStreams::Done CopyStreams::copy(const at::Tensor& dst, const at::Tensor& src, const at::Device& device,
                                    bool to_host, const c10::DataPtr& stream_side, const Done& after) {
  c10::impl::VirtualGuardImpl g(device.type());
  if (!out_) out_ = g.getStreamFromGlobalPool(device), back_ = g.getStreamFromGlobalPool(device);
  const c10::Stream stream = to_host ? *out_ : *back_;
  // After what the compute stream has queued: it made src, or last used dst's memory.
  c10::Event ready(device.type());
  ready.record(g.getStream(device));
  ready.block(stream);
  if (after) after->block(stream);
  auto start = std::make_shared<c10::Event>(device.type(), c10::EventFlag::BACKEND_DEFAULT);
  auto end = std::make_shared<c10::Event>(device.type(), c10::EventFlag::BACKEND_DEFAULT);
  {
    c10::StreamGuard on(stream);
    start->record(stream);
    dst.copy_(src, /*non_blocking=*/true);
    end->record(stream);
  }
  g.recordDataPtrOnStream(stream_side, stream);
  copies_.push_back({start, end, to_host});
  return end;
}

void CopyStreams::wait_for(const Done& done, const at::Device& device) {
  if (done) done->block(c10::impl::VirtualGuardImpl(device.type()).getStream(device));
}

std::optional<std::pair<double, double>> CopyStreams::milliseconds() const {
#if TORCH_VERSION_MAJOR >= 2
  if (copies_.empty()) return std::nullopt;
  double out = 0, back = 0;
  for (const auto& c : copies_) (c.to_host ? out : back) += c.start->elapsedTime(*c.end);
  return std::make_pair(out, back);
#else
  return std::nullopt;
#endif
}

}  // namespace memfine
