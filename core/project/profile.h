// What a decoder layer keeps for its backward at cluster scale, per token and per routed row, under
// a strategy's shape: the bytes `memfine project` multiplies by a layout's tokens and rows. A
// framework profile says it for the code a run uses:
//  * `memfine_layer`: this suite's own layer, the widths its implementation model (memory_model.h)
//    accounts to the byte at the benchmark's scale: the paper's Eq. 2 s term outside the experts,
//    and per received row the expert's input, output and weighted rows (3 h) with z = [a | b],
//    SiLU(a) and their product (4 g), fewer as the shape's expert storage keeps fewer;
//  * `megatron_te`: Megatron-Core's layers with Transformer Engine's fused kernels
//    (profile_megatron.cpp, each term's source beside it);
//  * `fsdp_te`: NeMo AutoModel's layers under FSDP2 with TE's attention and linears
//    (profile_fsdp.cpp);
//  * `torchtitan`: torchtitan's own PyTorch layers under FSDP2 (profile_torchtitan.cpp), with its
//    per-op selective checkpointing where the framework says so.
// A strategy's shape is priced in each framework's own terms: what the framework keeps when it
// stores, recomputes or offloads the same modules.
#pragma once
#include <string>

#include "core/config/config.h"
#include "core/project/config.h"
#include "core/moe/shape.h"
#include "core/project/widths.h"

namespace memfine {

// A profile is its framework's (core/project/config.h Framework).
using Profile = Framework;

// Megatron-Core's modules recomputed beside a strategy's own recomputation (RecomputedModules,
// core/project/config.h): megatron_te's profile alone has them (profile_megatron.cpp says what each
// lets go). Those that run under a shape: none where it recomputes the layer whole (Megatron
// recomputes modules only under selective granularity).
RecomputedModules recomputed_under(const RecomputedModules& again, const StrategyShape& s);

// What a run's framework settings change in its profile's widths.
struct ProfileOptions {
  RecomputedModules again;  // Megatron's --recompute-modules (megatron_te's profile alone has them)
  // The linears in FP8 (Transformer Engine's FP8 recipes): each keeps its input for backward as an
  // FP8 copy of these bytes an element, its scales' included (megatron_te's profile alone prices
  // it); 0: bf16.
  double fp8 = 0;
  bool selective_op = false;  // torchtitan's per-op selective checkpointing (its profile alone)
  bool selective_op_all_to_all = true;  // with it, the all-to-alls' outputs kept (else run again)
  bool deepep = false;        // the expert-parallel path through DeepEP (torchtitan's profile tells it apart)
  bool all_to_all = true;     // the experts spread over ranks (EP > 1): its path runs the all-to-alls
};
LayerWidths layer_widths(Profile p, const ModelConfig& m, const StrategyShape& s, double element_bytes,
                         const ProfileOptions& o = {});

// Megatron-Core's norms in a layer that are modules of their own, not fused into the next linear
// (what its layernorm recomputation runs again): a MoE layer's, and MLA's input norm.
double megatron_unfused_norms(const ModelConfig& m, bool moe_layer);

// What the loss holds per token of the last stage (split by TP) at its peak, by what it keeps:
// vocab_fp32 (bf16 logits and their fp32 softmax; Auto's), vocab_bf16 (two bf16 vocabulary-wide
// tensors), chunked (an fp32 gradient of the hidden state and one of 8 chunks' logits).
double loss_bytes_per_token(const ModelConfig& m, Loss loss, double element_bytes);

// The widths in the four profiles (profile.cpp, profile_megatron.cpp, profile_fsdp.cpp,
// profile_torchtitan.cpp).
LayerWidths memfine_widths(const ModelConfig& m, const StrategyShape& s, double kB);
LayerWidths megatron_widths(const ModelConfig& m, const StrategyShape& s, double kB,
                            const RecomputedModules& again = {}, double fp8 = 0);
LayerWidths fsdp_widths(const ModelConfig& m, const StrategyShape& s, double kB);
LayerWidths torchtitan_widths(const ModelConfig& m, const StrategyShape& s, double kB, const ProfileOptions& o);

}  // namespace memfine
