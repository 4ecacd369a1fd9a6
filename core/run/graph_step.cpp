#include "core/run/graph_step.h"

#include <stdexcept>
#include <vector>

#include "core/util/host_sync.h"

#ifdef MEMFINE_TORCH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace memfine {

#ifdef MEMFINE_TORCH_CUDA
namespace {
int64_t reserved_bytes() {
  namespace cca = c10::cuda::CUDACachingAllocator;
  return cca::getDeviceStats(c10::cuda::current_device()).reserved_bytes[0].current;
}
}  // namespace

struct StepGraph::Impl {
  at::cuda::CUDAGraph graph;
  at::Tensor loss;
  PinnedUploads uploads;  // the pinned host memory the captured copies read
  int64_t pool = 0;
  bool captured = false;
};

StepGraph::StepGraph() : impl_(std::make_unique<Impl>()) {}
StepGraph::~StepGraph() = default;

void StepGraph::capture(const std::function<at::Tensor()>& pass) {
  if (impl_->captured) throw std::logic_error("StepGraph: captured already");
  const c10::cuda::CUDAStream main = c10::cuda::getCurrentCUDAStream();
  const c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool();
  at::cuda::CUDAEvent ready;
  ready.record(main);
  ready.block(side);
  {
    c10::cuda::CUDAStreamGuard on(side);
    {
      // The warmup: what the stream's first use makes (cuBLAS handles, workspaces) and the pinned
      // buffers of the uploads are made here, outside the capture.
      PinnedUploads::Scope record(impl_->uploads, /*reuse=*/false);
      pass();
      side.synchronize();
    }
    const int64_t before = reserved_bytes();
    PinnedUploads::Scope reuse(impl_->uploads, /*reuse=*/true);
    impl_->graph.capture_begin();
    try {
      impl_->loss = pass();
    } catch (...) {
      try {
        impl_->graph.capture_end();  // ends the stream's capture, whatever it recorded
      } catch (...) {
      }
      throw;
    }
    impl_->graph.capture_end();
    impl_->pool = reserved_bytes() - before;
  }
  at::cuda::CUDAEvent done;
  done.record(side);
  done.block(main);
  impl_->captured = true;
}

at::Tensor StepGraph::replay() {
  if (!impl_->captured) throw std::logic_error("StepGraph: nothing captured");
  impl_->graph.replay();
  return impl_->loss;
}

int64_t StepGraph::pool_bytes() const { return impl_->pool; }

#else

struct StepGraph::Impl {};
StepGraph::StepGraph() = default;
StepGraph::~StepGraph() = default;
void StepGraph::capture(const std::function<at::Tensor()>&) {
  throw std::runtime_error("CUDA graphs need a LibTorch with CUDA (scripts/gpu-build)");
}
at::Tensor StepGraph::replay() { throw std::logic_error("StepGraph: nothing captured"); }
int64_t StepGraph::pool_bytes() const { return 0; }

#endif

}  // namespace memfine
