// A routing trace to replay, parsed: this suite's CSV (`layer,expert,tokens` or
// `step,layer,expert,tokens`, what `memfine train --trace-out` writes) or Megatron-Core's router
// trace (--moe-routing-trace-path: one router_trace_rank{r}.jsonl per rank, one record per step,
// block and layer with each token's top-k expert ids), a file or the folder that holds them,
// told apart by content.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace memfine {

// One step's layer: its rows (expert, assignments), where it starts in the file.
struct LayerRows {
  std::vector<std::pair<int64_t, int64_t>> rows;
  int64_t tokens = 0;  // its assignments
  int first_line = 0;
  std::string where;   // "FILE:LINE" of its first record (Megatron's)
};

// step -> layer -> rows, in memory in proportion to the trace, and where its largest expert id is.
// A Megatron trace's decoder layers are numbered in their order (its own numbers kept in
// `layer_ids`); its MTP records are counted apart, not replayed as decoder layers.
struct ParsedTrace {
  std::map<int64_t, std::map<int64_t, LayerRows>> by_step;
  int64_t max_expert = -1;
  int max_expert_line = 0;
  std::string max_expert_where;  // "FILE:LINE" (Megatron's)
  bool megatron = false;
  int64_t topk = 0;                // Megatron's: every record's
  std::vector<int64_t> layer_ids;  // Megatron's decoder layers, in order
  int64_t ranks = 0, mtp_records = 0;
};

// Parsed once per file (or folder) and version; std::invalid_argument with "FILE:LINE: what".
const ParsedTrace& trace_of(const std::string& path);

}  // namespace memfine
