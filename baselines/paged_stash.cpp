// Baseline: Paged Stash (Megatron-Core moe/paged_stash.py, PRs #2690 and #4247; flags
// --moe-expert-rank-capacity-factor, --moe-paged-stash). A rank's expert buffers are sized once
// from a per-rank capacity factor, so no step waits on the host for counts; after each expert's
// forward, what its backward needs goes into pages of a device pool (device_factor x a step's mean
// rows), spilling to host pages (host_factor x); if any rank's layer overflows its buffers or no
// page is left, an all-reduced flag has the step run again dropless without the stash (at most
// once). Everything else is stored, as no_recompute does.
//   Here: the stash is real (pages, host spill, the rerun and its flag across real ranks); the fixed
// buffers are not allocated (the experts' working tensors are the rows that arrived), only their
// capacity checked. The pool lives through the step's passes, so a step that reran holds it beside
// the plain computation.
#include <memory>

#include "core/strategy/executor.h"
#include "core/strategy/registry.h"
#include "core/strategy/stash.h"

namespace memfine {
namespace {

ParamsOf<StashSpec> params() {
  using S = StashSpec;
  return {bind(&S::rank_capacity,
               said(named(number_param("capacity_factor",
                                       "a rank's fixed buffers hold this x the mean rows a layer (tokens x topk); "
                                       "more reruns",
                                       1.5, 1e-3, 1e6)),
                    "capacity {v:g}")),
          bind(&S::page_rows, int_param("page_rows", "rows per page", 64, 1, int64_t(1) << 30)),
          bind(&S::device_factor,
               said(number_param("device_factor", "device pages for this x a step's mean rows", 1.10, 0, 1e6),
                    "device {v:g}")),
          bind(&S::host_factor,
               number_param("host_factor", "host pages for this x a step's mean rows, beyond the device's", 0, 0, 1e6))};
}

StrategyShape shape_of(const StashSpec& stash) {
  StrategyShape s;
  s.stash = stash;
  return s;
}

class PagedStash : public Strategy {
 public:
  PagedStash(const StrategySpec& spec, const StashSpec& stash) : Strategy(spec, shape_of(stash)) {}

  LayerOutput run_layer(const at::Tensor& x, const LayerInput& in) override {
    if (!stash_) {  // the model's sizes are known from the first layer on
      const ModelConfig& m = in.config->model;
      stash_ = std::make_unique<Stash>(shape_.stash, m.layers, m.tokens(), m.topk);
    }
    return run_shape(x, in, *this, shape_);
  }
  ExpertPath expert() const override { return stash_->expert(); }
  void cap_routing(MoeRouting&, const at::Tensor&) override { stash_->end_layer(); }
  bool finish_pass() override {
    if (!stash_) return false;
    stash_->end_layer();
    if (stash_->overflowed() && !rerun_) return true;  // the pool stays for the rerun
    stash_->release();
    return false;
  }
  void begin_rerun() override {
    rerun_ = true;
    if (stash_) stash_->set_on(false);
  }

 protected:
  void begin_own_step(int64_t) override {
    rerun_ = false;
    if (stash_) stash_->begin_step();
  }
  json own_step_counters() const override {
    json j = stash_ ? stash_->counters() : json::object();
    j["reruns"] = rerun_ ? 1 : 0;
    return j;
  }

 private:
  std::unique_ptr<Stash> stash_;
  bool rerun_ = false;
};

MEMFINE_REGISTER_STRATEGY(drawn(with_counters(
    coded("paged_stash",
          "Paged Stash (Megatron-Core): experts' saved tensors in pages of a pool sized from the mean rows, host "
          "spill; an overflowing rank reruns the step dropless without the stash",
          params(),
          [](const StrategySpec& s, const StashSpec& stash) {
            return std::unique_ptr<Strategy>(new PagedStash(s, stash));
          }),
    {{"reruns", "integer", "", "1 where the step ran again without the stash (an overflow), else 0", "measured train"},
     {"pages_used", "integer", "", "device pages the stash filled in the step's first pass", "measured train"},
     {"host_pages", "integer", "", "host pages it filled (spilled beyond the device's)", "measured train"},
     {"stashed_rows", "integer", "", "expert rows whose saved tensors went into pages", "measured train"},
     {"widest_layer_rows", "integer", "", "the most rows this rank's experts received in one layer",
      "measured train"},
     {"overflow", "string", "", "why the step reran (a layer beyond capacity, no page left); empty where it did not",
      "measured train"},
     {"first_pass_peak_bytes", "integer", "bytes", "a step that reran: its first pass's peak above the step's start",
      "measured train"},
     {"rerun_peak_bytes", "integer", "bytes", "a step that reran: the rerun's own peak above the step's start",
      "measured train"}}), "#393b79", ">"));

}  // namespace
}  // namespace memfine
