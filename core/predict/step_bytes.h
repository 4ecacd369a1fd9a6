// The implementation memory model's parts (core/predict/memory_model.h puts them together into a
// step's peak): the rows a MoE call moves per local expert, what its stages keep for backward and
// the peak of its backward (stored, on real ranks' all-to-all path, buffer-free experts), and what
// a layer keeps outside its MoE and offloads. Internal to core/predict/.
#pragma once
#include <cstdint>
#include <vector>

#include <torch/version.h>

#include "core/moe/shape.h"
#include "core/workload/ep_rank.h"

namespace memfine {

// Rows of one MoE call (a token range of a layer) per local expert.
struct MoeRows {
  std::vector<int64_t> own, peer;  // per local expert
  std::vector<int64_t> pad;        // per local expert: zero rows padding its input (capacity)
  int64_t remote = 0;              // own assignments sent to other ranks
  int64_t tokens = 0;
};

// A layer's peer rows ordered by the sender's token position, so that a token range (a chunk)
// finds its own without reading every row.
struct PeerIndex {
  std::vector<int64_t> pos, expert;
};
PeerIndex peer_index(const RankRouting& r);

// Under capacity capping (`cap` >= 0, whole layers only) each sending rank keeps at most `cap`
// assignments per expert, and `pad_rows` pads every expert's input. `peers`: the layer's index.
MoeRows moe_rows(const RankRouting& r, int64_t topk, int64_t tokens, int64_t begin, int64_t end, int64_t cap = -1,
                 int64_t pad_rows = 0, const PeerIndex* peers = nullptr);

// The routing indices of a range that its MoE's graph keeps (what moe_stored counts).
double saved_index_bytes(const MoeRows& m);
// Real ranks: the rows a range sends and receives.
double rows_sent(const MoeRows& m);
double rows_received(const MoeRows& m);

// Bytes the stages of one layer keep for backward, from the tensors autograd saves in this code.
struct Sizes {
  double E;  // bytes per element
  double T, h, g, gs, experts, heads_dim, b, H, s, k;
  bool attention;
  bool sdpa = false;            // attention by scaled_dot_product_attention's fused kernel: no scores kept
  bool act_recomputed = false;  // experts keep z = [a | b], not SiLU(a) and SiLU(a) * b
  bool buffer_free = false;     // experts keep z (and SiLU(a) * b with keep_act), no rows of width h
  bool keep_act = false;
  int64_t block_rows = 256;
  bool a2a = false;  // real ranks, ATen experts: rows move through the all-to-all (moe_stored_a2a)
  // skip_dead's replay (core/moe/weighted.cpp): the probabilities weigh the activation, fc2's output
  // and the combine's sum are placeholders.
  bool dead_replay = false;
  // Paged Stash (core/strategy/stash.h): each expert's saved rows, z and SiLU(a) * b are in the
  // pool's pages, not kept by autograd; its backward copies them back (h + 3g a row) one expert at
  // a time.
  bool stashed = false;
  // Dispatch and combine through the fused row kernels (core/moe/fused.h): combine keeps each
  // expert's output rows and their weights, with no weighted copy of them for an index_add to keep
  // (the remote rows it reads in place are priced as ATen's: moe_stored says why).
  bool fused = false;
  // The MoE runs as ranges of few operators (core/moe/ranged.h): see moe_stored_ranged.
  bool ranged = false;
  // There, the experts' weight gradients come out of LibTorch's native grouped GEMM in a buffer of
  // their own before they are added (a GPU in bf16 with LibTorch 2.8+, expert_wgrad: grouped);
  // elsewhere in place.
  bool wgrad_buffer = false;
  double expert_g() const {
    return buffer_free ? (keep_act ? 3 : 2) : act_recomputed ? 2 : 4;
  }  // stored widths of g per row
};

// What a MoE call keeps until backward (`whole`: the MoE's own probabilities; a chunk's are a slice
// of the chunked MoE's), and the peak of its backward on top of `stored` (everything alive when it
// starts): the shape's storage and path (plain, real ranks' all-to-all, buffer-free).
double moe_stored(const Sizes& z, const MoeRows& m, bool whole = true);
double moe_backward_peak(const Sizes& z, const MoeRows& m, double stored);

// The ranged MoE (core/moe/ranged.h). A range's buffer rows, every expert's (own, peers', padding).
double ranged_rows(const MoeRows& m);
// Its layout on the device: a source and a slot per buffer row, key, token and slot per remote
// assignment.
double ranged_index_bytes(const MoeRows& m);
// What a stored range keeps (its rows, z, the activation unless recomputed, the outputs; not its
// layout, which the layer keeps: ranged_index_bytes).
double ranged_kept(const Sizes& z, const MoeRows& m);
// A range's backward above what is alive without its tensors: its rows, z, activation and outputs
// (kept or made again), then the outputs' gradient, the activation's and z's, the rows'.
double ranged_backward_extra(const Sizes& z, const MoeRows& m);

// RMSNorm's mean of squares: LibTorch 1.13's mean over a dimension keeps its input (the squares,
// one [tokens, hidden] tensor) for backward; 2.x keeps only the sizes (MeanBackward1 in the
// generated autograd headers of 2.6 and 2.14; 2.0 as the cut is assumed, not checked).
constexpr double kNormKeptWithGrad = TORCH_VERSION_MAJOR < 2 ? 3 : 2;

// What a layer keeps outside the MoE, by stage. RMSNorm keeps 2 [tokens, hidden] tensors (its
// output included) when its input needs no gradient; when it does, a [tokens] one besides and,
// on LibTorch 1.13, the squares; only the first layer's input needs none.
struct Outside {
  double norm1 = 0, attention = 0, h1 = 0, norm2 = 0, router = 0, shared = 0, output = 0;
  double total() const { return norm1 + attention + h1 + norm2 + router + shared + output; }
};

Outside outside_moe(const Sizes& z, bool input_needs_grad);

// Activation offloading (core/strategy/offload.h): the storages autograd saves inside each chosen
// module of a layer, as this code saves them; each leaves the device when it is saved (at least
// `min_bytes`) and counts once, however many views of it are saved. `prev` is the part that the
// layer's input is: the layer below's output, which this model counts as that layer's.
struct OffloadedBytes {
  double own = 0, prev = 0;
  double total() const { return own + prev; }
};
OffloadedBytes offloaded_bytes(const Sizes& z, const StrategyShape& sl, const MoeRows& m, bool input_needs_grad);

}  // namespace memfine
