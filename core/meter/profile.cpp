#include "core/meter/profile.h"

#include <stdexcept>

#ifdef MEMFINE_TORCH_CUDA
#include <torch/csrc/autograd/profiler_kineto.h>
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
#else
bool step_profiler_available() { return false; }

void profile_step(const std::string&, const std::function<void()>&) {
  throw std::runtime_error("this build has no step profiler (it needs a CUDA LibTorch with Kineto: scripts/gpu-build)");
}
#endif

}  // namespace memfine
