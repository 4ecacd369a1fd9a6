// What the MoE's stages pass between them (stages.h): the routing of a layer, what dispatch hands
// the experts and what combine returns. Apart from the stages so that each way of running them
// (buffer_free.h, alltoall.cpp, ranged.h) includes the types without the stages.
#pragma once
#include <ATen/ATen.h>

#include <functional>
#include <vector>

#include "core/model/model.h"
#include "core/workload/ep_rank.h"

namespace memfine {

class Dist;
class TokenDispatcher;

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
  // How its ranges' rows move, chosen once per layer with `dist` (token_dispatcher, dispatcher.h).
  const TokenDispatcher* dispatcher = nullptr;
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
  // Grouped, where its weight gradients go (`expert_wgrad`): from the grouped GEMM (false: LibTorch's
  // native one makes them in a buffer, then added) or a GEMM per expert into .grad in place (true).
  bool wgrad_per_expert = false;
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

struct Dispatched {
  int64_t begin = 0, end = 0;
  std::vector<at::Tensor> inputs;  // per local expert: own rows, then peer rows, then padding
  std::vector<int64_t> own_rows, peer_rows;
  std::vector<at::Tensor> own_token;                 // per expert: token index within [begin, end)
  std::vector<at::Tensor> own_slot;                  // per expert: flat (token * topk + j) index into the probs
  std::vector<at::Tensor> peer_key;                  // per expert: rows of the peer tables
  at::Tensor remote_token, remote_slot, remote_key;  // own assignments to other ranks' experts
};

struct Combined {
  at::Tensor y;          // [end - begin, hidden]
  at::Tensor peer_loss;  // scalar
};

}  // namespace memfine
