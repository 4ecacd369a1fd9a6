// A thread that runs measured steps, replaced after a step that failed. LibTorch's autograd keeps
// the CPU work of a backward in a ready queue owned by the calling thread (a thread_local), and a
// backward that throws (out of memory) leaves its pending tasks there, holding their gradient
// buffers, until a later backward on that thread pops them: inside the next strategy's measured
// step, which then reads low by what they held. Ending the thread frees its queue, so a step
// measured after a failure is measured as one measured alone, on every LibTorch version.
#pragma once
#include <functional>
#include <memory>

namespace memfine {

class StepThread {
 public:
  // The process's: one step runs at a time, and its OpenMP team is made once, not in a timed step.
  static StepThread& shared();
  StepThread();
  ~StepThread();
  StepThread(const StepThread&) = delete;
  StepThread& operator=(const StepThread&) = delete;
  // Runs `work` on the thread, with the caller's LibTorch thread-local state (grad mode and the
  // like) and CUDA device, and waits for it; rethrows what it threw.
  void run(const std::function<void()>& work);
  // Ends the thread, and with it everything its thread-locals held, and starts a fresh one.
  void replace();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace memfine
