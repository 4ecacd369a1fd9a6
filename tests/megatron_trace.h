// Writes a routing trace in Megatron-Core's format (--moe-routing-trace-path: one
// router_trace_rank{r}.jsonl per rank, a JSON record per step, block and layer with each token's
// top-k expert ids), from per-step, per-layer expert counts: what the tests replay.
#pragma once
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

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
      // Slot j of the expert-sorted list is token j % all's column j / all: no token picks an expert twice.
      std::vector<std::vector<int64_t>> ids(size_t(all), std::vector<int64_t>(size_t(topk), 0));
      int64_t j = 0;
      for (size_t e = 0; e < counts[step][layer].size(); ++e)
        for (int64_t n = 0; n < counts[step][layer][e]; ++n, ++j) ids[size_t(j % all)][size_t(j / all)] = int64_t(e);
      for (int64_t r = 0; r < ranks; ++r) {
        std::string rows;
        for (int64_t t = r * tokens; t < (r + 1) * tokens; ++t) {
          rows += rows.empty() ? "[" : ",[";
          for (int64_t k = 0; k < topk; ++k) rows += (k ? "," : "") + std::to_string(ids[size_t(t)][size_t(k)]);
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
