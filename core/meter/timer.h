// One timer for the suite: wall-clock milliseconds (core/util/stats.h summarises repeated steps).
// On a GPU the work is queued, so a timer for a device waits for the device when it starts and
// when it is read: a step's time is its kernels', not the time taken to queue them.
#pragma once
#include <chrono>
#include <string>
#include <vector>

namespace memfine {

// Waits until the device ("cpu": nothing to wait for, "cuda": the current GPU) has finished.
void synchronize_device(const std::string& device);

class Timer {
 public:
  explicit Timer(std::string device = "cpu") : device_(std::move(device)) {
    synchronize_device(device_);
    t0_ = std::chrono::steady_clock::now();
  }
  double elapsed_ms() const {
    synchronize_device(device_);
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0_).count();
  }

 private:
  std::string device_;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace memfine
