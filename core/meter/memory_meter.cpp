#include "core/meter/memory_meter.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>
#include <torch/version.h>

#include <malloc.h>
#include <algorithm>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <new>

#ifdef MEMFINE_TORCH_CUDA
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>
#endif

namespace memfine {

OutOfMemory::OutOfMemory(int64_t req, int64_t used, int64_t lim)
    : std::runtime_error(std::string(kOutOfMemoryMarker) + ": allocating " + std::to_string(req) + " bytes with " +
                         std::to_string(used) + " in use exceeds the budget of " + std::to_string(lim) + " bytes"),
      requested(req),
      in_use(used),
      limit(lim) {}

std::string budget_terms(int64_t budget, int64_t static_bytes) {
  return "the budget " + fmt_bytes(double(budget)) + " (static " + fmt_bytes(double(static_bytes)) + ", leaving " +
         fmt_bytes(double(budget - static_bytes)) + " for activations)";
}

std::string over_budget_after_step(int64_t step, int64_t budget, int64_t static_bytes, int64_t fullest_peak) {
  return "step " + std::to_string(step) + ": activations exceed " + budget_terms(budget, static_bytes) +
         ": the fullest rank reached " + fmt_bytes(double(fullest_peak)) +
         " (real ranks run a step whole and check it after)";
}

bool is_out_of_memory(const std::exception& e) {
  // Ours (the budget), the CUDA allocator's, and the host's: LibTorch's CPU allocator or `new`
  // refusing what the machine cannot hold (a step without a budget, verify's unbudgeted check).
  return dynamic_cast<const OutOfMemory*>(&e) != nullptr || dynamic_cast<const std::bad_alloc*>(&e) != nullptr ||
         std::strstr(e.what(), kOutOfMemoryMarker) != nullptr || std::strstr(e.what(), "CUDA out of memory") != nullptr ||
         std::strstr(e.what(), "can't allocate memory") != nullptr;
}

namespace {

// Each block carries its size in a header so the deleter can subtract it exactly; the header is
// a full alignment unit so tensor data stays aligned as ATen expects.
constexpr size_t kHeader = 64;

std::atomic<int64_t> g_current{0};
std::atomic<int64_t> g_peak{0};
std::atomic<int64_t> g_limit{-1};

// The context is the data pointer itself (ATen's raw_allocate requires that); the size sits in
// the header just before it.
void counting_delete(void* data) {
  if (!data) return;
  void* base = static_cast<char*>(data) - kHeader;
  int64_t n;
  std::memcpy(&n, base, sizeof(n));
  g_current.fetch_sub(n);
  c10::free_cpu(base);
}

struct CountingCpuAllocator final : c10::Allocator {
  c10::DataPtr do_allocate(size_t n) const {
    const int64_t bytes = static_cast<int64_t>(n);
    const int64_t now = g_current.fetch_add(bytes) + bytes;
    const int64_t lim = g_limit.load();
    if (lim >= 0 && now > lim) {
      g_current.fetch_sub(bytes);
      throw OutOfMemory(bytes, now - bytes, lim);
    }
    int64_t peak = g_peak.load();
    while (now > peak && !g_peak.compare_exchange_weak(peak, now)) {
    }
    void* base = c10::alloc_cpu(n + kHeader);
    std::memcpy(base, &bytes, sizeof(bytes));
    void* data = static_cast<char*>(base) + kHeader;
    return {data, data, &counting_delete, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &counting_delete; }
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
  c10::DataPtr allocate(size_t n) override { return do_allocate(n); }
  void copy_data(void* dst, const void* src, size_t n) const override { std::memcpy(dst, src, n); }
#else
  c10::DataPtr allocate(size_t n) const override { return do_allocate(n); }
#endif
};

class CpuMeter final : public MemoryMeter {
 public:
  CpuMeter() {
    // Keep freed blocks in the heap instead of returning them to the OS on every free (glibc maps
    // and unmaps large blocks each time): like a GPU caching allocator, so step times measure
    // compute rather than page faults. The meter counts bytes in use either way.
    mallopt(M_MMAP_THRESHOLD, 1 << 30);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    static CountingCpuAllocator alloc;
    // Priority above the default so later registrations cannot silently replace the meter.
    c10::SetCPUAllocator(&alloc, /*priority=*/100);
  }
  int64_t current_bytes() const override { return g_current.load(); }
  int64_t peak_bytes() const override { return g_peak.load(); }
  void reset_peak() override { g_peak.store(g_current.load()); }
  void raise_peak(int64_t bytes) override {
    int64_t seen = g_peak.load();
    while (bytes > seen && !g_peak.compare_exchange_weak(seen, bytes)) {
    }
  }
  void set_limit(int64_t limit) override { g_limit.store(limit); }
  int64_t limit() const override { return g_limit.load(); }
};

#ifdef MEMFINE_TORCH_CUDA
namespace cca = c10::cuda::CUDACachingAllocator;
// The caching allocator's own allocated-bytes statistics; the budget goes through the
// per-process memory fraction, so the allocator itself refuses past it.
class CudaMeter final : public MemoryMeter {
 public:
  // LibTorch 2.x sizes the allocator's per-device tables on CUDA's lazy initialisation, and
  // before it every statistics call throws "Invalid device argument" (1.13 initialised them
  // eagerly). The first CUDA tensor initialises CUDA, on every version.
  CudaMeter() { at::empty({1}, at::TensorOptions().device(at::kCUDA).dtype(at::kByte)); }
  int64_t current_bytes() const override { return stat().allocated_bytes[0].current; }
  int64_t peak_bytes() const override { return std::max<int64_t>(stat().allocated_bytes[0].peak, floor_); }
  void reset_peak() override { cca::resetPeakStats(c10::cuda::current_device()), floor_ = 0; }
  // The allocator's statistics cannot be raised: the meter keeps the floor beside them.
  void raise_peak(int64_t bytes) override { floor_ = std::max(floor_, bytes); }
  void set_limit(int64_t limit) override {
    limit_ = limit;
    const int dev = c10::cuda::current_device();
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    const double frac = limit < 0 ? 1.0 : std::min(1.0, double(limit) / double(total_b));
    cca::setMemoryFraction(frac, dev);
  }
  int64_t limit() const override { return limit_; }

 private:
  static cca::DeviceStats stat() { return cca::getDeviceStats(c10::cuda::current_device()); }
  int64_t limit_ = -1;
  int64_t floor_ = 0;
};
#endif

}  // namespace

MemoryMeter& MemoryMeter::get(const std::string& device) {
  if (device == "cpu") {
    static CpuMeter cpu;
    return cpu;
  }
#ifdef MEMFINE_TORCH_CUDA
  if (device == "cuda") {
    static CudaMeter cuda;
    return cuda;
  }
#endif
  throw std::invalid_argument("memfine: no memory meter for device '" + device +
                              "' in this build (is LibTorch built with CUDA?)");
}

}  // namespace memfine
