#include "core/meter/profile.h"

#include <fstream>
#include <optional>
#include <stdexcept>

#ifdef MEMFINE_TORCH_CUDA
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/csrc/cuda/memory_snapshot.h>
#endif

namespace memfine {

#ifdef MEMFINE_TORCH_CUDA
bool step_profiler_available() { return true; }

void profile_step(const std::string& path, const std::function<void()>& step) {
  namespace prof = torch::autograd::profiler;
  using torch::profiler::impl::ActivityType;
  const torch::profiler::impl::ProfilerConfig config(torch::profiler::impl::ProfilerState::KINETO);
  const std::set<ActivityType> activities = {ActivityType::CPU, ActivityType::CUDA};
  prof::prepareProfiler(config, activities);
  prof::enableProfiler(config, activities);
  try {
    step();
  } catch (...) {
    prof::disableProfiler();
    throw;
  }
  std::unique_ptr<prof::ProfilerResult> result = prof::disableProfiler();
  if (!result) throw std::runtime_error("the profiler returned no trace");
  result->save(path);
}

bool memory_history_available() { return true; }

void memory_history_step(const std::string& path, const std::function<void()>& step) {
  // Every frame (this program has only C++ ones); a bounded history: one step's allocations fit.
  torch::cuda::_record_memory_history(std::optional<std::string>("all"), std::optional<std::string>("all"), "all",
                                      size_t(1) << 20);
  std::string pickled;
  try {
    step();
    pickled = torch::cuda::_memory_snapshot_pickled();
  } catch (...) {
    torch::cuda::_record_memory_history(std::optional<std::string>());
    throw;
  }
  torch::cuda::_record_memory_history(std::optional<std::string>());
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(pickled.data(), std::streamsize(pickled.size()));
  f.close();
  if (!f) throw std::runtime_error(path + ": the memory history could not be written");
}
#else
bool step_profiler_available() { return false; }
bool memory_history_available() { return false; }

void memory_history_step(const std::string&, const std::function<void()>&) {
  throw std::runtime_error("this build has no allocator history (it needs a CUDA LibTorch: scripts/gpu-build)");
}

void profile_step(const std::string&, const std::function<void()>&) {
  throw std::runtime_error("this build has no step profiler (it needs a CUDA LibTorch with Kineto: scripts/gpu-build)");
}
#endif

}  // namespace memfine
