// The MoE stages, named as in Megatron-Core: route (model.h), dispatch, experts, combine.
// Strategies change how these run (stored, recomputed, chunked, capped), never their math.
// Every call handles the token range [begin, end) of the rank's own tokens plus the peer rows
// whose sender position falls in that range: a chunk in MemFine's sense (sender-side split).
#pragma once
#include <ATen/ATen.h>

#include <functional>
#include <memory>
#include <vector>

#include "core/model/model.h"
#include "core/workload/ep_rank.h"

namespace memfine {

class Dist;

// One expert's computation on its rows (SwiGLU by default). A strategy that changes what an
// expert stores or recomputes supplies its own (Strategy::expert); every path that runs experts
// (one process, real ranks through all-to-all, ATen or fused rows) calls it through run_expert.
using ExpertFn = std::function<at::Tensor(const at::Tensor& rows, const at::Tensor& w_in, const at::Tensor& w_out)>;

// How the experts keep what their backward needs: a strategy's choice (Strategy::expert), the
// same on one process and on real ranks.
struct ExpertPath {
  ExpertPath() = default;
  explicit ExpertPath(ExpertFn f) : fn(std::move(f)) {}
  ExpertFn fn;  // the expert on its gathered rows; empty: SwiGLU with what autograd saves
  // MoEBlaze-style (core/moe/buffer_free.h): dispatch builds indices only, each expert reads its
  // rows through their index, block by block, and adds its weighted output straight into the
  // tokens' rows, keeping only its first GEMM's output z; `fn` is not used.
  bool buffer_free = false;
  bool keep_act = false;     // buffer_free: keep SiLU(a) * b as well instead of recomputing it
  bool act_recomputed = false;  // `fn` is Megatron's selective recompute of SiLU(a) * b (moe_act)
  int64_t block_rows = 256;  // buffer_free: rows per block (the tile) of an expert's work
};

// What one layer's MoE routes; capacity capping fills the keep masks and the padding.
struct MoeRouting {
  const Dist* dist = nullptr;  // set: real ranks exchange rows through all-to-all (core/moe/alltoall.cpp)
  const RankRouting* rank = nullptr;
  const EmulatedRank* tables = nullptr;
  at::Tensor expert_ids;  // [tokens, topk] this layer's own assignments
  at::Tensor own_keep;    // [tokens, topk] bool; undefined = keep all
  at::Tensor peer_keep;   // [P] bool; undefined = keep all
  int64_t pad_rows = 0;   // pad each expert's input to this many rows; 0 = no padding
  bool fused = false;     // dispatch and combine through the fused row ops (core/moe/fused.h)
  // The local experts as one grouped GEMM per projection (`expert_gemm: grouped`): the MoE runs as
  // ranges (core/moe/ranged.h) where ranged_moe says it can; else one GEMM per expert.
  bool grouped = false;
  // Grouped and fused, it may run as ranges of few operators (core/moe/ranged.h); false where the
  // strategy reads the experts' modules' saved tensors (offloading them).
  bool ranged = true;
  double loss_norm = 1;   // the peers' loss terms are divided by this (same scale as the main loss)
  ExpertPath expert;      // default: SwiGLU, everything stored
  // Megatron-Core's arrangement (TE's weighted SwiGLU, core/moe/weighted.h): each own row's
  // probability weighs its expert's activation and combine adds the rows unweighted; a replay for
  // backward then skips the expert's second GEMM and the combine, whose outputs backward never reads
  // (Megatron-LM PR #7416, --moe-skip-dead-recompute).
  bool weighted_act = false;
  bool outputs_dead = false;  // weighted_act in a replay for backward: fc2 and combine skipped
};

at::Tensor run_expert(const MoeRouting& mr, const at::Tensor& rows, const at::Tensor& w_in, const at::Tensor& w_out);

struct Dispatched {
  int64_t begin = 0, end = 0;
  std::vector<at::Tensor> inputs;  // per local expert: own rows, then peer rows, then padding
  std::vector<int64_t> own_rows, peer_rows;
  std::vector<at::Tensor> own_token;                 // per expert: token index within [begin, end)
  std::vector<at::Tensor> own_slot;                  // per expert: flat (token * topk + j) index into the probs
  std::vector<at::Tensor> peer_key;                  // per expert: rows of the peer tables
  at::Tensor remote_token, remote_slot, remote_key;  // own assignments to other ranks' experts
};

// dispatch's routing alone: which rows each local expert takes and where its outputs go (no rows
// are copied; `inputs` stays empty).
Dispatched dispatch_indices(const MoeRouting& mr, int64_t begin, int64_t end, const at::Device& device);
// The same for consecutive ranges [bounds[c], bounds[c + 1]) (a layer's chunks) at once: one pass
// over the routing on the host and one upload to the device, so that a loop over the chunks
// neither sorts again per chunk nor waits for the device between them (a blocking upload to a
// GPU waits for every kernel queued before it). The indices are views of that one upload.
std::vector<Dispatched> dispatch_indices(const MoeRouting& mr, const std::vector<int64_t>& bounds,
                                         const at::Device& device);
// dispatch: permute the range's tokens by local expert and receive the peers' rows.
Dispatched dispatch(const at::Tensor& x_range, const MoeRouting& mr, int64_t begin, int64_t end);
// The same with the range's routing already computed (dispatch_indices).
Dispatched dispatch(const at::Tensor& x_range, const MoeRouting& mr, Dispatched routed);
// experts: each local expert's SwiGLU on its rows.
std::vector<at::Tensor> experts(const Dispatched& d, const LayerWeights& w, const MoeRouting& mr);
// combine: weight own rows by router probability and un-permute into [end - begin, hidden]; the
// outputs computed for peers go back to them (their loss term, see PeerSink in stages.cpp).
struct Combined {
  at::Tensor y;          // [end - begin, hidden]
  at::Tensor peer_loss;  // scalar
};
Combined combine(const std::vector<at::Tensor>& outputs, const Dispatched& d, const at::Tensor& probs_range,
                 const MoeRouting& mr);

// The emulated peers' loss term for the rows this rank computed for them (their gradients come
// back seeded); `value` false: its value is not computed (a replay for backward).
at::Tensor peer_sink(const at::Tensor& out, const at::Tensor& keys, const at::Tensor* grads, double norm,
                     bool value = true);

// Megatron's arrangement (MoeRouting::weighted_act): experts whose activation the own rows'
// probabilities weigh, and the combine that adds them as they are (core/moe/weighted.cpp).
std::vector<at::Tensor> experts_weighted(const Dispatched& d, const LayerWeights& w, const MoeRouting& mr,
                                         const at::Tensor& probs_range);
Combined combine_unweighted(const std::vector<at::Tensor>& outputs, const Dispatched& d, const at::Tensor& probs_range,
                            const MoeRouting& mr);
// A replay's dead parts (outputs_dead): act @ w and rows added into their tokens' places, the values
// not computed (placeholders), their backward as the real ones'.
at::Tensor dead_linear(const at::Tensor& act, const at::Tensor& w);
at::Tensor dead_scatter(const std::vector<at::Tensor>& rows, const std::vector<at::Tensor>& tokens, int64_t n,
                        int64_t hidden);

// The same stages across real ranks: dispatch sends each row to the rank of its expert (counts
// first, the paper's "notify", then the rows), experts run on what arrived, combine sends the
// outputs back and weights them. Every rank must call it for every range (chunk), even an empty one.
Combined moe_range_alltoall(const at::Tensor& x_range, const at::Tensor& probs_range, const LayerWeights& w,
                            const MoeRouting& mr, int64_t begin, int64_t end);

// ChunkedEP's prefetch (core/strategy/memfine/chunked_moe.cpp): a range's rows dispatched ahead of
// its experts and held outside autograd until its turn (on real ranks their all-to-all is in flight
// meanwhile); its experts and combine then run from those rows, and the gradient the rows receive
// goes back to the range's tokens as dispatch's backward would send it.
struct PrefetchedRange {
  int64_t begin = 0, end = 0;
  Dispatched d;                     // one process: d.inputs are each local expert's rows
  std::shared_ptr<struct A2aRows> a2a;  // real ranks: the exchange's routing and rows in flight
  // The held rows (real ranks: waits for them): the tensors whose gradients backward computes.
  std::vector<at::Tensor> rows();
};
PrefetchedRange prefetch_range(const at::Tensor& x_range, const MoeRouting& mr, int64_t begin, int64_t end,
                               const Dispatched* routed = nullptr);
// experts -> combine from `rows` (rows() made leaves, in its order).
Combined moe_from_rows(const PrefetchedRange& p, const std::vector<at::Tensor>& rows, const at::Tensor& probs_range,
                       const LayerWeights& w, const MoeRouting& mr);
// The range's input gradient [end - begin, hidden] from its rows' (undefined: none arrived); real
// ranks exchange them back, every rank, even with none.
at::Tensor rows_grad_to_tokens(const PrefetchedRange& p, const std::vector<at::Tensor>& row_grads, const MoeRouting& mr,
                               const at::TensorOptions& options, int64_t hidden);

// dispatch -> experts -> combine for one range: the unit that MemFine chunks and recomputes.
// `routed`: the range's routing from dispatch_indices, else computed here (real ranks: unused,
// their routing is exchanged per range).
Combined moe_range(const at::Tensor& x_range, const at::Tensor& probs_range, const LayerWeights& w,
                   const MoeRouting& mr, int64_t begin, int64_t end, const Dispatched* routed = nullptr);

}  // namespace memfine
