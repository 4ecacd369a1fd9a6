// The configuration the multi-rank tests run on every rank and in the single-process reference.
#pragma once
#include "core/config/config.h"

namespace memfine::test_util {

inline ExperimentConfig dist_config(int64_t world) {
  ExperimentConfig c;
  c.name = "dist";
  c.seed = 9;
  c.dtype = "float64";
  c.model.layers = 2, c.model.hidden = 16, c.model.heads = 4, c.model.kv_heads = 2, c.model.head_dim = 4;
  c.model.ffn_hidden = 24, c.model.experts = 8, c.model.topk = 2, c.model.seq = 12, c.model.micro_batch = 2;
  c.model.shared_experts = 1;
  c.ep = world;
  c.workload.kind = "zipf";
  c.workload.alpha = 2.0;  // strongly imbalanced: one rank receives most rows
  c.budget = -1;
  return c;
}

}  // namespace memfine::test_util
