// memfine project's framework profiles and terms: what each framework keeps, worked by hand from
// the code the profile names; the terms a run can change (loss, optimizer dtypes, workspace,
// fragmentation) and the borderline verdict; the routing's worst layer for one layer's memory, the
// share the rank keeping the most holds for the rows kept, and the layers' mean for time.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "core/project/config.h"
#include "core/model/flops.h"
#include "core/project/profile.h"
#include "core/project/project.h"
#include "core/project/rates.h"
#include "core/strategy/registry.h"
#include "scratch.h"

namespace memfine {
namespace {

std::unique_ptr<Strategy> strategy(const std::string& label) { return make_strategy(*parse_label(label)); }

// Qwen3-30B-A3B's shape: h 2048, 32 query and 4 key-value heads of 128, per-head q/k norms, 128
// experts of 768, top 8.
ModelConfig qwen3_30b() {
  ModelConfig m;
  m.layers = 48, m.hidden = 2048, m.heads = 32, m.kv_heads = 4, m.head_dim = 128, m.ffn_hidden = 768;
  m.experts = 128, m.topk = 8, m.vocab = 151936, m.seq = 4096, m.qk_norm = true;
  return m;
}

// Megatron-Core with TE, bf16, no recomputation, by hand from the files profile_megatron.cpp and
// profile_te.cpp name. Per token: the layer input and the fused norm's output (2h), q, k, v and the
// core's output (2 x 4096 + 2 x 512), the q/k norms' inputs (4096 + 512), all bf16; rsigma, 32
// softmax statistics and the q/k norms' 36 rsigma in fp32; the MoE norm's input and output (2h
// bf16, 1 fp32); the router's 2E fp32 and E routing-map bytes; the permutation map's 2E + 1 int32.
// Per routed row: fc1's input (h), z (2F), fc2's input (F) in bf16, a probability and a row index.
TEST(Framework, MegatronKeepsWhatItsCodeSaves) {
  const ModelConfig m = qwen3_30b();
  const StrategyShape none;
  const LayerWidths w = layer_widths(Profile::MegatronTe, m, none, 2);
  const double attention = 2 * (2 * 2048 + 2 * 4096 + 2 * 512 + 4096 + 512) + 4 * (1 + 32 + 36);
  const double moe_token = 2 * (2 * 2048) + 4 * 1 + 4 * 2 * 128 + 128 + 4 * (2 * 128 + 1);
  EXPECT_DOUBLE_EQ(w.token, attention + moe_token);
  EXPECT_DOUBLE_EQ(w.row, 2 * (2048 + 3 * 768) + 4 + 4);
  EXPECT_EQ(w.token_again, 0);
  // moe_act discards fc2's input (F a row); full recomputation keeps the layer's input alone and
  // holds one layer's whole again in its backward; `moe` keeps the block's input (the norm's
  // output) and the norm's own input.
  StrategyShape act;
  act.experts = ExpertStorage::ActRecomputed;
  EXPECT_DOUBLE_EQ(layer_widths(Profile::MegatronTe, m, act, 2).row, w.row - 2 * 768);
  StrategyShape full;
  full.recompute_layer = true;
  const LayerWidths f = layer_widths(Profile::MegatronTe, m, full, 2);
  EXPECT_DOUBLE_EQ(f.token, 2 * 2048);
  EXPECT_EQ(f.row, 0);
  EXPECT_DOUBLE_EQ(f.token_again, w.token);
  EXPECT_DOUBLE_EQ(f.row_again, w.row);
  StrategyShape block;
  block.moe = MoeMode::RecomputedBlock;
  const LayerWidths b = layer_widths(Profile::MegatronTe, m, block, 2);
  EXPECT_DOUBLE_EQ(b.token, attention + 2 * (2 * 2048) + 4);
  EXPECT_DOUBLE_EQ(b.token + b.token_again, w.token);
  // NeMo AutoModel keeps the same routed rows but eager shared and dense MLPs (4 widths) and its
  // gate's softmax and top-k; this suite's layer keeps the paper's Eq. 2 s term and 3h + 4g a row.
  EXPECT_DOUBLE_EQ(layer_widths(Profile::FsdpTe, m, none, 2).row, 2 * (2048 + 3 * 768) + 4);
  const LayerWidths mine = layer_widths(Profile::Memfine, m, none, 2);
  EXPECT_DOUBLE_EQ(mine.row, 2 * (3 * 2048 + 4 * 768));
  EXPECT_DOUBLE_EQ(mine.token, 2 * (5 * 2048 + 4096 + 2 * 512 + 128));
}

// torchtitan's layers at 36a4b6942, by hand from what profile_torchtitan.cpp names, Qwen3-30B's
// shape. Per token: the input norm's input and output (2h bf16) and rstd; the q/k norms' inputs
// ((32 + 4) x 128) and rstd; q, k and v repeated over 32 heads and the output (4 x 4096); 32
// logsumexp; the MoE norm's input, output and rstd; the router's fp32 scores (E); for each of the 8
// assignments an fp32 copy of the expert's output (h), three int64 indices and an fp32 score. Per
// received row: the permuted input, SiLU's input and output, h3 and the product (h + 4F) and an
// int32 index. Op-level checkpointing keeps the layer's input, wq's and wv's outputs (the first and
// third linears), the attention's output and logsumexp and the all-to-alls' outputs.
TEST(Framework, TorchtitanKeepsWhatItsCodeSaves) {
  const ModelConfig m = qwen3_30b();
  const StrategyShape none;
  const LayerWidths w = layer_widths(Profile::Torchtitan, m, none, 2);
  const double attention = 2 * 2 * 2048 + 4 + 2 * 36 * 128 + 4 * 36 + 2 * 4 * 4096 + 4 * 32;
  const double moe_token = 2 * 2 * 2048 + 4 + 4 * 128 + 8 * (4 * 2048 + 3 * 8 + 4);
  EXPECT_DOUBLE_EQ(w.token, attention + moe_token);
  EXPECT_DOUBLE_EQ(w.row, 2 * (2048 + 4 * 768) + 4);
  StrategyShape full;
  full.recompute_layer = true;
  EXPECT_DOUBLE_EQ(layer_widths(Profile::Torchtitan, m, full, 2).token, 2 * 2048);
  const LayerWidths op = layer_widths(Profile::Torchtitan, m, none, 2, {{}, false, true});
  const double kept = 2 * 2048 + 2 * (4096 + 512) + 2 * 4096 + 4 * 32 + 8 * 2 * 2048;
  EXPECT_DOUBLE_EQ(op.token, kept);
  EXPECT_DOUBLE_EQ(op.row, 2 * 2048);
  EXPECT_DOUBLE_EQ(op.token + op.token_again, w.token);
  EXPECT_DOUBLE_EQ(op.row + op.row_again, w.row);
  // A strategy that recomputes the layer leaves nothing for the per-op policy.
  EXPECT_DOUBLE_EQ(layer_widths(Profile::Torchtitan, m, full, 2, {{}, false, true}).token, 2 * 2048);
  // Through DeepEP the scores weigh the rows on the expert's side: a token keeps its top-k indices
  // alone; a row its bf16 output and score beside the expert's set and three int64 indices, unpadded.
  const LayerWidths deepep = layer_widths(Profile::Torchtitan, m, none, 2, {{}, false, false, true, true});
  EXPECT_DOUBLE_EQ(deepep.token, attention + 2 * 2 * 2048 + 4 + 4 * 128 + 8 * 8);
  EXPECT_DOUBLE_EQ(deepep.row, 2 * (2048 + 4 * 768) + 2 * (2048 + 1) + 3 * 8);
  // Its combine returns a token once: op-level checkpointing keeps one row of h a token for it.
  EXPECT_DOUBLE_EQ(layer_widths(Profile::Torchtitan, m, none, 2, {{}, false, true, true, true}).token,
                   kept - 7 * 2 * 2048);
  // Before torchtitan's list kept the all-to-alls (its PR 1672), a routed row kept nothing and a
  // token no combined rows.
  const LayerWidths before = layer_widths(Profile::Torchtitan, m, none, 2, {{}, false, true, false});
  EXPECT_DOUBLE_EQ(before.token, kept - 8 * 2 * 2048);
  EXPECT_DOUBLE_EQ(before.row, 0);
  EXPECT_DOUBLE_EQ(before.row + before.row_again, w.row);
}

RecomputedModules modules(bool layernorm, bool mla_up_proj, bool mlp, bool core_attn) {
  RecomputedModules r;
  r.layernorm = layernorm, r.mla_up_proj = mla_up_proj, r.mlp = mlp, r.core_attn = core_attn;
  return r;
}

// Megatron's --recompute-modules layernorm: a norm that is a module of its own keeps its input but
// not its output (h bf16) or rsigma (fp32), which its layer's backward holds again. In Qwen3's
// layer that is the MoE norm alone (the attention's is fused into linear_qkv); MLA's input norm is
// one too, in dense layers as in MoE ones. A layer recomputed whole is as it was.
TEST(Framework, LayernormRecomputationLetsTheUnfusedNormsGo) {
  const ModelConfig m = qwen3_30b();
  const double norm = 2 * 2048 + 4;
  const RecomputedModules norms = modules(true, false, false, false);
  const StrategyShape none;
  const LayerWidths w = layer_widths(Profile::MegatronTe, m, none, 2);
  const LayerWidths n = layer_widths(Profile::MegatronTe, m, none, 2, {norms});
  EXPECT_DOUBLE_EQ(n.token, w.token - norm);
  EXPECT_DOUBLE_EQ(n.token_again, norm);
  EXPECT_DOUBLE_EQ(n.row, w.row);
  EXPECT_DOUBLE_EQ(n.dense, w.dense);
  StrategyShape block;
  block.moe = MoeMode::RecomputedBlock;
  const LayerWidths b = layer_widths(Profile::MegatronTe, m, block, 2);
  const LayerWidths nb = layer_widths(Profile::MegatronTe, m, block, 2, {norms});
  EXPECT_DOUBLE_EQ(nb.token, b.token - norm);
  EXPECT_DOUBLE_EQ(nb.token_again, b.token_again + norm);
  StrategyShape full;
  full.recompute_layer = true;
  EXPECT_DOUBLE_EQ(layer_widths(Profile::MegatronTe, m, full, 2, {norms}).token_again,
                   layer_widths(Profile::MegatronTe, m, full, 2).token_again);
  ModelConfig mla = m;
  mla.attention = "mla", mla.q_lora_rank = 512, mla.kv_lora_rank = 256, mla.rope_head_dim = 64;
  EXPECT_DOUBLE_EQ(layer_widths(Profile::MegatronTe, mla, none, 2, {norms}).token,
                   layer_widths(Profile::MegatronTe, mla, none, 2).token - 2 * norm);
  EXPECT_DOUBLE_EQ(layer_widths(Profile::MegatronTe, mla, none, 2, {norms}).dense,
                   layer_widths(Profile::MegatronTe, mla, none, 2).dense - norm);
}

// The other modules, by hand from the code profile_megatron.cpp names. mla_up_proj: MLA's q, k and
// v after the up-projections (32 heads: q and k of head dim 128, v of 128) in MoE and dense layers,
// nothing for GQA. mlp: a dense layer's MLP keeps only its input (its fused norm's output and
// rsigma, z and fc2's input go: h + 3 x 1024 bf16 and 4 bytes), a MoE layer as it was. core_attn:
// the softmax statistics (32 fp32) go; the backward holds them and another core output again.
TEST(Framework, EachRecomputedModuleLetsGoWhatItsCodeSays) {
  ModelConfig m = qwen3_30b();
  m.dense_layers = 1, m.dense_ffn_hidden = 1024;
  ModelConfig mla = m;
  mla.attention = "mla", mla.q_lora_rank = 512, mla.kv_lora_rank = 256, mla.rope_head_dim = 64;
  const StrategyShape none;
  auto widths = [&](const ModelConfig& x, const RecomputedModules& r) {
    return layer_widths(Profile::MegatronTe, x, none, 2, {r});
  };
  const RecomputedModules off = modules(false, false, false, false);
  const double qkv = 2 * 32.0 * (2 * 128 + 128);
  const LayerWidths up = widths(mla, modules(false, true, false, false)), mla_plain = widths(mla, off);
  EXPECT_DOUBLE_EQ(up.token, mla_plain.token - qkv);
  EXPECT_DOUBLE_EQ(up.dense, mla_plain.dense - qkv);
  EXPECT_DOUBLE_EQ(up.token_again, qkv);
  EXPECT_DOUBLE_EQ(widths(m, modules(false, true, false, false)).token, widths(m, off).token);
  const LayerWidths mlp = widths(m, modules(false, false, true, false)), plain = widths(m, off);
  EXPECT_DOUBLE_EQ(mlp.dense, plain.dense - (2 * (2048 + 3 * 1024) + 4));
  EXPECT_DOUBLE_EQ(mlp.dense_again, 2 * (2048 + 3 * 1024) + 4);
  EXPECT_DOUBLE_EQ(mlp.token, plain.token);
  const LayerWidths core = widths(m, modules(false, false, false, true));
  EXPECT_DOUBLE_EQ(core.token, plain.token - 4 * 32);
  EXPECT_DOUBLE_EQ(core.dense, plain.dense - 4 * 32);
  EXPECT_DOUBLE_EQ(core.token_again, 4 * 32 + 2 * 32 * 128);
  // Together, each lets go its own.
  const LayerWidths all = widths(mla, modules(true, true, true, true));
  EXPECT_DOUBLE_EQ(all.token, mla_plain.token - 2 * (2 * 2048 + 4) - qkv - 4 * 32);
}

// The loss at its peak: bf16 logits and their fp32 softmax; two bf16 vocabulary-wide tensors; or
// a chunked loss's fp32 hidden-state gradient and one of 8 chunks.
TEST(Framework, TheLossByWhatItKeeps) {
  const ModelConfig m = qwen3_30b();
  EXPECT_DOUBLE_EQ(loss_bytes_per_token(m, Loss::VocabFp32, 2), 6.0 * 151936);
  EXPECT_DOUBLE_EQ(loss_bytes_per_token(m, Loss::VocabBf16, 2), 4.0 * 151936);
  EXPECT_DOUBLE_EQ(loss_bytes_per_token(m, Loss::Chunked, 2), 4.0 * 2048 + 6.0 * 151936 / 8);
}

const std::string kExperiments = std::string(MEMFINE_TESTS_DIR) + "/../experiments";

// A project file written here, loaded as `memfine project` loads it; removed after.
ProjectConfig load(const std::string& text) {
  const std::string file = test_util::scratch_root() + "/framework_project.yaml";
  std::ofstream(file) << text;
  try {
    ProjectConfig c = load_project(file, kExperiments + "/project");
    std::remove(file.c_str());
    return c;
  } catch (...) {
    std::remove(file.c_str());
    throw;
  }
}

const char* kBase =
    "model: qwen3_30b_a3b\nhardware: h100_80gb\ngpus: 16\nglobal_batch: 1024\nimbalance: {overload: 1}\n"
    "search: {tp: [1], pp: [1], ep: [16], cp: [1], micro_batch: [1], vpp: [1]}\n";

// What the process needs is the allocator's reserve over the tensors plus what it holds beside;
// a need within the margin (a share of the peak) of the limit is borderline, either side.
TEST(Framework, NeedAndTheBorderline) {
  const ProjectConfig c =
      load(std::string(kBase) + "strategies: [no_recompute]\nusable_memory: 1.0\n"
                                "framework: {name: megatron_te, workspace_gb: 2, fragmentation: 0.1, margin: 0.05}\n");
  const ProjectResult r = run_project(c);
  const Estimate& e = r.ranked.empty() ? r.rejected.front() : r.ranked.front();
  EXPECT_NEAR(e.reserved_gb, 1.1 * e.peak_gb, 1e-9);
  EXPECT_NEAR(e.need_gb, e.reserved_gb + 2, 1e-9);
  const double limit = 80, margin = 0.05 * e.peak_gb;
  EXPECT_EQ(e.fits, e.need_gb <= limit);
  EXPECT_EQ(e.fit, e.need_gb > limit + margin ? "no" : e.need_gb < limit - margin ? "yes" : "borderline");
  // Moving the limit across the need moves the verdict through borderline.
  ProjectConfig tight = c;
  for (double usable : {e.need_gb / 80 * 1.2, e.need_gb / 80 * 1.001, e.need_gb / 80 * 0.999})
    if (usable <= 1) {
      tight.usable_memory = usable;
      const ProjectResult t = run_project(tight);
      const Estimate& x = t.ranked.empty() ? t.rejected.front() : t.ranked.front();
      EXPECT_EQ(x.fit, usable > e.need_gb / 80 * 1.1 ? "yes" : "borderline") << usable;
    }
}

// The layernorm recomputation in a projection: less memory, and each of Qwen3-30B's 48 MoE norms run
// again a micro-batch (64 of them a step), reading and writing 4096 tokens x h bf16 at the HBM rate.
TEST(Framework, LayernormRecomputationTradesMemoryForANormPass) {
  const std::string s = std::string(kBase) + "strategies: [moe_act_recompute]\n";
  const Estimate plain = run_project(load(s)).ranked.front();
  const Estimate norms = run_project(load(s + "framework: {recompute_modules: [layernorm]}\n")).ranked.front();
  EXPECT_LT(norms.activation_gb, plain.activation_gb);
  const double pass = 48 * 4096 * 2 * 2048 * 2 / 2900e9;
  EXPECT_NEAR(norms.recompute - plain.recompute, 64 * pass, 1e-12);
  // core_attn runs each layer's attention core forward again: a third of its forward and backward.
  const ProjectConfig c = load(s + "framework: {recompute_modules: [core_attn]}\n");
  const Estimate core = run_project(c).ranked.front();
  const double forward = 48 * 4096 * attention_core_flops(c.model) / attention_rate(c.hardware, 128);
  EXPECT_NEAR(core.recompute - plain.recompute, 64 * forward, 1e-9 * core.recompute);
  // Its memory: each of the 48 layers lets go 32 fp32 statistics a token, and the layer whose
  // backward runs holds them and another bf16 core output (32 x 128) again: more than it saves here,
  // as with any fused attention kernel, whose saved tensors are its inputs and output.
  EXPECT_NEAR(core.activation_gb - plain.activation_gb, 4096.0 * (4 * 32 + 2 * 32 * 128 - 48 * 4 * 32) / 1e9, 1e-12);
  // Qwen3-30B has no dense layer and no MLA: mlp and mla_up_proj change nothing.
  const Estimate none = run_project(load(s + "framework: {recompute_modules: [mlp, mla_up_proj]}\n")).ranked.front();
  EXPECT_EQ(none.recompute, plain.recompute);
  EXPECT_EQ(none.activation_gb, plain.activation_gb);
}

// The distributed optimizer's bytes a parameter: bf16 weights and the gradient buffer whole, fp32
// master weights and Adam's two moments sharded over DP: 6 + 12/d by default, 4 + 8/d with bf16
// gradients and moments. At EP 16 of 16 GPUs the experts' data-parallel group is 1.
TEST(Framework, OptimizerDtypesSetTheStaticBytes) {
  const std::string s = std::string(kBase) + "strategies: [no_recompute]\n";
  const Estimate fp32 = run_project(load(s)).ranked.front();
  const Estimate bf16 =
      run_project(load(s + "framework: {name: megatron_te, grad_dtype: bf16, moment_dtype: bf16}\n")).ranked.front();
  // Per GPU: 1.81e9 expert parameters (48 layers x 8 local experts x 3 x 2048 x 768) at 18 and 12
  // bytes; the rest at 6 + 12/16 and 4 + 8/16.
  const double experts = 48.0 * 8 * 3 * 2048 * 768;
  const double rest_fp32 = fp32.static_gb * 1e9 - experts * 18, rest_bf16 = bf16.static_gb * 1e9 - experts * 12;
  EXPECT_NEAR((rest_fp32 - 4 * 33554432.0 - 4096) / (rest_bf16 - 4 * 33554432.0 - 4096), 6.75 / 4.5, 1e-9);
}

// Under a routing law, time is the mean over the layers of each layer's hottest rank (each layer
// waits for its own); what a rank keeps is the sum over its layers, so the rank keeping the most
// holds its layers' mean share (`held`: the worst for one layer, less over more layers, never below
// balanced); one layer's working set is the worst layer's. Given outright, the factor is all three.
TEST(Framework, WorstLayerHeldLayersAndMeanForTime) {
  ProjectConfig c = load(std::string(kBase) + "strategies: [no_recompute]\n");
  c.imbalance.kind = "lognormal", c.imbalance.sigma = 0.77, c.overload = 0;
  const Overload o = project_overload(c, 16);
  EXPECT_GT(o.worst, o.mean);
  EXPECT_GT(o.mean, 1);
  ASSERT_EQ(o.shares.size(), size_t(48));
  EXPECT_DOUBLE_EQ(o.held(1), o.worst);
  EXPECT_LT(o.held(48), o.mean);
  EXPECT_GT(o.held(48), 1);
  EXPECT_LE(o.held(48), o.held(12));  // a pipeline rank of 12 layers averages fewer draws
  double by_hand = 1;                 // the stack's largest rank mean, summed here
  for (size_t r = 0; r < 16; ++r) {
    double sum = 0;
    for (const auto& layer : o.shares) sum += layer[r];
    by_hand = std::max(by_hand, sum / 48);
  }
  EXPECT_NEAR(o.held(48), by_hand, 1e-12);
  // The rows a law's rank keeps are priced at the held share: between balanced and the worst layer's.
  auto first_of = [](const ProjectResult& r) { return r.ranked.empty() ? r.rejected.front() : r.ranked.front(); };
  const Estimate law = first_of(run_project(c));
  EXPECT_NEAR(law.held_overload, o.held(48), 1e-12);
  ProjectConfig at_worst = c, at_held = c;
  at_worst.overload = o.worst, at_held.overload = o.held(48);
  EXPECT_LT(law.activation_gb, first_of(run_project(at_worst)).activation_gb);
  EXPECT_NEAR(law.activation_gb, first_of(run_project(at_held)).activation_gb, 1e-9);  // nothing held again
  // Where a layer's backward holds its rows again (recomputed), it does so at the worst layer's.
  ProjectConfig again = load(std::string(kBase) + "strategies: [moe_recompute]\n");
  again.imbalance = c.imbalance, again.overload = 0;
  ProjectConfig again_held = again;
  again_held.overload = o.held(48);
  EXPECT_GT(first_of(run_project(again)).activation_gb, first_of(run_project(again_held)).activation_gb);
  c.overload = 1.5;
  const Overload given = project_overload(c, 16);
  EXPECT_EQ(given.worst, 1.5);
  EXPECT_EQ(given.mean, 1.5);
  EXPECT_EQ(given.held(48), 1.5);
  // Both given (as a measured run gives them): the rows kept and the step's time from the mean (which
  // bounds what any rank holds over its layers), one layer's backward from the worst.
  auto with = [](const std::string& imbalance) {
    std::string t = std::string(kBase) + "strategies: [no_recompute]\n";
    return t.replace(t.find("{overload: 1}"), 13, imbalance);
  };
  const ProjectConfig m = load(with("{overload: 2, mean: 1.5}"));
  EXPECT_EQ(project_overload(m, 16).worst, 2);
  EXPECT_EQ(project_overload(m, 16).mean, 1.5);
  EXPECT_EQ(project_overload(m, 16).held(48), 1.5);
  auto first = [](const ProjectResult& r) { return r.ranked.empty() ? r.rejected.front() : r.ranked.front(); };
  const Estimate e = first(run_project(m)), worst = first(run_project(load(with("{overload: 2}"))));
  ASSERT_GT(e.step, 0);
  EXPECT_LT(e.peak_gb, worst.peak_gb);
  EXPECT_EQ(e.peak_gb, first(run_project(load(with("{overload: 1.5}")))).peak_gb);  // nothing held again
  EXPECT_LT(e.step, worst.step);
  // A mean above the worst layer's is refused at its line.
  try {
    load(with("{overload: 2, mean: 3}"));
    FAIL() << "accepted";
  } catch (const std::invalid_argument& x) {
    EXPECT_NE(std::string(x.what()).find("imbalance.mean: the layers' mean overload cannot exceed"), std::string::npos)
        << x.what();
  }
}

// The framework as a name or a map; a wrong name is refused at its line.
TEST(Framework, ANameOrAMapAndAWrongOneAtItsLine) {
  EXPECT_EQ(load(std::string(kBase) + "framework: fsdp_te\n").framework.name, Framework::FsdpTe);
  EXPECT_TRUE(load(std::string(kBase) + "framework: {name: torchtitan, selective_op: true}\n").framework.selective_op);
  EXPECT_TRUE(load(std::string(kBase) + "framework: {name: megatron_te, ep_overlap: true}\n").framework.ep_overlap);
  try {
    load(std::string(kBase) + "framework: deepspeed\n");
    FAIL() << "accepted";
  } catch (const std::invalid_argument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("framework_project.yaml:7: framework"), std::string::npos) << m;
  }
  try {
    load(std::string(kBase) + "framework: {name: megatron_te, los: chunked}\n");
    FAIL() << "accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("framework.los"), std::string::npos) << e.what();
  }
  // Only Megatron-Core recomputes its norms alone; another framework's file is refused at the key.
  EXPECT_EQ(load(std::string(kBase) + "framework: {recompute_modules: [layernorm, mlp]}\n").framework.recompute_modules,
            (std::vector<std::string>{"layernorm", "mlp"}));
  const std::vector<std::pair<std::string, std::string>> refused = {
      {"{name: fsdp_te,\n  recompute_modules: [layernorm]}", ":8: framework.recompute_modules: Megatron-Core's"},
      {"{name: megatron_te,\n  selective_op: true}", ":8: framework.selective_op: torchtitan's option"},
      {"{name: torchtitan,\n  selective_op_all_to_all: false}", ":8: framework.selective_op_all_to_all: says what"},
      {"{recompute_modules: [moe_act]}", ":7: framework.recompute_modules: moe_act is a strategy here"},
      {"{recompute_modules: [layernorm, norms]}", ":7: framework.recompute_modules: no module 'norms'"},
      {"{recompute_modules: [mlp, mlp]}", ":7: framework.recompute_modules: mlp given twice"},
      {"{recompute_modules: layernorm}", ":7: framework.recompute_modules: expected a list"}};
  for (const auto& [value, says] : refused) try {
      load(std::string(kBase) + "framework: " + value + "\n");
      ADD_FAILURE() << value << " accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("framework_project.yaml" + says), std::string::npos) << e.what();
    }
  // The overlap's hidden share: the file's where given, a share, else the framework's measured one.
  EXPECT_EQ(load(std::string(kBase) + "framework: {ep_overlap: true, ep_overlap_hidden: 0.5}\n")
                .framework.ep_overlap_hidden,
            0.5);
  try {
    load(std::string(kBase) + "framework: {ep_overlap: true, ep_overlap_hidden: 1.5}\n");
    FAIL() << "accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("framework_project.yaml:7: framework.ep_overlap_hidden"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace memfine
