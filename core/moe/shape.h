// A strategy's shape: how a decoder layer runs and what it keeps for backward, in one vocabulary
// for the executor that runs it (core/strategy/executor.h) and the memory models that predict it
// (core/predict/): a strategy is declared once, as its shape.
#pragma once
#include <cmath>
#include <cstdint>
#include <string>

#include "core/moe/expert_storage.h"
#include "core/util/modules.h"
#include "core/util/named_enum.h"

namespace memfine {

// The format what the chosen modules save is kept in until backward: as it is, or encoded in a
// narrower one and decoded for backward (8-bit activation storage, core/strategy/codec.h).
enum class StoredAs { Plain, Fp8E4m3, Fp8E5m2, Bf16 };
template <>
struct EnumNames<StoredAs> {
  static constexpr std::pair<StoredAs, const char*> all[] = {
      {StoredAs::Plain, "none"}, {StoredAs::Fp8E4m3, "fp8_e4m3"}, {StoredAs::Fp8E5m2, "fp8_e5m2"}, {StoredAs::Bf16, "bf16"}};
};

// FP8's scale: one per saved tensor, or one per block of rows.
enum class CodecScale { Tensor, Rows };
template <>
struct EnumNames<CodecScale> {
  static constexpr std::pair<CodecScale, const char*> all[] = {{CodecScale::Tensor, "tensor"}, {CodecScale::Rows, "rows"}};
};

// Activation offloading (core/strategy/offload.h): what autograd saves inside the chosen modules
// leaves the device after their forward and comes back for their backward; encoded, it stays on the
// device as codes, or its codes go to the host (compress what is offloaded).
struct OffloadSpec {
  uint32_t modules = 0;                 // a bit per Module
  int64_t min_bytes = 0;                // smaller saved tensors stay (Megatron's min_offloaded_tensor_size)
  int64_t margin = 0;                   // the last `margin` layers keep theirs (their backward comes first)
  int64_t prefetch = 1;                 // backward brings a layer's group back this many layers ahead
  double h2d_gbps = 35, d2h_gbps = 53;  // host bandwidth each way, for the modelled copy times
  StoredAs stored_as = StoredAs::Plain;
  bool to_host = true;     // false: kept on the device (encoded)
  CodecScale scale = CodecScale::Tensor;
  int64_t rows = 128;  // CodecScale::Rows: rows of a saved tensor per scale
  // Encoded in FP8: a scale per this many rows of a saved tensor; 0: one per tensor.
  int64_t scale_rows() const { return scale == CodecScale::Rows ? rows : 0; }
  bool encodes() const { return stored_as != StoredAs::Plain; }
  // Of a saved floating tensor of `element_bytes` per element, the share its codes take (1: plain).
  double code_fraction(double element_bytes) const {
    if (!encodes()) return 1;
    const double code = stored_as == StoredAs::Bf16 ? 2 : 1;
    return code < element_bytes ? code / element_bytes : 1;
  }
  // The share the device still holds until backward (its scales aside), and the host's.
  double kept_fraction(double element_bytes) const { return to_host ? 0 : code_fraction(element_bytes); }
  double host_fraction(double element_bytes) const { return to_host ? code_fraction(element_bytes) : 0; }
  bool any() const { return modules != 0; }
  bool has(Module m) const { return modules & (1u << unsigned(m)); }
  void add(Module m) { modules |= 1u << unsigned(m); }
  // Layer `l` of `layers` offloads.
  bool offloads(int64_t l, int64_t layers) const { return any() && l < layers - margin; }
};

// Its modules by name, in a layer's order: "core_attn, expert_fc1".
inline std::string offload_modules_text(const OffloadSpec& o) {
  std::string out;
  for (const auto& [m, name] : offloadable_modules())
    if (o.has(m)) out += (out.empty() ? "" : ", ") + name;
  return out;
}

// Paged Stash (Megatron-Core moe/paged_stash.py, PRs #2690 and #4247): what each routed expert
// saves for backward (its input rows, z = [a | b] and SiLU(a) * b) is copied after its forward into
// pages of `page_rows` rows of a device pool sized device_factor x the step's mean rows, spilling
// to host_factor x as many host pages; a layer whose rows exceed rank_capacity x the mean (the
// fixed buffers'), or a stash that finds no page, has the step run again dropless without it.
struct StashSpec {
  double rank_capacity = 0;  // 0: no stash
  int64_t page_rows = 64;
  double device_factor = 1.10, host_factor = 0;
  bool any() const { return rank_capacity > 0; }
  // A rank receives tokens x topk rows a layer on average (every rank sends that many, spread
  // evenly): the fixed buffers hold rank_capacity x that; the pools' pages, their factor x a step's.
  int64_t capacity_rows(int64_t tokens, int64_t topk) const {
    return int64_t(std::ceil(rank_capacity * double(tokens * topk)));
  }
  int64_t device_pages(int64_t layers, int64_t tokens, int64_t topk) const { return pages(device_factor, layers, tokens, topk); }
  int64_t host_pages(int64_t layers, int64_t tokens, int64_t topk) const { return pages(host_factor, layers, tokens, topk); }
  int64_t pages(double factor, int64_t layers, int64_t tokens, int64_t topk) const {
    return int64_t(std::ceil(factor * double(layers * tokens * topk) / double(page_rows)));
  }
};

// Where a stash puts each expert's rows, in the order they are saved: whole pages of the device's
// pool first, else of the host's, else nowhere (the step runs again). The one rule the stash and
// its prediction follow.
class PageBook {
 public:
  enum class Where { Device, Host, Nowhere };
  PageBook(int64_t device_pages, int64_t host_pages, int64_t page_rows)
      : device_pages_(device_pages), host_pages_(host_pages), page_rows_(page_rows) {}
  // Takes ceil(rows / page_rows) pages; `first_row`: where its rows begin in that pool.
  Where put(int64_t rows, int64_t* first_row = nullptr) {
    const int64_t n = (rows + page_rows_ - 1) / page_rows_;
    if (device_used_ + n <= device_pages_) {
      if (first_row) *first_row = device_used_ * page_rows_;
      device_used_ += n;
      return Where::Device;
    }
    if (host_used_ + n <= host_pages_) {
      if (first_row) *first_row = host_used_ * page_rows_;
      host_used_ += n;
      return Where::Host;
    }
    return Where::Nowhere;
  }
  int64_t device_used() const { return device_used_; }
  int64_t host_used() const { return host_used_; }

 private:
  int64_t device_pages_, host_pages_, page_rows_, device_used_ = 0, host_used_ = 0;
};

// How the MoE of a layer runs.
enum class MoeMode { Stored, RecomputedBlock, Chunked };

// How a Chunked MoE's backward replays its chunks: first to last, each dispatched when it runs
// (MemFine's FCDA), or last to first with the next earlier chunk's rows dispatched before this
// chunk's experts run, so that its all-to-all is in flight meanwhile and its rows held (ChunkedEP,
// Megatron-LM PR #7342).
enum class ChunkReplay { InOrder, LastToFirstPrefetched };

struct StrategyShape {
  bool recompute_layer = false;  // only the layer's input is kept; the layer is recomputed in backward
  MoeMode moe = MoeMode::Stored;
  // Chunked: the token chunks, replayed as `replay` says. Stored with chunks > 1: the MoE runs its
  // chunks one after another, each stored (ChunkedEP without recomputation).
  int64_t chunks = 1;
  ChunkReplay replay = ChunkReplay::InOrder;
  // Chunk i+1's dispatch is issued before chunk i's experts run (ChunkedEP): on real ranks its
  // all-to-all is in flight behind them; `memfine project` prices what that hides.
  bool dispatch_ahead = false;
  // How each expert keeps its activations (inside each chunk when chunked).
  ExpertStorage experts = ExpertStorage::Stored;
  bool keep_act = false;     // BufferFree: SiLU(a) * b kept as well
  int64_t block_rows = 256;  // BufferFree: rows per block of an expert's work
  // Capacity capping (0: dropless): each sending rank lets at most ceil(tokens * topk / experts *
  // factor) of its assignments reach an expert; with pad, every expert's input is padded to the
  // most it can receive (capacity x ranks).
  double capacity_factor = 0;
  bool pad_to_capacity = false;
  OffloadSpec offload;
  StashSpec stash;
  // Recomputed (the layer or the MoE block): the probabilities weigh the experts' activation
  // (Megatron's arrangement) and the replay skips fc2 and the combine (MoeRouting::weighted_act).
  bool skip_dead = false;
  // The strategy runs an expert function of its own (Strategy::expert): the stages call it one
  // expert at a time, as they run SwiGLU stored. Set by Strategy::predict, not declared.
  bool own_expert = false;
};

}  // namespace memfine
