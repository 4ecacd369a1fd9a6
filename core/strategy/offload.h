// Activation offloading (Megatron-Core's fine-grained activation offloading): inside a layer's
// chosen modules (OffloadSpec, core/moe/shape.h), every tensor autograd saves leaves device memory
// for a host pool when it is saved; backward brings a layer's whole group back when it reaches
// the layer `prefetch` layers above it, and the copies go when autograd lets them go. No module is
// rewritten: LibTorch's saved-variable hooks do it, through an autograd engine that hands them out
// (how the Python frontend installs its hooks; LibTorch's SavedTensorDefaultHooks take Python
// objects only, in 1.13 and 2.x). A tensor saved twice (q, k and v's projections save one input)
// is copied once.
//   On a CPU, host and device are one memory: the pool's copies are allocated outside the
// counting allocator, so the device meter no longer sees them and the pool keeps its own count
// (the host meter). The copies' times are modelled from the configured bandwidths, against the
// measured compute between the events that issue and need them (the time the emulation itself
// spends copying is measured and taken out): every such time is named *_modelled.
//   Encoding (OffloadSpec::stored_as, core/strategy/codec.h) keeps the same tensors on the device as
// codes of a narrower format instead, decoded when their layer's backward begins: the same hooks,
// the same groups; the codes are ATen's (the meter counts them) and nothing goes to the host.
#pragma once
#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/moe/shape.h"
#include "core/util/field_spec.h"

namespace memfine {

// Whether the process's autograd engine is the one that hands out offloading's hooks (installed
// when the program starts, before any backward pass: offload.cpp says why).
bool offloading_engine_is_default();

// One step's offloading, for one strategy.
class Offloader {
 public:
  struct Impl;  // the step's groups and counts (offload.cpp)
  explicit Offloader(OffloadSpec spec) : spec_(spec) {}

  // Forgets the last step's groups and counts.
  void begin_step();
  // What this step moved, held and would have waited for (bytes, counts, milliseconds): the
  // fields of counter_fields().
  nlohmann::json counters() const;
  // Those counters declared, for a strategy that offloads to declare with its own.
  static std::vector<FieldSpec> counter_fields();
  // An encoding strategy's counters instead (OffloadSpec::encodes).
  static std::vector<FieldSpec> encoding_counter_fields();

  // Captures what layer `layer`'s forward saves in the chosen modules while it lives.
  class LayerScope {
   public:
    LayerScope(Offloader& o, int64_t layer);
    ~LayerScope();
    LayerScope(const LayerScope&) = delete;
    LayerScope& operator=(const LayerScope&) = delete;

   private:
    std::shared_ptr<Impl> previous_;
    int64_t previous_group_;
  };
  // `hidden` unchanged; when its gradient arrives (layer `layer`'s backward begins) the groups of
  // this layer and the `prefetch` below it come back.
  at::Tensor mark_backward(const at::Tensor& hidden, int64_t layer);

 private:
  OffloadSpec spec_;
  std::shared_ptr<Impl> impl_;
};

}  // namespace memfine
