#include "core/strategy/offload.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/saved_variable_hooks.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>

namespace memfine {
namespace {

thread_local HostPool* active_pool = nullptr;
thread_local int64_t active_min = 0;

// A host copy of one saved tensor, allocated outside ATen's (metered) CPU allocator.
class Offloaded : public torch::autograd::SavedVariableHooks {
 public:
  Offloaded(HostPool* pool, int64_t min_bytes) : pool_(pool), min_(min_bytes) {}
  void call_pack_hook(const at::Tensor& t) override {
    const int64_t bytes = int64_t(t.numel()) * int64_t(t.element_size());
    // Activations only: a leaf (a weight, the batch) stays where it is, as do small tensors.
    if (!t.defined() || t.is_leaf() || bytes < min_ || t.device().type() != at::kCPU) {
      kept_ = t;
      return;
    }
    void* p = std::malloc(size_t(bytes));
    if (!p) throw std::bad_alloc();
    const at::Tensor src = t.contiguous();
    std::memcpy(p, src.data_ptr(), size_t(bytes));
    HostPool* pool = pool_;
    host_ = at::from_blob(
        p, t.sizes(),
        [pool, bytes](void* q) {
          std::free(q);
          pool->current -= bytes;
        },
        t.options());
    bytes_ = bytes;
    pool_->current += bytes, pool_->to_host += bytes, ++pool_->tensors;
    if (pool_->current > pool_->peak) pool_->peak = pool_->current;
  }
  at::Tensor call_unpack_hook() override {
    if (!host_.defined()) return kept_;
    pool_->to_device += bytes_;
    return host_.clone();  // back on the device (the metered allocator)
  }

 private:
  HostPool* pool_;
  int64_t min_;
  int64_t bytes_ = 0;
  at::Tensor host_, kept_;
};

// The default engine, handing out Offloaded hooks inside a scope.
struct OffloadingEngine : torch::autograd::Engine {
  std::unique_ptr<torch::autograd::SavedVariableHooks> get_default_saved_variable_hooks() override {
    if (!active_pool) return nullptr;
    return std::make_unique<Offloaded>(active_pool, active_min);
  }
  static torch::autograd::Engine& get() {
    static OffloadingEngine engine;
    return engine;
  }
};

void install_engine() {
  static std::once_flag once;
  std::call_once(once, [] { torch::autograd::set_default_engine_stub(&OffloadingEngine::get); });
}

}  // namespace

OffloadScope::OffloadScope(HostPool& pool, int64_t min_bytes) : previous_pool_(active_pool), previous_min_(active_min) {
  install_engine();
  active_pool = &pool, active_min = min_bytes;
}

OffloadScope::~OffloadScope() { active_pool = previous_pool_, active_min = previous_min_; }

}  // namespace memfine
