#include "core/predict/memory_model.h"

#include <algorithm>
#include <optional>
#include <string>

#include "core/model/model.h"
#include "core/moe/capacity.h"
#include "core/predict/step_bytes.h"

namespace memfine {

namespace {

// One step of one rank, walked as autograd runs it: what each layer keeps from its forward until
// its backward (offloaded groups away meanwhile), then the loss's backward and each layer's in
// reverse, each with its transients, then the optimizer's; the peak and where it happens.
class Step {
 public:
  Step(const ExperimentConfig& c, const EmulatedRank& rank, const StrategyShape& s,
       const std::vector<int64_t>& chunks_per_layer);
  Prediction walk();

 private:
  void consider(double bytes, const std::string& where);
  void keep_forwards();
  void offload_groups();
  void layer_backward(int64_t l, double below);
  void moe_chunks_backward(int64_t l, double base, const std::string& at);
  // The non-empty token chunks of layer l with their index, in order.
  std::vector<std::pair<int64_t, MoeRows>> chunk_rows(int64_t l, int64_t chunks) const;
  bool stored_chunks(int64_t l) const {
    const StrategyShape& sl = shape_[size_t(l)];
    return sl.moe == MoeMode::Stored && sl.chunks > 1 && !sl.recompute_layer;
  }
  double stored_chunks_bytes(int64_t l) const;
  // What a stored MoE keeps until its backward (whole or in stored chunks).
  double moe_kept(int64_t l) const;
  // The ranged MoE's backward (core/moe/ranged.h) on top of `base`, everything alive when it starts
  // but what the MoE kept (`kept`: included in base, as a stored layer's resident bytes are).
  void ranged_backward(int64_t l, double base, bool kept_in_base, const std::string& at);
  double back_below(int64_t l) const;
  double back_own(int64_t l) const { return group_[size_t(l)].own + group_[size_t(l) + 1].prev; }

  const ExperimentConfig& c_;
  const EmulatedRank& rank_;
  const StrategyShape& s_;
  Sizes z_;
  int64_t L_ = 0, T_ = 0;
  double act_ = 0;  // one [tokens, hidden] tensor
  Prediction p_;
  double peak_ = 0;
  double pool_ = 0;  // Paged Stash's device pages, alive through the step's passes
  int64_t current_ = -1;  // the layer whose backward is being considered; -1: the loss
  std::vector<MoeRows> whole_;
  std::vector<StrategyShape> shape_;  // each layer's: a plan's 0 chunks is a layer stored whole
  std::vector<Outside> out_;
  std::vector<double> resident_;  // bytes each layer keeps from its forward until its backward
  std::vector<OffloadedBytes> group_;
};

Sizes sizes_of(const ExperimentConfig& c, const EmulatedRank& rank, const StrategyShape& s) {
  const ModelConfig& m = c.model;
  Sizes z;
  z.E = double(c10::elementSize(dtype_of(c.dtype)));
  z.T = double(m.tokens()), z.h = double(m.hidden), z.g = double(m.ffn_hidden),
  z.gs = double(m.ffn_hidden * m.shared_experts);
  z.experts = double(m.experts), z.heads_dim = double(m.heads * m.head_dim), z.b = double(m.micro_batch);
  z.H = double(m.heads), z.s = double(m.seq), z.k = double(m.topk), z.attention = m.attention == "gqa";
  z.sdpa = c.attention_kernel == "sdpa";
  z.act_recomputed = s.experts == ExpertStorage::ActRecomputed;
  z.buffer_free = s.experts == ExpertStorage::BufferFree;
  z.keep_act = s.keep_act;
  z.block_rows = s.block_rows;
  z.a2a = rank.real && c.kernels != "fused" && !z.buffer_free;
  z.dead_replay = s.skip_dead && !z.a2a;
  z.stashed = s.stash.any();
  z.fused = c.kernels == "fused";
  const OffloadSpec& off = s.offload;
  z.ranged = c.expert_gemm == "grouped" && !rank.real && !z.buffer_free && !s.skip_dead && !s.stash.any() &&
             !s.own_expert &&
             !off.has(Module::ExpertFc1) && !off.has(Module::MoeAct) && !off.has(Module::ExpertFc2);
  // LibTorch's native grouped GEMM: bf16 on a GPU from 2.8 (this build's version stands for the GPU's).
  z.wgrad_buffer = c.device == "cuda" && c.dtype == "bfloat16" && c.expert_wgrad == "grouped" &&
                   (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 8));
  return z;
}

Step::Step(const ExperimentConfig& c, const EmulatedRank& rank, const StrategyShape& s,
           const std::vector<int64_t>& chunks_per_layer)
    : c_(c), rank_(rank), s_(s), z_(sizes_of(c, rank, s)) {
  const ModelConfig& m = c.model;
  L_ = m.layers, T_ = m.tokens();
  act_ = z_.E * z_.T * z_.h;
  p_.static_bytes = int64_t(z_.E) * (4 * parameter_count(m, c.ep) + 2 * T_ * m.hidden) + rank.input_bytes();
  const int64_t cap = s.capacity_factor > 0 ? capacity_per_expert(T_, m.topk, m.experts, s.capacity_factor) : -1;
  const int64_t pad_rows = cap >= 0 && s.pad_to_capacity ? cap * c.ep : 0;
  for (int64_t l = 0; l < L_; ++l) whole_.push_back(moe_rows(rank.layers[size_t(l)], m.topk, T_, 0, T_, cap, pad_rows));
  if (s.stash.any()) {
    // Paged Stash: its pages as the stash takes them, expert by expert in each layer's order; a
    // layer beyond the buffers' capacity or rows with no page left rerun the step dropless without
    // the stash, its pool still held (core/strategy/stash.h).
    const StashSpec& st = s.stash;
    PageBook book(st.device_pages(L_, T_, m.topk), st.host_pages(L_, T_, m.topk), st.page_rows);
    bool rerun = false;
    for (const MoeRows& r : whole_) {
      rerun = rerun || rows_received(r) > double(st.capacity_rows(T_, m.topk));
      for (size_t e = 0; e < r.own.size(); ++e)
        if (r.own[e] + r.peer[e] > 0) rerun = rerun || book.put(r.own[e] + r.peer[e]) == PageBook::Where::Nowhere;
    }
    pool_ = z_.E * double(st.device_pages(L_, T_, m.topk) * st.page_rows) * (z_.h + 3 * z_.g);
    z_.stashed = !rerun;
    p_.reran = rerun;
  }
  p_.layer_peak.assign(size_t(L_), 0);
  shape_.assign(size_t(L_), s);
  if (s.moe == MoeMode::Chunked && !chunks_per_layer.empty())
    for (int64_t l = 0; l < L_; ++l) {
      StrategyShape& sl = shape_[size_t(l)];
      sl.chunks = chunks_per_layer[size_t(l)];
      if (sl.chunks == 0) sl.recompute_layer = false, sl.moe = MoeMode::Stored;
    }
  if (s.moe == MoeMode::Chunked)
    p_.chunks = chunks_per_layer.empty() ? std::vector<int64_t>(size_t(L_), s.chunks) : chunks_per_layer;
}

void Step::consider(double bytes, const std::string& where) {
  bytes += pool_;
  if (bytes > peak_) peak_ = bytes, p_.phase = where;
  int64_t& slot = current_ < 0 ? p_.loss_peak : p_.layer_peak[size_t(current_)];
  slot = std::max(slot, int64_t(bytes));
}

void Step::keep_forwards() {
  out_.resize(size_t(L_));
  resident_.resize(size_t(L_));
  for (int64_t l = 0; l < L_; ++l) {
    const StrategyShape& sl = shape_[size_t(l)];
    out_[size_t(l)] = outside_moe(z_, l > 0);  // the first layer's input is data, without gradient
    if (sl.recompute_layer)
      resident_[size_t(l)] = act_;       // its output, saved as the next layer's input
    else if (sl.moe != MoeMode::Stored)  // recomputed as a block or chunk by chunk: the probabilities
      resident_[size_t(l)] = out_[size_t(l)].total() + z_.E * z_.T * z_.k;
    else
      resident_[size_t(l)] = out_[size_t(l)].total() + moe_kept(l);
  }
}

// Offloading: each layer's group is off the device from its forward until backward reaches the
// layer `prefetch` above it (the loss's backward comes before any). Encoded on the device: what the
// codes save (the group less its codes; their scales, a float per tensor or block, aside) is away as
// long; encoded and offloaded, the host holds the codes.
void Step::offload_groups() {
  group_.assign(size_t(L_) + 1, OffloadedBytes{});
  for (int64_t l = 0; l < L_; ++l) {
    const StrategyShape& sl = shape_[size_t(l)];
    if (!sl.offload.offloads(l, L_)) continue;
    OffloadedBytes ob = offloaded_bytes(z_, sl, whole_[size_t(l)], l > 0);
    p_.host_bytes += int64_t(ob.total() * sl.offload.host_fraction(z_.E));  // the storages, or their codes
    const double away = 1 - sl.offload.kept_fraction(z_.E);
    ob.own *= away, ob.prev *= away;
    group_[size_t(l)] = ob;
    resident_[size_t(l)] -= ob.own;
    if (l > 0) resident_[size_t(l - 1)] -= ob.prev;
  }
}

// While layer l's backward runs, the groups of the `prefetch` layers below are back, and its own
// input (the layer below's output); besides, for what this model counts in the layer's own
// (back_own), its own group and the output the layer above offloaded.
double Step::back_below(int64_t l) const {
  double b = group_[size_t(l)].prev;
  for (int64_t g = std::max<int64_t>(0, l - s_.offload.prefetch); g < l; ++g) b += group_[size_t(g)].total();
  return b;
}

// Layer l's backward with `below` (what the layers under it keep, and what came back for it): the
// shared expert's first, then the MoE's (whole, or chunk by chunk), then attention's.
void Step::layer_backward(int64_t l, double below) {
  const StrategyShape& sl = shape_[size_t(l)];
  const Outside& o = out_[size_t(l)];
  const std::string at = "backward of layer " + std::to_string(l);
  const double grad = act_;  // gradient of the layer's output
  // Under recomputation, everything outside the MoE is kept again during the layer's backward;
  // the shared expert (recorded after the routed ones) has run its backward before the MoE's.
  // A recomputed layer's output is let go before its backward runs (only its graph is needed);
  // a stored layer's, once the layer above (or the loss) has run its backward, which read it.
  const double kept =
      (sl.recompute_layer ? o.total() - o.output : resident_[size_t(l)] + back_own(l) - o.output) - o.shared;
  // Once the shared expert's backward has run, its input gradient waits for the MoE's to be
  // added to it (its weight gradients are in .grad already).
  const double shared_grads = o.shared == 0 ? 0 : act_;
  if (o.shared > 0) {
    // The shared expert's backward comes first, with the whole layer still kept: two gradients
    // of its width, or one and its weight's.
    const double moe_kept = sl.recompute_layer && sl.moe == MoeMode::Stored ? this->moe_kept(l)
                            : sl.moe == MoeMode::Stored                     ? 0
                                                                            : z_.E * z_.T * z_.k;
    const double rg = z_.E * z_.T * z_.gs;
    consider(below + kept + o.shared + moe_kept + grad + std::max(2 * rg, rg + z_.E * z_.gs * z_.h),
             at + ", shared expert");
  }
  if (z_.ranged) {
    const bool stored = sl.moe == MoeMode::Stored;
    ranged_backward(l, below + kept + shared_grads + grad, stored && !sl.recompute_layer, at);
  } else if (sl.moe == MoeMode::Chunked) {
    moe_chunks_backward(l, below + kept + shared_grads + grad, at);
  } else if (stored_chunks(l)) {
    // Stored chunks: autograd runs the last chunk's backward first, the earlier chunks still kept;
    // each chunk's stored bytes go once its backward has run.
    const auto rows = chunk_rows(l, sl.chunks);
    double alive = stored_chunks_bytes(l);
    const double base = below + kept + shared_grads + grad - alive;
    for (size_t i = rows.size(); i-- > 0;) {
      consider(moe_backward_peak(z_, rows[i].second, base + alive), at + ", MoE chunk " + std::to_string(rows[i].first));
      alive -= moe_stored(z_, rows[i].second, false);
    }
  } else {
    const double moe = sl.moe == MoeMode::Stored && !sl.recompute_layer ? 0 : moe_stored(z_, whole_[size_t(l)]);
    consider(moe_backward_peak(z_, whole_[size_t(l)], below + kept + shared_grads + grad + moe), at + ", MoE");
  }
  // Then attention's backward, whose peak is the softmax's: its two [b, heads, s, s] gradients
  // beside the softmax output, q, k and the mask still saved. The context's copy went with the
  // output projection's backward and v's with the product's, whose v gradient (the same size)
  // waits until the scores' chain is done. On a GPU, ATen's softmax backward
  // (softmax_backward_cuda_out) first forms grad * output in a third such tensor, alive beside
  // the two (scripts/gpu_peak_probe.py names it); its CPU kernel forms none.
  // Through sdpa: what it kept, the context's gradient and q's, k's and v's; on a GPU,
  // FlashAttention's backward also sums q's in a float32 buffer.
  if (z_.attention && z_.sdpa) {
    const double hd = z_.T * z_.heads_dim;
    consider(below + o.norm1 + o.attention + act_ + 4 * z_.E * hd + (c_.device == "cuda" ? 4 * hd : 0),
             at + ", attention");
  } else if (z_.attention) {
    const double scores = z_.E * z_.b * z_.H * z_.s * z_.s, context = z_.E * z_.T * z_.heads_dim;
    consider(below + o.norm1 + o.attention - context + act_ + (c_.device == "cuda" ? 3 : 2) * scores,
             at + ", attention");
  }
}

// Token-level routing: each chunk's own rows; counts: each chunk's share of every expert's.
std::vector<std::pair<int64_t, MoeRows>> Step::chunk_rows(int64_t l, int64_t chunks) const {
  const RankRouting& rr = rank_.layers[size_t(l)];
  std::optional<PeerIndex> peers;
  if (rr.own_experts.defined()) peers = peer_index(rr);
  std::vector<std::pair<int64_t, MoeRows>> rows;
  for (int64_t ci = 0; ci < chunks; ++ci) {
    const int64_t a = ci * T_ / chunks, b = (ci + 1) * T_ / chunks;
    if (a < b) rows.emplace_back(ci, moe_rows(rr, c_.model.topk, T_, a, b, -1, 0, peers ? &*peers : nullptr));
  }
  return rows;
}

double Step::stored_chunks_bytes(int64_t l) const {
  double b = 0;
  for (const auto& [ci, r] : chunk_rows(l, shape_[size_t(l)].chunks)) b += moe_stored(z_, r, false);
  return b;
}

double Step::moe_kept(int64_t l) const {
  if (!z_.ranged) return stored_chunks(l) ? stored_chunks_bytes(l) : moe_stored(z_, whole_[size_t(l)]);
  // Every range's tensors and layout, and the probabilities (the node's input) once.
  double b = z_.E * z_.T * z_.k;
  const int64_t chunks = stored_chunks(l) ? shape_[size_t(l)].chunks : 1;
  for (const auto& [ci, r] : chunks > 1 ? chunk_rows(l, chunks) : std::vector<std::pair<int64_t, MoeRows>>{{0, whole_[size_t(l)]}})
    b += ranged_kept(z_, r) + ranged_index_bytes(r);
  return b;
}

// The ranged MoE's backward: the input's and the probabilities' gradients for the whole layer
// first; stored ranges last to first, each letting its tensors go after its backward; ranges made
// again (the MoE recomputed as a block or in chunks) first to last, over their layout made again.
void Step::ranged_backward(int64_t l, double base, bool kept_in_base, const std::string& at) {
  const StrategyShape& sl = shape_[size_t(l)];
  const RankRouting& rr = rank_.layers[size_t(l)];
  const int64_t chunks = sl.moe == MoeMode::Chunked || stored_chunks(l) ? sl.chunks : 1;
  auto where = [&](int64_t ci) { return at + ", MoE" + (chunks > 1 ? " chunk " + std::to_string(ci) : ""); };
  double alive = base + act_ + z_.E * z_.T * z_.k;  // the input's and the probabilities' gradients
  if (sl.moe != MoeMode::Stored) {
    // ChunkedEP's replay holds the next earlier range's rows while a range runs.
    const bool prefetched = sl.replay == ChunkReplay::LastToFirstPrefetched;
    auto ahead = [&](const MoeRows& r) { return prefetched ? z_.E * z_.h * ranged_rows(r) : 0.0; };
    alive += ranged_index_bytes(whole_[size_t(l)]);  // every range's, laid out again
    if (chunks == 1) {
      consider(alive + ranged_backward_extra(z_, whole_[size_t(l)]), where(0));
    } else if (rr.own_experts.defined()) {
      const auto rows = chunk_rows(l, chunks);
      for (size_t i = 0; i < rows.size(); ++i)
        consider(alive + ranged_backward_extra(z_, rows[i].second) + (i > 0 ? ahead(rows[i - 1].second) : 0.0),
                 where(rows[i].first));
    } else {
      // Counts: a range takes its share of every expert's rows, so only its size matters: the
      // first range's (T / chunks tokens) and, where they differ, one more token.
      for (const int64_t n : {T_ / chunks, T_ % chunks ? T_ / chunks + 1 : int64_t(0)}) {
        if (n == 0) continue;
        const MoeRows r = moe_rows(rr, c_.model.topk, T_, 0, n, -1, 0, nullptr);
        consider(alive + ranged_backward_extra(z_, r) + ahead(r), where(0));
      }
    }
    return;
  }
  // Stored ranges: the last first, each letting its tensors go after its backward.
  std::vector<std::pair<int64_t, MoeRows>> rows;
  if (chunks == 1)
    rows.emplace_back(0, whole_[size_t(l)]);
  else
    rows = chunk_rows(l, chunks);
  if (!kept_in_base) alive += moe_kept(l);
  for (size_t i = rows.size(); i-- > 0;) {
    alive -= ranged_kept(z_, rows[i].second);
    consider(alive + ranged_backward_extra(z_, rows[i].second), where(rows[i].first));
  }
}

// MoE in chunks: one chunk's stored bytes and transients at a time; weight gradients go into the
// experts' .grad as they are produced.
void Step::moe_chunks_backward(int64_t l, double base, const std::string& at) {
  const int64_t chunks = shape_[size_t(l)].chunks, T = T_;
  // With more than one chunk, the MoE's input and probability gradients are assembled in
  // layer-sized buffers, and every chunk's routing is made at once and held through the loop
  // (dispatch_indices: the saved indices and each remote assignment's table row), a chunk's
  // indices being views of it; with one, the chunk's are the layer's.
  const bool several = chunks > 1;
  const MoeRows& layer_rows = whole_[size_t(l)];
  // Real ranks exchange each chunk's routing with the chunk: nothing is held for the layer.
  const bool held = several && !z_.a2a;
  base += (several ? act_ + z_.E * z_.T * z_.k : 0) +
          (held ? saved_index_bytes(layer_rows) + 8 * double(layer_rows.remote) : 0);
  const RankRouting& rr = rank_.layers[size_t(l)];
  // ChunkedEP's replay (ChunkReplay::LastToFirstPrefetched): while a chunk runs, the next earlier
  // one's dispatched rows are held (real ranks: the rows it sent as well, until the exchange is done).
  const bool prefetched = shape_[size_t(l)].replay == ChunkReplay::LastToFirstPrefetched;
  auto held_rows = [&](const MoeRows& r) {
    return prefetched ? z_.E * z_.h * (rows_received(r) + (z_.a2a ? rows_sent(r) : 0)) : 0.0;
  };
  auto chunk = [&](const MoeRows& r, double ahead, const std::string& which) {
    consider(moe_backward_peak(z_, r, base + moe_stored(z_, r, false) - (held ? saved_index_bytes(r) : 0) + ahead),
             at + ", MoE chunk " + which);
  };
  if (rr.own_experts.defined()) {  // token-level routing: each chunk's own rows
    const auto rows = chunk_rows(l, chunks);
    for (size_t i = 0; i < rows.size(); ++i)
      chunk(rows[i].second, i > 0 ? held_rows(rows[i - 1].second) : 0.0, std::to_string(rows[i].first));
  } else {
    // Counts: a chunk takes its share of every expert's rows, so only its size matters: the
    // first chunk's (T / chunks tokens) and, where they differ, one more token.
    const MoeRows first = moe_rows(rr, c_.model.topk, T, 0, T / chunks, -1, 0, nullptr);
    const double ahead = chunks > 1 ? held_rows(first) : 0.0;
    chunk(first, ahead, "0");
    if (T % chunks && T / chunks + 1 <= T) {
      const MoeRows more = moe_rows(rr, c_.model.topk, T, 0, T / chunks + 1, -1, 0, nullptr);
      chunk(more, chunks > 1 ? held_rows(more) : 0.0, "of " + std::to_string(T / chunks + 1) + " tokens");
    }
  }
}

Prediction Step::walk() {
  keep_forwards();
  offload_groups();
  for (double r : resident_) p_.layer_kept.push_back(int64_t(r));
  // The loss: final RMSNorm (its input needs a gradient; its output is not kept) and the
  // difference to the target; its backward holds four [tokens, hidden] gradients at once.
  const double final_stored = kNormKeptWithGrad * act_ + z_.E * z_.T, final_backward = 4 * act_;
  double below = 0;
  for (int64_t l = 0; l < L_; ++l) below += resident_[size_t(l)];
  consider(below + final_stored + final_backward, "backward of the loss");
  for (int64_t l = L_ - 1; l >= 0; --l) {
    current_ = l;
    below -= resident_[size_t(l)];
    const double fetched_below = back_below(l);
    below += fetched_below;
    layer_backward(l, below);
    below -= fetched_below;
  }
  // Adam's step, once the activations are gone: one parameter-sized temporary (the denominator)
  // for the largest parameter. The peak when little else is kept.
  current_ = -1;
  pool_ = 0;  // let go once backward is done
  const ModelConfig& m = c_.model;
  const Sizes& z = z_;
  const double widest = std::max({z.h * 2 * z.g, z.h * 2 * z.gs, z.h * z.experts, z.attention ? z.h * z.heads_dim : 0.0,
                                  z.attention ? z.h * double(m.kv_heads * m.head_dim) : 0.0});
  consider(z.E * widest, "optimizer step");
  p_.activation_bytes = int64_t(peak_);
  return p_;
}

}  // namespace

Prediction predict_step(const ExperimentConfig& c, const EmulatedRank& rank, const StrategyShape& s,
                        const std::vector<int64_t>& chunks_per_layer) {
  return Step(c, rank, s, chunks_per_layer).walk();
}

}  // namespace memfine
