// What any layer may throw to say a step does not fit, and the runner recognises: the text that
// marks an out of memory (ATen may rethrow ours wrapped in its own error) and the refusal of a
// planner (MACT) that finds nothing it may choose fits the budget. The meter's own budget error
// is core/meter/memory_meter.h's OutOfMemory.
#pragma once
#include <stdexcept>
#include <string>

namespace memfine {

inline constexpr const char* kOutOfMemoryMarker = "memfine: out of memory";

// Thrown before anything is allocated; `reason` says why in the budget's terms.
class PlannedOutOfMemory : public std::runtime_error {
 public:
  explicit PlannedOutOfMemory(const std::string& why)
      : std::runtime_error(std::string(kOutOfMemoryMarker) + ": " + why), reason(why) {}
  std::string reason;
};

}  // namespace memfine
