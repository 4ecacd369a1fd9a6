#include "core/util/host_sync.h"

#include <mutex>
#include <stdexcept>
#include <string>

namespace memfine {

namespace {
std::mutex g_mutex;
PinnedUploads* g_uploads = nullptr;  // set while a Scope lives
}  // namespace

std::atomic<int64_t>& noted_host_reads() {
  static std::atomic<int64_t> n{0};
  return n;
}

void note_host_read() { noted_host_reads().fetch_add(1, std::memory_order_relaxed); }

at::Tensor to_host(const at::Tensor& t) {
  note_host_read();
  return t.to(at::kCPU);
}


at::Tensor pinned_buffer(int64_t numel, at::ScalarType dtype) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_uploads) return at::empty({numel}, at::TensorOptions(dtype).pinned_memory(true));
  PinnedUploads& u = *g_uploads;
  if (!u.reuse_) {
    u.buffers_.push_back(at::empty({numel}, at::TensorOptions(dtype).pinned_memory(true)));
    return u.buffers_.back();
  }
  if (u.next_ >= u.buffers_.size() || u.buffers_[u.next_].numel() != numel ||
      u.buffers_[u.next_].scalar_type() != dtype)
    throw std::runtime_error("the captured pass uploads other data than its warmup did (upload " +
                             std::to_string(u.next_ + 1) + " of " + std::to_string(u.buffers_.size()) +
                             "): its routing changed between the two");
  return u.buffers_[u.next_++];
}

at::Tensor to_device(const at::Tensor& t, const at::Device& device) {
  if (t.device() == device) return t;
  at::Tensor pinned = pinned_buffer(t.numel(), t.scalar_type());
  pinned.copy_(t.reshape(-1));
  return pinned.view(t.sizes()).to(device, /*non_blocking=*/true);
}

PinnedUploads::Scope::Scope(PinnedUploads& uploads, bool reuse) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_uploads) throw std::logic_error("PinnedUploads: one scope at a time");
  uploads.reuse_ = reuse, uploads.next_ = 0;
  g_uploads = &uploads;
}

PinnedUploads::Scope::~Scope() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_uploads = nullptr;
}

}  // namespace memfine
