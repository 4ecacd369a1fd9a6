// A strategy's shape: how a decoder layer runs and what it keeps for backward, in one vocabulary
// for the executor that runs it (core/strategy/executor.h) and the memory models that predict it
// (core/predict/): a strategy is declared once, as its shape.
#pragma once
#include <cstdint>

#include "core/moe/expert_storage.h"

namespace memfine {

// How the MoE of a layer runs.
enum class MoeMode { Stored, RecomputedBlock, Chunked };

struct StrategyShape {
  bool recompute_layer = false;  // only the layer's input is kept; the layer is recomputed in backward
  MoeMode moe = MoeMode::Stored;
  int64_t chunks = 1;  // Chunked only
  // How each expert keeps its activations (inside each chunk when chunked).
  ExpertStorage experts = ExpertStorage::Stored;
  bool keep_act = false;     // BufferFree: SiLU(a) * b kept as well
  int64_t block_rows = 256;  // BufferFree: rows per block of an expert's work
  // Capacity capping (0: dropless): each sending rank lets at most ceil(tokens * topk / experts *
  // factor) of its assignments reach an expert; with pad, every expert's input is padded to the
  // most it can receive (capacity x ranks).
  double capacity_factor = 0;
  bool pad_to_capacity = false;
};

}  // namespace memfine
