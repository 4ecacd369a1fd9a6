// The pipeline for `memfine project`: what each pipeline rank holds of the model (its layers, MTP
// modules, the embedding, the output layer with the loss), by Megatron's layout string or an even
// split, and the bubble: with p stages, m micro-batches per step and v virtual stages per rank
// (interleaved 1F1B; v = 1 is plain 1F1B), each rank idles (p-1)/v micro-batch times of forward and
// backward per step (Narayanan et al., SC'21, section 2.2).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/config/config.h"
#include "core/project/parallel.h"

namespace memfine {

// One pipeline rank's part of the model, over all its virtual stages.
struct RankShape {
  int64_t dense = 0, moe = 0;  // decoder layers: the leading dense ones, then MoE
  int64_t mtp = 0;             // multi-token prediction modules
  bool embedding = false;      // the input embedding
  bool loss = false;           // the final norm, the output layer and the loss (and MTP's logits)
  int64_t layers() const { return dense + moe; }
};

// Megatron's --pipeline-model-parallel-layout (PipelineParallelLayerLayout.parse_str_to_list,
// megatron/core/transformer/pipeline_parallel_layer_layout.py): virtual stages split by "|", "E"
// the embedding, "t" a decoder layer, "m" an MTP module, "L" the loss; "(...)*n" and "x*n" repeat,
// commas are cosmetic. Fills `stages` with each virtual stage's letters; returns why the text is
// not one ("" when it is).
std::string parse_pipeline_layout(const std::string& text, std::vector<std::string>& stages);

// Why `layout` cannot lay out `m` on `l`'s PP x VPP ("" when it can, or when `layout` is empty):
// its stage count, its decoder layers and MTP modules, one embedding first and one loss last.
std::string pipeline_layout_problem(const ModelConfig& m, const Layout& l, const std::string& layout);

// Each PP rank's part. Virtual stage i runs on rank i mod PP (Megatron's order). With no layout
// string, the decoder layers fill PP x VPP virtual stages in order, ceil(layers / stages) each,
// the last ones shorter; the embedding on the first, the MTP modules and the loss on the last.
// Throws std::invalid_argument for a layout pipeline_layout_problem refuses.
std::vector<RankShape> rank_shapes(const ModelConfig& m, const Layout& l, const std::string& layout);

// Megatron's warmup: the forward passes (virtual-stage micro-batches) pipeline rank `rank` runs before
// its first backward (schedules.py get_pp_rank_microbatches): PP - rank - 1 in 1F1B, interleaved
// 2 (PP - rank - 1) + (VPP - 1) PP; the all-to-all overlap schedules one forward more.
int64_t warmup_passes(const Layout& l, int64_t rank, bool ep_overlap);

// The idle time per step, from the time of one micro-batch's forward and backward on one stage.
double pipeline_bubble_time(int64_t stages, int64_t virtual_stages, double micro_batch_time);
// Uneven ranks: the first micro-batch's forward and the last one's backward pass through every
// rank while the slowest waits; (sum - max) / v of their micro-batch times (equal ones: the above).
// Exact in 1F1B where the last rank (the output layer's) is the slowest; long where another is.
double pipeline_bubble_time(const std::vector<double>& rank_micro_batch_time, int64_t virtual_stages);
// The bubble's share of the step: (p-1)/v / (m + (p-1)/v).
double pipeline_bubble_fraction(int64_t stages, int64_t virtual_stages, int64_t micro_batches);

}  // namespace memfine
