// Communication time for `memfine project`: the alpha-beta model per collective over one link kind
// (alpha: the latency of one message, seconds; beta: the link's bandwidth, bytes per second), with
// the algorithm each collective library uses at scale. `bytes` is what one rank holds or sends.
#pragma once
#include <cstdint>

namespace memfine {

struct Link {
  double alpha = 0;  // seconds per message
  double beta = 1;   // bytes per second, one direction
};

// All-to-all as pairwise exchange: p-1 steps, each sending bytes/p to one peer (uneven splits: pass
// the largest a rank sends, the hottest rank's).
double all_to_all_time(const Link& l, int64_t ranks, double bytes);
// Ring all-reduce: 2(p-1) steps of bytes/p.
double all_reduce_time(const Link& l, int64_t ranks, double bytes);
// Ring reduce-scatter or all-gather: p-1 steps of bytes/p (bytes: the whole, unsharded tensor).
double reduce_scatter_time(const Link& l, int64_t ranks, double bytes);
double all_gather_time(const Link& l, int64_t ranks, double bytes);
// One pipeline send (or receive) of bytes.
double send_time(const Link& l, double bytes);

// Of a token's top-k among `experts` spread in order over `groups` (the GPUs of an expert-parallel
// group, or its nodes), the groups it reaches on average: its experts drawn independently and
// evenly (`consecutive` false), groups x (1 - (1 - 1/groups)^k); or consecutive, token t to experts
// tk .. tk+k-1 mod E (NeMo AutoModel's FakeBalancedGate, components/moe/layers.py), counted over
// the E tokens that run through every start.
double experts_reached(double experts, double k, double groups, bool consecutive);

}  // namespace memfine
