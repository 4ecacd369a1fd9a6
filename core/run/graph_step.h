// `graphs: step`: a strategy's forward and backward captured once as a CUDA graph and replayed, so
// that a timed step costs the host one launch for the whole of it, not an operator at a time, as
// Megatron-Core's full-iteration graphs and torchtitan's whole-step capture run MoE training. It is
// possible here because nothing in a step waits for the device: routing is decided on the host and
// its indices reach the device from pinned buffers (core/util/host_sync.h) the graph keeps.
// The optimizer's update stays eager (its bias corrections change every step), for every strategy
// alike. On a LibTorch without CUDA capture throws.
#pragma once
#include <ATen/ATen.h>

#include <functional>
#include <memory>
#include <string>

namespace memfine {

class StepGraph {
 public:
  StepGraph();
  ~StepGraph();
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;

  // Runs `pass` (gradients zeroed, forward, backward: it returns the loss) once on a stream of its
  // own, as a warmup that makes the stream's library handles and workspaces, then captures it. The
  // capture runs nothing; replay() does.
  void capture(const std::function<at::Tensor()>& pass);
  // One more step of what was captured; the loss it computed (a device scalar the graph owns).
  at::Tensor replay();
  // What the graph's private memory pool holds: the step's activations, kept between replays.
  int64_t pool_bytes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace memfine
