// What a MoE call keeps for backward and the peak of its backward, by path.
#include <algorithm>

#include "core/predict/step_bytes.h"

namespace memfine {

namespace {

// Buffer-free experts (core/moe/buffer_free.h): each keeps z (and the product with keep_act) and
// its row indices; the router probabilities of the range are kept once (`whole`: the MoE's own;
// in a chunk they are a slice of what the chunked MoE keeps). The remote experts' rows are added
// in place from their table: only their weights and indices stay.
double moe_stored_buffer_free(const Sizes& z, const MoeRows& m, bool whole) {
  double bytes = whole ? z.E * double(m.tokens) * z.k : 0;
  for (size_t e = 0; e < m.own.size(); ++e) {
    const double own = double(m.own[e]), rows = own + double(m.peer[e]);
    if (rows == 0) continue;
    bytes += z.E * rows * z.expert_g() * z.g + 8 * (rows + own);
  }
  return bytes + (z.E + 24) * double(m.remote);
}

// Its backward, experts in reverse order, one in flight, each in blocks of rows: the expert's
// input gradient exists for the whole of it (its weight gradients go straight into .grad); a block holds the rows'
// output gradient, the product (unless kept) and its gradient, then z's gradient with the rows' input gradient or the
// rows read again. The expert's z is released after it.
double moe_backward_peak_buffer_free(const Sizes& z, const MoeRows& m, double stored) {
  double peak = stored, cur = stored;
  const double tokens_grad = z.E * double(m.tokens) * z.h;
  const double probs_grad = z.E * double(m.tokens) * z.k;
  bool first = true;
  for (size_t i = m.own.size(); i-- > 0;) {
    const double rows = double(m.own[i] + m.peer[i]);
    if (rows == 0) continue;
    const double n = std::min(rows, double(z.block_rows)), bg = z.E * n * z.g, bh = z.E * n * z.h;
    const double block = std::max({bh + (z.keep_act ? 1 : 2) * bg, 3 * bg, 2 * bg + bh});
    const double accumulated = first ? 0 : tokens_grad;
    peak = std::max(peak, cur + accumulated + tokens_grad + probs_grad + block);
    cur -= z.E * rows * z.expert_g() * z.g;
    if (first) cur += tokens_grad, first = false;
  }
  return peak;
}

// What a real rank's MoE keeps: the arrived rows grouped by expert (the experts' inputs are views
// of them), each expert's activations, their concatenated outputs (kept by the index_add that
// un-groups them: its backward reads the source), the rows that came back and their probabilities
// (kept by the weighting), the weighted rows (kept by the index_add into token order), and the
// indices (tokens and slots of the sent rows, the grouping of the arrived ones).
// A stashed expert's backward (core/strategy/stash.cpp: StashedSwiglu) on top of what is alive: its
// rows, z and product copied back (h + 3g a row); the widest moment is the sigmoid's derivative
// beside z, the activation's gradient and b's, with fc2's weight gradient.
double stashed_expert_backward(const Sizes& z, double rows) {
  const double rg = z.E * rows * z.g, rh = z.E * rows * z.h;
  return std::max(rh + 2 * rg + 4 * rg + z.E * z.g * z.h,                 // x, z; g_act, sig, g_b, derivative
                  rh + 4 * rg + z.E * z.h * 2 * z.g + z.E * z.g * z.h);  // x, g_z, g_x-to-be, weight grads
}

double moe_stored_a2a(const Sizes& z, const MoeRows& m) {
  const double R = rows_received(m), S = rows_sent(m);
  const double expert = z.stashed ? 0 : z.h + z.expert_g() * z.g;  // the expert's input and its g widths
  return z.E * (R * (z.h + expert) + 2 * S * z.h + S) + 8 * (2 * S + R);
}

// Its backward: the weighted rows' gradient, then the weighting's (the returned rows' gradient and
// the product for the probabilities'), back through the all-to-all and un-grouped into all arrived
// rows; each expert's output gradient is a view of that, so it stays until the last expert is
// done. Each expert's input gradient is a slice whose backward fills a zeroed buffer of every
// arrived row, added to the one accumulated; then the grouping's, the all-to-all's and the token
// order's.
double moe_backward_peak_a2a(const Sizes& z, const MoeRows& m, double stored) {
  const double R = rows_received(m), S = rows_sent(m), Rh = z.E * R * z.h, Sh = z.E * S * z.h;
  const double tokens_grad = z.E * double(m.tokens) * z.h;
  // The forward (or the recomputation this backward follows) holds the sent rows and the arrived
  // ones until the range returns. Un-grouping the outputs holds, besides, the experts' outputs, a
  // zeroed buffer and its copy (before anything is sent back); at the end, the un-grouped outputs.
  double peak = std::max(stored - Sh + 4 * Rh, stored + Sh + 2 * Rh);
  peak = std::max(peak, stored + Sh);  // the weighted rows' gradient (they are released)
  double cur = stored;
  peak = std::max(peak, cur + 2 * Sh);  // the returned rows' gradient, the probabilities' product
  cur -= Sh;                            // the returned rows and the weighted rows' gradient released
  peak = std::max(peak, cur + Rh);      // through the all-to-all
  cur += Rh - Sh;
  peak = std::max(peak, cur + Rh);  // un-grouped: the outputs' gradient; the outputs released
  cur -= Rh;
  bool first = true;
  for (size_t i = m.own.size(); i-- > 0;) {
    const double rows = double(m.own[i] + m.peer[i]);
    if (rows == 0) continue;
    const double rg = z.E * rows * z.g, rh = z.E * rows * z.h;
    if (z.stashed) {
      peak = std::max(peak, cur + stashed_expert_backward(z, rows));
    } else {
      const double first_gemm = cur - (z.expert_g() - 2) * rg + 2 * z.E * z.g * z.h;
      peak = std::max({peak, cur + (z.act_recomputed ? 3 : 1) * rg + z.E * z.g * z.h, cur + 2 * rg, first_gemm});
      cur -= z.E * rows * z.expert_g() * z.g;
    }
    peak = std::max(peak, cur + rh + Rh + (first ? 0 : Rh));
    if (first) cur += Rh, first = false;
  }
  cur -= 2 * Rh;                    // the grouped rows and their outputs' gradient
  peak = std::max(peak, cur + Rh);  // the arrived rows' gradient
  peak = std::max(peak, cur + Sh);  // the sent rows', through the all-to-all
  cur += Sh - Rh;
  return std::max(peak, cur + 2 * tokens_grad);  // into token order, beside the one accumulated
}

// skip_dead's replay (core/moe/weighted.cpp): per row its input, z = [a | b], SiLU(a), the product,
// the weighted product (fc2's input: fc2's output is a placeholder) and its weight; the remote rows
// that arrived and their weights; the combine's sum is a placeholder that keeps nothing but indices.
double moe_stored_dead(const Sizes& z, const MoeRows& m) {
  double bytes = 0;
  for (size_t e = 0; e < m.own.size(); ++e) {
    const double rows = double(m.own[e] + m.peer[e] + m.pad[e]);
    if (rows > 0) bytes += z.E * rows * (z.h + 5 * z.g + 1);
  }
  return bytes + z.E * (double(m.remote) * z.h + double(m.remote)) + saved_index_bytes(m);
}

// Its backward: the combine's placeholder hands every own and remote row its gradient at once, the
// peers' sinks theirs; then each expert in reverse order as the stored path's (fc2's backward from
// its saved input, the weighting's, the product's, the first GEMM's), its input gradient scattered.
double moe_backward_peak_dead(const Sizes& z, const MoeRows& m, double stored) {
  double grads = z.E * double(m.remote) * z.h;
  for (size_t e = 0; e < m.own.size(); ++e) grads += z.E * double(m.own[e] + m.peer[e] + m.pad[e]) * z.h;
  double peak = stored + grads;
  double cur = stored + grads - z.E * double(m.remote) * z.h;  // the remote rows' gradients: their weights' taken
  const double tokens_grad = z.E * double(m.tokens) * z.h;
  bool first = true;
  for (size_t i = m.own.size(); i-- > 0;) {
    const double rows = double(m.own[i] + m.peer[i] + m.pad[i]);
    if (rows == 0) continue;
    const double rg = z.E * rows * z.g, rh = z.E * rows * z.h;
    const double first_gemm = cur - 3 * rg + 2 * z.E * z.g * z.h;
    peak = std::max({peak, cur + rg + z.E * z.g * z.h, cur - rh + 2 * rg, first_gemm});
    cur -= z.E * rows * (z.h + 5 * z.g + 1) + rh;
    peak = std::max(peak, cur + rh + tokens_grad + (first ? 0 : tokens_grad));
    if (first) cur += tokens_grad, first = false;
  }
  return peak;
}

}  // namespace

double ranged_rows(const MoeRows& m) {
  double rows = 0;
  for (size_t e = 0; e < m.own.size(); ++e) rows += double(m.own[e] + m.peer[e] + m.pad[e]);
  return rows;
}

double ranged_index_bytes(const MoeRows& m) { return 8 * (2 * ranged_rows(m) + 3 * double(m.remote)); }

double ranged_kept(const Sizes& z, const MoeRows& m) {
  return z.E * ranged_rows(m) * (2 * z.h + (z.act_recomputed ? 2 : 3) * z.g);
}

double ranged_backward_extra(const Sizes& z, const MoeRows& m) {
  const double rh = z.E * ranged_rows(m) * z.h, rg = z.E * ranged_rows(m) * z.g;
  const double w = z.wgrad_buffer ? z.E * z.h * z.g * double(m.own.size()) : 0;  // one projection's weights
  // rows, z, act, out and the outputs' gradient; then (out gone) the down projection's weight
  // gradient and the activation's gradient (act gone); then z's beside it; then the rows' beside
  // z's (z and the activation's gone).
  return std::max({3 * rh + 3 * rg, 2 * rh + 3 * rg + w, 2 * rh + 3 * rg, rh + 5 * rg, rh + 2 * rg + 2 * w,
                   2 * rh + 2 * rg});
}

// MoE (dispatch -> experts -> combine) with activations stored: what stays until backward.
// Per expert: its input rows, gate|up (2g), silu(gate) (g), silu*up (g); where it has own rows,
// its output (kept by the probability weighting), the weighted rows (kept by index_add) and the
// gathered probabilities; index tensors. Remote rows: what arrived and its weighted copy.
double moe_stored(const Sizes& z, const MoeRows& m, bool whole) {
  if (z.buffer_free) return moe_stored_buffer_free(z, m, whole);
  if (z.a2a) return moe_stored_a2a(z, m);
  if (z.dead_replay) return moe_stored_dead(z, m);
  double bytes = 0;
  for (size_t e = 0; e < m.own.size(); ++e) {
    const double own = double(m.own[e]), rows = own + double(m.peer[e]) + double(m.pad[e]);
    if (rows == 0) continue;
    if (!z.stashed) bytes += z.E * rows * (z.h + z.expert_g() * z.g);
    // Combine keeps the expert's output and the rows' weights; ATen's index_add also keeps the
    // weighted rows it adds.
    if (own > 0) bytes += z.E * (rows * z.h + (z.fused ? 0 : own * z.h) + own);
  }
  // The remote experts' rows that arrived, their weighted copy and their weights: ATen's. The fused
  // combine reads those rows in place, which a stored layer's peak on a GPU shows; its backward's
  // peak did not fall on the CPU, so the model keeps ATen's bytes and reads high there.
  return bytes + z.E * (2 * double(m.remote) * z.h + double(m.remote)) + saved_index_bytes(m);
}

// Peak of the MoE's backward on top of `stored` (everything alive when it starts). Autograd
// runs combine's backward for every expert first (it was recorded last): each expert's output
// is replaced by its gradient and the weighted rows are freed, with one expert's gradients in
// flight at a time. The experts then run in reverse order, each peaking in its down
// projection's backward (gradient of silu*up and of the weight) or in the product's backward
// (two gradients of width g), and scattering its input gradient back to token order.
double moe_backward_peak(const Sizes& z, const MoeRows& m, double stored) {
  if (z.buffer_free) return moe_backward_peak_buffer_free(z, m, stored);
  if (z.a2a) return moe_backward_peak_a2a(z, m, stored);
  if (z.dead_replay) return moe_backward_peak_dead(z, m, stored);
  // What combine's backward lets go: the remote rows and their weighted copy (priced as ATen's for
  // both paths, as moe_stored does), and the own rows' weighted copy (ATen's alone).
  double freed_by_combine = z.E * 2 * double(m.remote) * z.h, in_flight = 0;
  for (size_t e = 0; e < m.own.size(); ++e) {
    const double own = double(m.own[e]), rows = own + double(m.peer[e]) + double(m.pad[e]);
    if (rows == 0) continue;
    if (own > 0 && !z.fused) freed_by_combine += z.E * own * z.h;
    in_flight = std::max(in_flight, z.E * (rows + own) * z.h);
  }
  double peak = stored + in_flight;
  // Before this backward, the forward (or the replay it follows) added each expert's loss term for
  // the rows it computed for its peers (PeerSink, core/moe/stages.cpp): their seeded gradients
  // gathered and multiplied, two [peer rows, hidden] tensors beside everything kept, freed at once.
  double peers = 0;
  for (size_t e = 0; e < m.peer.size(); ++e) peers = std::max(peers, double(m.peer[e]));
  peak = std::max(peak, stored + 2 * z.E * peers * z.h);
  double cur = stored - freed_by_combine;
  const double tokens_grad = z.E * double(m.tokens) * z.h;  // gradient of the MoE input, accumulated
  bool first = true;
  for (size_t i = m.own.size(); i-- > 0;) {
    const double rows = double(m.own[i] + m.peer[i] + m.pad[i]);
    if (rows == 0) continue;
    const double rg = z.E * rows * z.g, rh = z.E * rows * z.h;
    // The first projection's backward makes its input's gradient and its weight's [h, 2g] one
    // (added into .grad, then freed) beside z's gradient, once the output gradient and the
    // activation's saved tensors are gone: at large ffn widths the expert's largest transient.
    if (z.stashed) {
      peak = std::max(peak, cur + stashed_expert_backward(z, rows));
      cur -= rh;  // its output gradient
      peak = std::max(peak, cur + rh + tokens_grad + (first ? 0 : tokens_grad));
      if (first) cur += tokens_grad, first = false;
      continue;
    }
    const double first_gemm = cur - (z.expert_g() - 2) * rg + 2 * z.E * z.g * z.h;
    if (z.act_recomputed)
      // The down projection's backward recomputes the product (freed once the weight's gradient
      // exists), then holds the product's gradient and z's, with the weight's.
      peak = std::max({peak, cur + 3 * rg + z.E * z.g * z.h, cur - rh + 2 * rg, first_gemm});
    else
      peak = std::max({peak, cur + rg + z.E * z.g * z.h, cur - rh + 2 * rg, first_gemm});
    cur -= z.E * rows * (z.h + z.expert_g() * z.g) + rh;  // its stored rows and its output gradient
    // Its input gradient is scattered back to token order (a zero-filled [tokens, hidden]) and
    // added to the accumulated one.
    peak = std::max(peak, cur + rh + tokens_grad + (first ? 0 : tokens_grad));
    if (first) cur += tokens_grad, first = false;
  }
  return peak;
}

}  // namespace memfine
