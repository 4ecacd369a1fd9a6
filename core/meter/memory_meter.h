// One memory meter for the suite: counts every byte the device allocator hands out, keeps the
// peak, and enforces a budget for real, so an out-of-memory point is observed, not assumed.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>

#include "core/util/format.h"
#include "core/util/out_of_memory.h"

namespace memfine {

// Thrown when an allocation would exceed the budget. Callers catch it and record status "oom".
class OutOfMemory : public std::runtime_error {
 public:
  OutOfMemory(int64_t requested, int64_t in_use, int64_t limit);
  int64_t requested, in_use, limit;
};

// Ours (planned or met, wrapped by ATen or not), the CUDA allocator's, or the host's.
bool is_out_of_memory(const std::exception& e);

// A budget in a record's terms: "the budget B (static S, leaving R for activations)".
std::string budget_terms(int64_t budget, int64_t static_bytes);
// Real ranks run a step whole and compare its peak with the budget after it: a record's error.
std::string over_budget_after_step(int64_t step, int64_t budget, int64_t static_bytes, int64_t fullest_peak);

class MemoryMeter {
 public:
  // The meter of a device ("cpu" or "cuda"); the CPU meter installs its counting allocator.
  static MemoryMeter& get(const std::string& device);
  virtual ~MemoryMeter() = default;
  virtual int64_t current_bytes() const = 0;
  virtual int64_t peak_bytes() const = 0;
  virtual void reset_peak() = 0;  // peak := current
  // peak := max(peak, bytes): a step measured in parts (a rerun) keeps the largest part's peak.
  virtual void raise_peak(int64_t bytes) = 0;
  // Allocations that would take current bytes above `limit` throw OutOfMemory; -1 disables.
  virtual void set_limit(int64_t limit) = 0;
  virtual int64_t limit() const = 0;
};

// Sets a limit for the lifetime of the guard and restores the previous one afterwards.
class MemoryLimitGuard {
 public:
  MemoryLimitGuard(MemoryMeter& m, int64_t limit) : m_(m), prev_(m.limit()) { m_.set_limit(limit); }
  ~MemoryLimitGuard() { m_.set_limit(prev_); }

 private:
  MemoryMeter& m_;
  int64_t prev_;
};

}  // namespace memfine
