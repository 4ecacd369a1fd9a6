// The ways an expert can keep what its backward needs, shared by every strategy that offers them
// (moe_act_recompute, moeblaze, and memfine's `experts` parameter inside each chunk), and read by
// the memory model from a strategy's declared shape.
#pragma once
#include <string>

#include "core/moe/stages.h"
#include "core/util/named_enum.h"

namespace memfine {

enum class ExpertStorage {
  Stored,         // what autograd saves: input rows, z = [a | b], SiLU(a), SiLU(a) * b, outputs
  ActRecomputed,  // Megatron's selective recompute (moe_act): SiLU(a) * b discarded, recomputed
  BufferFree,     // MoEBlaze-style (buffer_free.h): indices and z only; no routed copies
};

template <>
struct EnumNames<ExpertStorage> {
  static constexpr std::pair<ExpertStorage, const char*> all[] = {{ExpertStorage::Stored, "stored"},
                                                                  {ExpertStorage::ActRecomputed, "moe_act"},
                                                                  {ExpertStorage::BufferFree, "buffer_free"}};
};

// The expert path that runs it; keep_act and block_rows apply to buffer_free (also keep
// SiLU(a) * b; rows per block of an expert's work).
ExpertPath expert_path(ExpertStorage s, bool keep_act = false, int64_t block_rows = 256);

}  // namespace memfine
