// The emulated expert-parallel rank: one device plays rank `rank` of `ep`. It holds experts
// [rank * E/ep, (rank+1) * E/ep) and receives s' token-expert rows: its own tokens' rows to those
// experts plus the rows its ep-1 virtual peers send. Peers' hidden states, the gradients they
// return for the outputs sent back, and the outputs remote experts return for this rank's own
// tokens come from small seeded tables, so the rank holds exactly what a real rank holds.
#pragma once
#include <ATen/ATen.h>

#include <vector>

#include "core/config/config.h"

namespace memfine {

struct RankRouting {
  int64_t rank = 0, ep = 1, first_expert = 0, local_experts = 0;
  at::Tensor own_experts;            // [tokens, topk] global expert ids (undefined: the router decides)
  at::Tensor own_key;                // [tokens, topk] row of `remote_outputs` for assignments to remote experts
  at::Tensor peer_pos;               // [P] token position at the sending peer (the chunking axis)
  at::Tensor peer_rank;              // [P] sending peer
  at::Tensor peer_expert;            // [P] local expert index
  at::Tensor peer_key;               // [P] row of `peer_inputs` / `peer_grads`
  at::Tensor peer_score;             // [P] the sender's router probability of the assignment (seeded)
  int64_t tokens_received = 0;       // s' = own rows to local experts + peer rows
  std::vector<int64_t> expert_rows;  // per local expert: the rows it receives (s' is their sum)
  // Router-decided routing (own_experts undefined): own assignments sent to other ranks' experts.
  // Before a step, expert_rows and this are a balanced estimate; MACT replaces them by the counts.
  int64_t remote_rows = 0;
  double overload_factor = 1;  // s' / balanced s' (tokens * topk: each rank sends that many rows)
  // Counts only (make_counts_rank): the layer's assignments per expert over every rank's tokens;
  // each rank sends an expert 1/ep of them, a token range its share. Empty otherwise.
  std::vector<int64_t> expert_counts;
};

struct EmulatedRank {
  std::vector<RankRouting> layers;
  at::Tensor peer_inputs;                     // [kTableRows, hidden]
  at::Tensor peer_grads;                      // [kTableRows, hidden]
  at::Tensor remote_outputs;                  // [kTableRows, hidden]
  static constexpr int64_t kTableRows = 509;  // prime, so keys spread over it
  int64_t rank = 0;
  // The routing is a real rank's, whose rows move through the all-to-all (core/moe/alltoall.cpp):
  // the memory model accounts that path's buffers instead of the emulated peers' tables.
  bool real = false;
  // Counts only: what the token-level rank would hold (routing and tables), not allocated.
  int64_t counted_input_bytes = -1;
  int64_t table_bytes = 0;  // the tables' bytes where they were not made
  bool counts_only() const { return counted_input_bytes >= 0; }
  int64_t input_bytes() const;
  EmulatedRank clone() const;  // the same tables and routing in memory of its own
};

// The workload's routing of all ranks' tokens for one layer: [ep * tokens, topk] expert ids.
at::Tensor global_routing(const ExperimentConfig& c, int64_t layer, int64_t step = 0);

// The rank receiving the most rows over all layers (ties: the lowest rank).
int64_t hottest_rank(const ExperimentConfig& c);

// Routing of `rank` (rank -1 means the hottest) at `step`, plus its seeded tables (`tables` false:
// their bytes counted, not made, for a prediction).
EmulatedRank make_emulated_rank(const ExperimentConfig& c, int64_t rank, int64_t step = 0, bool tables = true);
// The same rank from the workload's counts alone (no token-level routing, no tables): memory in
// proportion to the layers' experts, not to tokens, for sizing jobs too large to route here
// (memfine predict). Rank -1: the hottest by counts.
EmulatedRank make_counts_rank(const ExperimentConfig& c, int64_t rank, int64_t step = 0);
// Replaces the routing of `er` by that of `step` (a workload with a schedule changes per step).
void route_step(EmulatedRank& er, const ExperimentConfig& c, int64_t step);

RankRouting rank_routing(const at::Tensor& global_ids, const ExperimentConfig& c, int64_t rank, int64_t layer);

}  // namespace memfine
