#include "core/run/step_thread.h"

#include <ATen/Parallel.h>
#include <ATen/ThreadLocalState.h>

#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>

#ifdef MEMFINE_TORCH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace memfine {

struct StepThread::Impl {
  std::mutex mu;
  std::condition_variable cv;
  const std::function<void()>* work = nullptr;  // set: a job waits; done: it ran
  bool done = false, stop = false, ready = false;
  std::exception_ptr error;
  std::thread thread;

  // Returns once the thread has made its OpenMP team: a thread still making it when the program
  // ends (replaced after a last step that ran out of memory) raced LibTorch's static destructors
  // and corrupted the heap at exit.
  void start() {
    stop = false, ready = false;
    thread = std::thread([this] {
      // A fresh thread makes its OpenMP team at its first parallel region: now, not in a step.
      at::parallel_for(0, at::get_num_threads(), 1, [](int64_t, int64_t) {});
      std::unique_lock<std::mutex> lock(mu);
      ready = true;
      cv.notify_all();
      for (;;) {
        cv.wait(lock, [this] { return stop || (work && !done); });
        if (stop) return;
        lock.unlock();
        std::exception_ptr caught;
        try {
          (*work)();
        } catch (...) {
          caught = std::current_exception();
        }
        lock.lock();
        error = caught;
        done = true;
        cv.notify_all();
      }
    });
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [this] { return ready; });
  }
  void finish() {
    {
      std::lock_guard<std::mutex> lock(mu);
      stop = true;
    }
    cv.notify_all();
    if (thread.joinable()) thread.join();
  }
};

StepThread& StepThread::shared() {
  // Never destroyed: joining at exit would run its thread-locals' destructors after LibTorch's
  // statics may be gone.
  static StepThread* t = new StepThread;
  return *t;
}

StepThread::StepThread() : impl_(new Impl) { impl_->start(); }

StepThread::~StepThread() { impl_->finish(); }

void StepThread::run(const std::function<void()>& work) {
  // What the caller's thread has set that the step must see: LibTorch's thread-local state and,
  // on CUDA, the device (each real rank's own GPU).
  const at::ThreadLocalState state;
#ifdef MEMFINE_TORCH_CUDA
  const auto device = c10::cuda::current_device();
#endif
  const std::function<void()> job = [&] {
    at::ThreadLocalStateGuard guard(state);
#ifdef MEMFINE_TORCH_CUDA
    c10::cuda::set_device(device);
#endif
    work();
  };
  std::exception_ptr error;
  {
    std::unique_lock<std::mutex> lock(impl_->mu);
    impl_->work = &job;
    impl_->done = false;
    impl_->cv.notify_all();
    impl_->cv.wait(lock, [this] { return impl_->done; });
    impl_->work = nullptr;
    error = impl_->error;
    impl_->error = nullptr;
  }
  if (error) std::rethrow_exception(error);
}

void StepThread::replace() {
  impl_->finish();
  impl_->start();
}

}  // namespace memfine
