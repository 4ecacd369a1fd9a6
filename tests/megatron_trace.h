// Writes a routing trace in Megatron-Core's format (--moe-routing-trace-path: one
// router_trace_rank{r}.jsonl per rank, a JSON record per step, block and layer with each token's
// top-k expert ids), from per-step, per-layer expert counts: what the tests replay.
#pragma once
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "core/workload/workload.h"

namespace memfine::test_util {

// counts[step][layer][expert] add up to ranks x tokens x topk each; no expert over ranks x tokens.
// Decoder layers are numbered from `first_layer`; `mtp` adds an MTP module's record a step.
inline void write_megatron_trace(const std::string& dir, const std::vector<std::vector<std::vector<int64_t>>>& counts,
                                 int64_t ranks, int64_t tokens, int64_t topk, int64_t first_layer = 1,
                                 bool mtp = false) {
  const int64_t all = ranks * tokens;
  std::vector<std::ofstream> out;
  for (int64_t r = 0; r < ranks; ++r) out.emplace_back(dir + "/router_trace_rank" + std::to_string(r) + ".jsonl");
  for (size_t step = 0; step < counts.size(); ++step) {
    for (size_t layer = 0; layer < counts[step].size(); ++layer) {
      // The suite's own assignment: each token's distinct top-k realising the counts exactly.
      const at::Tensor ids = assign_experts(counts[step][layer], all, topk, 1000 * step + layer);
      const auto id = ids.accessor<int64_t, 2>();
      for (int64_t r = 0; r < ranks; ++r) {
        std::string rows;
        for (int64_t t = r * tokens; t < (r + 1) * tokens; ++t) {
          rows += rows.empty() ? "[" : ",[";
          for (int64_t k = 0; k < topk; ++k) rows += (k ? "," : "") + std::to_string(id[t][k]);
          rows += "]";
        }
        out[size_t(r)] << "{\"step\": " << step << ", \"stage\": \"pre_dispatch\", \"block\": \"decoder\", \"layer\": "
                       << first_layer + int64_t(layer) << ", \"rank\": " << r << ", \"num_tokens\": " << tokens
                       << ", \"topk\": " << topk << ", \"top_indices\": [" << rows << "]}\n";
        if (mtp && layer + 1 == counts[step].size())
          out[size_t(r)] << "{\"step\": " << step << ", \"stage\": \"pre_dispatch\", \"block\": \"mtp\", \"layer\": 1, "
                         << "\"mtp_idx\": 0, \"rank\": " << r << ", \"num_tokens\": " << tokens << ", \"topk\": " << topk
                         << ", \"top_indices\": [" << rows << "]}\n";
      }
    }
  }
}

}  // namespace memfine::test_util
