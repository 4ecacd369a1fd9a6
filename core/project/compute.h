// One micro-batch's compute on one pipeline rank, by part (core/project/step_time.h puts the step
// together from it): the dense GEMMs by shape, attention by head dim, the grouped expert GEMMs by
// rows per expert, the memory-bound kernels at the HBM rate, and what the framework's
// --recompute-modules run again for backward.
#pragma once
#include <string>

#include "core/moe/shape.h"
#include "core/project/layout.h"
#include "core/project/pipeline.h"

namespace memfine {

// What one pipeline rank runs of the model per micro-batch (core/project/pipeline.h): layers with
// attention (decoder layers and MTP modules), the dense ones, the MoE ones (MTP modules count as
// MoE layers), MTP's projections and the output layers (the model's and, where the loss is, one per
// MTP module: Megatron's postprocess computes their logits beside the model's).
struct Stage {
  double layers = 0, dense = 0, moe = 0, mtp = 0, heads = 0;
};
Stage stage_of(const ModelConfig& m, const RankShape& r);

// Whether the shape runs the MoE's forward again for backward (its layer recomputed whole, or the
// MoE as a block or in chunks).
bool replays_moe(const StrategyShape& s);
// MemFine's chunks run the MoE's kernels once a chunk.
double moe_runs(const StrategyShape& s);
// Whether the model's attention runs at the preset's sink curve: learnable sinks, a framework that
// runs Transformer Engine's kernel for them and a preset that measured it.
bool on_sink_curve(const ModelConfig& m, const Hardware& hw, const ProjectSetting& set);
// Whether the attention core runs at the preset's FlexAttention curve: the file says FlexAttention
// and the preset measured it (check.cpp refuses a head dim it did not).
bool on_flex_curve(const Hardware& hw, const ProjectSetting& set);
// The attention core's rate (FLOP/s): FlexAttention's curve where the framework runs it, else the
// attention kernel's (its sink curve for a model with sinks where the framework runs that).
double core_attention_rate(const ModelConfig& m, const Hardware& hw, const ProjectSetting& set);
// Whether torchtitan's per-op selective checkpointing runs: the framework says so and the shape keeps
// its layers and its MoE whole (one that recomputes them leaves it nothing to choose).
bool op_level_checkpointing(const ProjectSetting& set, const StrategyShape& s);
// Whether the framework's all-to-all dispatcher sorts received rows by local expert (and back).
bool sorts_rows(const ProjectSetting& set);

// One micro-batch's compute on one stage (the model's work spread over the stages), by part.
struct Compute {
  double total = 0;    // dense and grouped GEMMs, attention, memory-bound kernels
  double chunk = 0;    // of it, what MemFine's chunks add: the expert GEMMs at fewer rows per expert
  double experts = 0;  // the routed experts' GEMMs and their rows' memory-bound kernels
  double act_hbm = 0;  // SiLU(a) * b of the routed rows recomputed, at the HBM rate
  double dense = 0;    // the dense GEMMs (attention projections, dense and shared FFNs, the head)
  // Of total, backward's alone: the experts' weight gradients' accumulation into the gradient buffer
  // where it outlasts their products (a recomputed forward does not run it).
  double accumulate = 0;
  // What the framework's --recompute-modules run again for backward (none where the shape
  // recomputes the layer whole), and the kernels the host launches for it.
  double modules_again = 0, modules_launches = 0;
  // One forward of it: a third of the passes (forward, and backward's two), less the accumulation.
  double forward() const { return (total - accumulate) / 3; }
  // How it was priced, as the projection's notes say it: the rates taken, the memory-bound kernels
  // counted.
  std::string note;
};
// `received`: the hottest rank's routed rows per micro-batch.
Compute compute_of(const ModelConfig& m, const Hardware& hw, const Layout& l, const Stage& st,
                   const StrategyShape& s, const ProjectSetting& set, double received);

// The rows each local expert's GEMMs run at on the rank that receives `received` rows a micro-batch:
// its share of them, over the chunks where the MoE runs in chunks.
double expert_gemm_rows(const ModelConfig& m, const Layout& l, const StrategyShape& s, double received);

}  // namespace memfine
