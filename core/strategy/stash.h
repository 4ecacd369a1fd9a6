// Paged Stash's pages at run time (core/moe/shape.h: StashSpec, PageBook): each routed expert runs
// SwiGLU and, instead of leaving autograd to keep its input rows, z = [a | b] and SiLU(a) * b, copies
// them into pages of a device pool (then a host pool) that lives from the step's first expert to
// the end of its last pass; backward copies them back and computes the expert's gradients from them.
// A layer whose rows exceed the fixed buffers' capacity, or rows that find no page, mark the pass
// overflowed (their tensors are kept as autograd would keep them, so the pass still completes).
#pragma once
#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/moe/shape.h"
#include "core/moe/stages.h"

namespace memfine {

class Stash {
 public:
  Stash(StashSpec spec, int64_t layers, int64_t tokens, int64_t topk);
  // A new step: every page free, no overflow, the pools let go.
  void begin_step();
  // The rows this rank's experts received in the layer that just ended are checked against the
  // fixed buffers; called as each layer's MoE begins and after the pass.
  void end_layer();
  // The expert that stashes (Strategy::expert); `on`: false runs plain SwiGLU (the rerun's).
  ExpertPath expert();
  void set_on(bool on) { on_ = on; }
  bool overflowed() const { return !why_.empty(); }
  // Lets go of the pools (after the step's last pass).
  void release();
  nlohmann::json counters() const;

  struct Slot {
    PageBook::Where where = PageBook::Where::Nowhere;
    int64_t first_row = 0, rows = 0, h = 0, g = 0;  // widths: x h, z 2g, act g
    at::Tensor x, z, act;  // kept as they are where no page was found
  };
  int64_t put(const at::Tensor& x, const at::Tensor& z, const at::Tensor& act);
  // The slot's tensors, copied back from its pages (contiguous, on the rows' device).
  Slot take(int64_t slot);

 private:
  StashSpec spec_;
  int64_t layers_, tokens_, topk_;
  bool on_ = true;
  std::unique_ptr<PageBook> book_;
  at::Tensor device_pool_, host_pool_;  // [pages x page_rows, h + 3g]
  at::TensorOptions options_;           // the rows' (device and type)
  std::vector<Slot> slots_;
  int64_t layer_rows_ = 0, layer_ = 0, widest_layer_rows_ = 0, stashed_rows_ = 0;
  std::string why_;  // the first overflow ("" none)
};

}  // namespace memfine
