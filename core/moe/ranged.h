// A layer's MoE in token ranges (one range: the layer's; several: MemFine's chunks, ChunkedEP's),
// each range a few operators whatever the experts' count: dispatch, the experts' two grouped GEMMs
// and their activation, combine and the peers' loss term, one operator each (core/moe/range_ops.h),
// as Megatron-Core's TEGroupedMLP with fused permutation runs them. The layer's routing is laid out
// once on the host (what each range's buffer rows are, expert after expert) and reaches the device
// in one copy, so no range waits for the device or reads from it. One autograd node runs the
// layer's ranges and their hand-written backward, which adds the weights' gradients into the
// experts' .grad as the grouped GEMMs make them.
//
// It runs where a MoE is this suite's plain one on one process with grouped GEMMs (`expert_gemm:
// grouped`, whatever `kernels` says of the stages): SwiGLU experts, stored or with their activation
// recomputed (moe_act). Buffer-free experts, Megatron's weighted arrangement, a stash, offloading
// the experts' modules and real ranks keep the stages of core/moe/stages.h, one GEMM per expert.
#pragma once
#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "core/moe/stages.h"

namespace memfine {

// One layer's routing laid out for its ranges. Buffer rows run range after range, and within a
// range expert after expert: the expert's own rows (token order), its peers' rows (table order),
// then zero padding (capacity).
struct RangeLayout {
  std::vector<int64_t> bounds;        // token ranges [bounds[c], bounds[c + 1])
  std::vector<int64_t> row_begin;     // each range's first buffer row; one more for the end
  std::vector<int64_t> remote_begin;  // each range's first remote assignment; one more for the end
  std::vector<std::vector<int64_t>> sizes;  // per range, rows per local expert
  // On the data's device (views of one upload): per buffer row, its source (token >= 0, peer table
  // row <= -2, zero -1) and its probability's flat slot (-1 none); per remote assignment, the row
  // of the outputs that came back, its token and slot.
  at::Tensor src, slot, remote_key, remote_token, remote_slot;
  std::vector<at::Tensor> offs;  // per range, int32 group ends where the native grouped GEMM runs
  int64_t rows(size_t c) const { return row_begin[c + 1] - row_begin[c]; }
  int64_t remote(size_t c) const { return remote_begin[c + 1] - remote_begin[c]; }
  int64_t index_bytes() const;  // what the device holds of it
};

RangeLayout range_layout(const MoeRouting& mr, const std::vector<int64_t>& bounds, const at::Tensor& like);

// Whether this MoE runs as ranges.
bool ranged_moe(const MoeRouting& mr);

// What the ranges keep for backward: the experts' rows, z = [a | b], the activation and their
// outputs; the same but the activation (recomputed from z: moe_act); or nothing, each range run
// again in its backward (MemFine's FCDA: the peak is one range's).
enum class RangeKeep { Stored, ActRecomputed, Recomputed };

// The layer's MoE over `chunks` equal token ranges (core/strategy/memfine/chunked_moe.h's split),
// as one autograd node. Recomputed ranges are replayed first to last, or (`last_to_first`,
// ChunkedEP's) last to first with the next earlier range's rows gathered before this range's
// experts run and held until its turn. `values_dead`: the enclosing layer is being recomputed for
// its backward, whose Recomputed ranges run again anyway: their output is not computed.
Combined ranged_moe_layer(const at::Tensor& x_norm, const at::Tensor& probs, const MoeRouting& mr,
                          const LayerWeights& w, int64_t chunks, RangeKeep keep, bool values_dead = false,
                          bool last_to_first = false);

}  // namespace memfine
