#include <gtest/gtest.h>

#include "scratch.h"

#include <torch/version.h>

#include <fstream>
#include <iostream>

#include "core/meter/memory_meter.h"
#include "core/model/model.h"
#include "core/predict/cost_model.h"
#include "core/predict/memory_model.h"
#include "core/predict/paper_model.h"
#include "core/run/rank_step.h"
#include "core/strategy/memfine/mact.h"
#include "core/strategy/registry.h"
#include "testing.h"

using namespace memfine;
using memfine::test_util::spec;

// The implementation model against the meter: every dropless strategy, chunks 1..16, imbalanced
// and balanced routing, with and without attention and a shared expert. Target: within 5%.
// (experiments/model_accuracy.yaml runs a larger grid; paper_figures/model_error_table.md.)
TEST(MemoryModel, PredictsTheMeasuredPeakWithin5Percent) {
  MemoryMeter::get("cpu");
  // Every registered strategy the model covers, with its defaults (the tests' own included), and
  // memfine at several chunk counts; one it does not cover must say why.
  std::vector<StrategySpec> specs;
  for (const auto& [name, info] : strategy_registry()) {
    auto s = make_strategy(StrategySpec{name, {}});
    if (s->memory_shape())
      specs.push_back(spec(name));
    else
      EXPECT_FALSE(s->unmodelled_why().empty()) << name;
  }
  for (const char* c : {"2", "3", "5", "16"}) specs.push_back(spec("memfine", {{"chunks", c}}));
  for (const char* e : {"moe_act", "buffer_free"}) specs.push_back(spec("memfine", {{"chunks", "4"}, {"experts", e}}));
  // Plans mixing a layer stored whole with a chunked one (objective: time's knapsack prices them).
  for (const char* plan : {"[0, 4]", "[2, 0]"}) specs.push_back(spec("memfine", {{"chunks", plan}}));
  specs.push_back(spec("moeblaze", {{"keep_act", "true"}}));
  specs.push_back(spec("moeblaze", {{"block_rows", "16"}}));
  specs.push_back(spec("capacity", {{"capacity_factor", "1.25"}, {"pad", "true"}}));
  specs.push_back(spec("capacity", {{"capacity_factor", "0.5"}}));
  // Offloading: every module, prefetched or not, composed with moe_act and with chunks.
  const char* all = "[attn_norm, qkv_linear, core_attn, attn_proj, mlp_norm, expert_fc1, moe_act, expert_fc2]";
  specs.push_back(spec("offload", {{"modules", all}, {"prefetch", "0"}}));
  specs.push_back(spec("offload", {{"modules", all}, {"experts", "moe_act"}, {"margin", "1"}}));
  specs.push_back(spec("offload", {{"modules", all}, {"chunks", "4"}}));
  specs.push_back(spec("memfine", {{"chunks", "[0, 4]"}, {"modules", all}, {"prefetch", "0"}}));
  // 8-bit storage: each format, a scale per block of rows, composed with chunks.
  specs.push_back(spec("compress", {{"format", "fp8_e5m2"}, {"scale", "rows"}, {"rows", "16"}}));
  specs.push_back(spec("compress", {{"format", "bf16"}, {"modules", "[core_attn, expert_fc1, moe_act]"}}));
  specs.push_back(spec("compress", {{"chunks", "4"}}));
  specs.push_back(spec("offload", {{"modules", all}, {"format", "fp8_e5m2"}, {"prefetch", "0"}}));
  for (const char* s : {"full_recompute", "moe_recompute"}) specs.push_back(spec(s, {{"skip_dead", "true"}}));
  double worst = 0;
  for (const char* kind : {"balanced", "zipf"}) {
    for (const char* attention : {"gqa", "none"}) {
      ExperimentConfig c = test_util::tiny_config("float32", kind, 4);
      c.model.hidden = 64, c.model.ffn_hidden = 96, c.model.seq = 64, c.model.attention = attention;
      c.model.shared_experts = attention[0] == 'g' ? 1 : 0;
      const EmulatedRank rank = make_emulated_rank(c, -1);
      for (const auto& sp : specs) {
        const Prediction p = make_strategy(sp)->predict(c, rank);
        const int64_t measured = test_util::step_peak(c, sp);
        const double err = double(p.activation_bytes - measured) / double(measured);
        worst = std::max(worst, std::abs(err));
        EXPECT_LT(std::abs(err), 0.05) << kind << " " << attention << " " << sp.label() << ": predicted "
                                       << p.activation_bytes << ", measured " << measured << " (" << p.phase << ")";
        // Static memory is exact: it is allocated before the step from the same shapes.
        EXPECT_EQ(p.static_bytes, make_train_state(c)->static_bytes());
      }
    }
  }
  std::cout << "worst relative error: " << worst << "\n";
}

// Attention through LibTorch 2.x's fused kernel (`attention_kernel: sdpa`) keeps q, k, v, its output
// and a float32 log-sum-exp instead of the scores: the model against the meter for the strategies
// that run attention stored, recomputed and beside chunks, and the same loss and gradients as the
// eager attention's. LibTorch 1.x has no such kernel (validation refuses it there).
TEST(MemoryModel, FusedAttentionKeepsNoScores) {
  if (!fused_attention_available()) GTEST_SKIP() << "LibTorch 1.x has no scaled_dot_product_attention";
  MemoryMeter::get("cpu");
  ExperimentConfig c = test_util::tiny_config("float32", "zipf", 4);
  c.model.hidden = 64, c.model.ffn_hidden = 96, c.model.seq = 64, c.model.shared_experts = 1;
  ExperimentConfig eager = c;
  c.attention_kernel = "sdpa";
  const EmulatedRank rank = make_emulated_rank(c, -1);
  for (const auto& sp : {spec("no_recompute"), spec("full_recompute"), spec("moe_act_recompute"),
                         spec("memfine", {{"chunks", "4"}}), spec("memfine", {{"chunks", "[0, 2]"}})}) {
    const Prediction p = make_strategy(sp)->predict(c, rank);
    const int64_t measured = test_util::step_peak(c, sp);
    const double err = double(p.activation_bytes - measured) / double(measured);
    EXPECT_LT(std::abs(err), 0.05) << sp.label() << ": predicted " << p.activation_bytes << ", measured " << measured
                                   << " (" << p.phase << ")";
    std::cout << sp.label() << ": the model " << 100 * err << "% off the meter (" << p.phase << ")\n";
    EXPECT_LT(make_strategy(sp)->predict(c, rank).activation_bytes,
              make_strategy(sp)->predict(eager, rank).activation_bytes)
        << sp.label();
    EXPECT_LT(test_util::max_rel_diff(test_util::loss_and_grads(c, sp), test_util::loss_and_grads(eager, sp)), 1e-4)
        << sp.label();
  }
}

// Dispatch and combine through the fused row kernels (`kernels: fused`, the GPU's default; their
// host reference here): combine keeps no weighted copy of the rows it adds. With every expert
// local (ep 1) that copy is most of what differs from ATen's path, and the model is within 2%.
// With remote experts a stored layer keeps less than ATen's remote rows, which the model does not
// price (it keeps ATen's: at the backward's peak the measured bytes did not fall): it may read
// high there, up to 10%, never more than 5% low.
TEST(MemoryModel, FusedKernelsKeepNoWeightedCopy) {
  MemoryMeter::get("cpu");
  for (int64_t ep : {1, 4}) {
    ExperimentConfig c = test_util::tiny_config("float32", "zipf", ep);
    c.model.hidden = 64, c.model.ffn_hidden = 96, c.model.seq = 64, c.model.attention = "none";
    c.model.shared_experts = 0;
    const EmulatedRank rank = make_emulated_rank(c, -1);
    for (const auto& sp : {spec("no_recompute"), spec("full_recompute"), spec("memfine", {{"chunks", "2"}})}) {
      ExperimentConfig aten = c, fused = c;
      aten.kernels = "aten", fused.kernels = "fused";
      aten.expert_gemm = fused.expert_gemm = "loop";  // the stages' kernels: a ranged MoE has its own
      const int64_t predicted = make_strategy(sp)->predict(fused, rank).activation_bytes;
      const int64_t measured = test_util::step_peak(fused, sp);
      const double err = double(predicted - measured) / double(measured);
      EXPECT_LT(std::abs(err), ep == 1 ? 0.02 : 0.10) << "ep " << ep << " " << sp.label() << ": predicted "
                                                       << predicted << ", measured " << measured;
      EXPECT_GT(err, -0.05) << "ep " << ep << " " << sp.label();
      if (ep == 1)  // the ATen path keeps more, and the model knows it
        EXPECT_LT(predicted, make_strategy(sp)->predict(aten, rank).activation_bytes) << sp.label();
    }
  }
}

// A rank whose experts serve mostly its peers' rows (hot routing, top-2, ep 8, hidden twice the
// experts' width): each expert's loss term for its peers (PeerSink) gathers their gradients and
// multiplies, two [peer rows, hidden] tensors beside everything the forward keeps, which sets the
// recomputing strategies' peak there (the H100's gpu_model_accuracy read 5-8% low at such points
// before the model had it).
TEST(MemoryModel, ThePeersLossTermsTransientSetsAPeerHeavyRanksPeak) {
  MemoryMeter::get("cpu");
  ExperimentConfig c = test_util::tiny_config("float32", "hot", 8);
  c.model.hidden = 256, c.model.ffn_hidden = 128, c.model.experts = 16, c.model.topk = 2, c.model.seq = 256;
  c.model.heads = 4, c.model.kv_heads = 2, c.model.head_dim = 32, c.model.micro_batch = 2;
  c.model.shared_experts = 0, c.workload.alpha = 1.2;
  const EmulatedRank rank = make_emulated_rank(c, -1);
  // The stages' loop (each kernel path), and the ranged MoE, whose peers' loss term is one operator.
  for (const char* gemm : {"loop", "grouped"})
    for (const char* kernels : {"aten", "fused"})
      for (const auto& sp : {spec("full_recompute"), spec("memfine", {{"chunks", "2"}})}) {
        c.kernels = kernels, c.expert_gemm = gemm;
        const int64_t predicted = make_strategy(sp)->predict(c, rank).activation_bytes;
        const int64_t measured = test_util::step_peak(c, sp);
        EXPECT_LT(std::abs(double(predicted - measured) / double(measured)), 0.03)
            << gemm << " " << kernels << " " << sp.label() << ": predicted " << predicted << ", measured " << measured;
      }
}

// Where attention's backward sets the peak (long sequences, a narrow model), the model holds what
// is alive at the softmax's backward: the scores' gradients beside what the block saved but the
// context's and v's copies (v's gradient in their place), one mask. It read one [tokens, heads x
// head_dim] tensor and one mask high there, hidden while the MoE's backward set the peak.
TEST(MemoryModel, AttentionsBackwardPeakIsWhatItsSoftmaxHolds) {
  for (const int64_t kv : {int64_t(2), int64_t(4)})
    for (const int64_t mb : {int64_t(1), int64_t(2)})
      for (const char* gemm : {"grouped", "loop"})
        for (const char* s : {"full_recompute", "no_recompute"}) {
          ExperimentConfig c = test_util::tiny_config("float32", "zipf", 8);
          c.model.hidden = 16, c.model.heads = 4, c.model.kv_heads = kv, c.model.head_dim = 16;
          c.model.ffn_hidden = 16, c.model.experts = 16, c.model.topk = 4, c.model.seq = 256;
          c.model.micro_batch = mb, c.model.shared_experts = 0, c.expert_gemm = gemm;
          const EmulatedRank rank = make_emulated_rank(c, -1);
          const Prediction p = make_strategy(spec(s))->predict(c, rank);
          const int64_t measured = test_util::step_peak(c, spec(s));
          ASSERT_NE(p.phase.find("attention"), std::string::npos) << p.phase;
          EXPECT_NEAR(double(p.activation_bytes) / double(measured), 1.0, 0.005)
              << s << " " << gemm << " kv " << kv << " mb " << mb << ": predicted " << p.activation_bytes
              << ", measured " << measured;
        }
}

// On a GPU, ATen's softmax backward forms grad * output in a [b, heads, s, s] tensor of its own
// (softmax_backward_cuda_out; its CPU kernel does not): where attention's backward sets the peak,
// a GPU's prediction is that tensor above the CPU's. (The GPU's meter checks it:
// experiments/gpu_peak.yaml, gpu_model_accuracy.yaml.)
TEST(MemoryModel, AGpusSoftmaxBackwardHoldsOneMoreScoresTensor) {
  ExperimentConfig c = test_util::tiny_config("float32", "zipf", 4);
  c.model.seq = 256, c.model.heads = 8, c.model.kv_heads = 2, c.model.head_dim = 8, c.model.micro_batch = 1;
  c.model.attention = "gqa";
  const EmulatedRank rank = make_emulated_rank(c, -1);
  ExperimentConfig gpu = c;
  gpu.device = "cuda";
  const Prediction cpu_p = make_strategy(spec("full_recompute"))->predict(c, rank);
  const Prediction gpu_p = make_strategy(spec("full_recompute"))->predict(gpu, rank);
  ASSERT_NE(cpu_p.phase.find("attention"), std::string::npos) << cpu_p.phase;
  EXPECT_EQ(gpu_p.activation_bytes - cpu_p.activation_bytes, 4 * 8 * 256 * 256);
}

// Where LibTorch's native grouped GEMM makes the experts' weight gradients (bf16 on a GPU, 2.8+), it
// makes them in a buffer of one projection's weights before adding them (expert_wgrad: grouped); a
// GEMM per expert adds them in place (per_expert): a chunk's backward holds that buffer less. Other
// builds make them in place either way.
TEST(MemoryModel, WeightGradientsMadeInPlaceHoldNoBuffer) {
  ExperimentConfig c = test_util::tiny_config("bfloat16", "zipf", 4);
  c.model.attention = "none";
  const EmulatedRank rank = make_emulated_rank(c, -1);  // routed on the CPU: the model only reads it
  c.device = "cuda";
  ExperimentConfig in_place = c;
  in_place.expert_wgrad = "per_expert";
  const StrategySpec chunked = spec("memfine", {{"chunks", "8"}});
  const int64_t buffered = make_strategy(chunked)->predict(c, rank).activation_bytes;
  const int64_t unbuffered = make_strategy(chunked)->predict(in_place, rank).activation_bytes;
  if (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 8))
    EXPECT_LT(unbuffered, buffered);
  else
    EXPECT_EQ(unbuffered, buffered);
}

TEST(MemoryModel, PaperEquations) {
  PaperModel pm;  // DeepSeek-V3 layer shapes, bf16
  // Eq. 2's two terms: 36,864 bytes per received token-expert row, ~0.9 GB for the s part.
  EXPECT_DOUBLE_EQ(pm.bytes_per_received(), 2.0 * (2 * 7168 + 2 * 2048));
  EXPECT_NEAR(pm.activation_s_part(), 2.0 * 4096 * (5 * 7168 + 128 * 192 + 2 * 128 * 192 + 256), 1);
  pm.static_bytes = 43e9;
  const double smax = pm.s_recv_max();  // Eq. 8
  EXPECT_NEAR(pm.activation(smax) + pm.static_bytes, pm.alpha * pm.device_bytes, 1);
  EXPECT_TRUE(pm.fits(smax * 0.99));
  EXPECT_FALSE(pm.fits(smax * 1.01));
  EXPECT_TRUE(pm.fits(smax * 1.5, 2));
  // Eq. 9 and the bins, by MACT's rule: the smallest bin at least ceil(s''/s'_max).
  const std::vector<int64_t> bins = {1, 2, 4, 8};
  auto eq9 = [&](double received, double s_max) {
    const int64_t i = first_fitting(bins, [&](size_t b) { return received / double(bins[b]) <= s_max; });
    return i < 0 ? int64_t(-1) : bins[size_t(i)];
  };
  EXPECT_EQ(eq9(100, 60), 2);
  EXPECT_EQ(eq9(100, 100), 1);
  EXPECT_EQ(eq9(100, 30), 4);
  EXPECT_EQ(eq9(100, 10), -1);
  EXPECT_EQ(eq9(100, -5), -1);
  // A buffer-free expert keeps h + 2 g_e per received row (the arrived row, z), not 2h + 2g_e;
  // s'_max grows by the ratio of what the rest of the budget holds per row.
  const double room = pm.s_recv_max() * pm.bytes_per_received();
  pm.row_h = 1;
  EXPECT_DOUBLE_EQ(pm.bytes_per_received(), 2.0 * (7168 + 2 * 2048));
  EXPECT_NEAR(pm.s_recv_max() * pm.bytes_per_received(), room, 1e-3 * room);
  // Through a strategy: moeblaze's projection at paper scale keeps less than one MemFine chunk.
  ExperimentConfig c;
  c.model.hidden = 7168, c.model.ffn_hidden = 2048, c.model.experts = 256, c.model.heads = 128;
  c.model.head_dim = 192, c.model.kv_heads = 128, c.model.seq = 4096, c.model.micro_batch = 1, c.ep = 32;
  c.model.layers = 8;
  c.paper.received = "20000";
  const PaperScale scale(c);
  auto choose = [&](const StrategySpec& s) {
    return make_strategy(s)->choose_shape([&](const StrategyShape& x) { return scale.fits(x); });
  };
  const ShapeChoice blaze = choose(spec("moeblaze")), one = choose(spec("memfine", {{"chunks", "1"}}));
  ASSERT_TRUE(scale.covers(blaze.shape) && scale.covers(one.shape));
  EXPECT_LT(scale.project(blaze.shape, blaze.found).activation_bytes,
            scale.project(one.shape, one.found).activation_bytes);
  // MACT at paper scale takes the fewest chunks that fit there; where none does, its most, and the
  // projection says so (chunks -1).
  const ShapeChoice ample = choose(spec("memfine", {{"chunks", "auto"}}));
  EXPECT_TRUE(ample.found);
  EXPECT_EQ(ample.shape.chunks, 1);
  c.paper.device_memory = int64_t(1e6);
  const PaperScale tiny(c);
  const ShapeChoice none =
      make_strategy(spec("memfine", {{"chunks", "auto"}}))->choose_shape([&](const StrategyShape& x) {
        return tiny.fits(x);
      });
  EXPECT_FALSE(none.found);
  EXPECT_EQ(none.shape.chunks, 8);
  EXPECT_EQ(tiny.project(none.shape, none.found).chunks, -1);
}

// MACT under a real budget that full recomputation exceeds: it runs, and per layer it picks the
// smallest bin whose predicted peak fits.
TEST(Mact, PicksTheSmallestBinThatFitsWhereFullRecomputeRunsOutOfMemory) {
  MemoryMeter& meter = MemoryMeter::get("cpu");
  ExperimentConfig c = test_util::tiny_config("float32", "zipf", 4);
  c.model.hidden = 64, c.model.ffn_hidden = 128, c.model.seq = 64, c.model.layers = 3;
  c.workload.alpha = 1.5;
  const EmulatedRank rank = make_emulated_rank(c, -1);
  StrategyShape chunked;
  chunked.recompute_layer = true;
  chunked.moe = MoeMode::Chunked;
  const Prediction full = make_strategy(spec("full_recompute"))->predict(c, rank);
  const Prediction two = predict_step(c, rank, chunked, std::vector<int64_t>(3, 2));
  ASSERT_LT(two.activation_bytes, full.activation_bytes);
  c.budget = full.static_bytes + (full.activation_bytes + two.activation_bytes) / 2;
  const int64_t room = c.budget - full.static_bytes;

  auto run = [&](const StrategySpec& sp, std::unique_ptr<Strategy>& s) {
    auto st = make_train_state(c);
    s = make_strategy(sp);
    meter.reset_peak();
    const int64_t start = meter.current_bytes();
    MemoryLimitGuard guard(meter, start + c.budget - st->static_bytes());
    train_step(*st, *s, 0);
    return meter.peak_bytes() - start;
  };
  std::unique_ptr<Strategy> s;
  try {
    run(spec("full_recompute"), s);
    FAIL() << "full_recompute should exceed the budget";
  } catch (const std::exception& e) {
    EXPECT_TRUE(is_out_of_memory(e)) << e.what();
  }
  const int64_t peak = run(spec("memfine", {{"chunks", "auto"}}), s);
  EXPECT_LE(peak, room);
  const std::vector<int64_t> chosen = s->step_counters()["chunks"].get<std::vector<int64_t>>();
  ASSERT_EQ(chosen.size(), 3u);
  EXPECT_GT(*std::max_element(chosen.begin(), chosen.end()), 1);
  for (int64_t l = 0; l < 3; ++l) {
    std::vector<int64_t> plan = chosen;
    EXPECT_LE(predict_step(c, rank, chunked, plan).layer_peak[size_t(l)], room) << "layer " << l;
    if (chosen[size_t(l)] > 1) {
      plan[size_t(l)] = chosen[size_t(l)] / 2;  // the next smaller bin does not fit
      EXPECT_GT(predict_step(c, rank, chunked, plan).layer_peak[size_t(l)], room) << "layer " << l;
    }
  }
  // With a budget where storing fits, store_when_fits stores.
  c.budget = -1;
  const Prediction stored = predict_step(c, rank, StrategyShape{});
  c.budget = stored.static_bytes + stored.activation_bytes + (1 << 20);
  run(spec("memfine", {{"chunks", "auto"}, {"store_when_fits", "true"}}), s);
  EXPECT_EQ(s->step_counters()["chunks"].get<std::vector<int64_t>>(), std::vector<int64_t>(3, 0));
  // With a budget nothing fits, MACT says so before allocating.
  c.budget = full.static_bytes + two.activation_bytes / 10;
  try {
    run(spec("memfine", {{"chunks", "auto"}, {"bins", "[1, 2]"}}), s);
    FAIL() << "expected out of memory";
  } catch (const std::exception& e) {
    EXPECT_TRUE(is_out_of_memory(e));
    EXPECT_NE(std::string(e.what()).find("MACT"), std::string::npos) << e.what();
  }
}

// objective: time with a cost model: stores when that fits and is predicted faster; otherwise the
// fastest plan, per layer stored or chunked, that fits.
TEST(Mact, ObjectiveTimeTakesTheFastestPlanThatFits) {
  const std::string path = memfine::test_util::scratch_root() + "/cost_model.json";
  {
    std::ofstream out(path);
    // Synthetic: storing 100 ms, one chunk 150 ms, 10 ms per extra chunk; experts cost nothing.
    out << R"({"layer_ms": {"stored": 100, "layer_recomputed": 160, "chunked_1": 150},
              "per_chunk_ms": 10, "rows": 1000, "expert_fwd_bwd_ms": [[16, 0.0001], [65536, 0.0001]],
              "context": {"model_hidden": "64", "model_heads": "4", "model_kv_heads": "2", "model_head_dim": "4",
                          "model_ffn_hidden": "128", "model_experts": "8", "model_topk": "2", "model_seq": "64",
                          "model_micro_batch": "2", "model_ep": "4"}})";
  }
  MemoryMeter& meter = MemoryMeter::get("cpu");
  ExperimentConfig c = test_util::tiny_config("float32", "zipf", 4);
  c.model.hidden = 64, c.model.ffn_hidden = 128, c.model.seq = 64, c.model.layers = 3;
  c.workload.alpha = 1.5;
  const EmulatedRank rank = make_emulated_rank(c, -1);
  c.cost_model = path;
  auto time_spec = spec("memfine", {{"chunks", "auto"}, {"objective", "time"}});
  auto run = [&](std::unique_ptr<Strategy>& s) {
    auto st = make_train_state(c);
    s = make_strategy(time_spec);
    meter.reset_peak();
    MemoryLimitGuard guard(meter, c.budget < 0 ? -1 : meter.current_bytes() + c.budget - st->static_bytes());
    train_step(*st, *s, 0);
  };
  std::unique_ptr<Strategy> s;
  c.budget = -1;  // everything fits: store
  run(s);
  EXPECT_EQ(s->step_counters()["chunks"].get<std::vector<int64_t>>(), std::vector<int64_t>(3, 0));
  EXPECT_GT(s->step_counters()["predicted_step_ms"].get<double>(), 0);
  // A budget that full recomputation exceeds: the plan is the fastest, by the cost model, of all
  // 5^3 plans (each layer stored or 1, 2, 4, 8 chunks) whose predicted peak fits, found here by
  // brute force with each plan predicted whole; and the step runs within the budget.
  StrategyShape chunked;
  chunked.recompute_layer = true;
  chunked.moe = MoeMode::Chunked;
  const Prediction one = predict_step(c, rank, chunked, std::vector<int64_t>(3, 1));
  const Prediction two = predict_step(c, rank, chunked, std::vector<int64_t>(3, 2));
  const CostModel cost = CostModel::load(path);
  for (const int64_t budget : {one.static_bytes + (one.activation_bytes + two.activation_bytes) / 2,
                               one.static_bytes + one.activation_bytes * 2}) {
    c.budget = budget;
    const double room = double(budget - one.static_bytes) * 0.95;  // MACT's default headroom
    double best = 1e300;
    std::vector<int64_t> best_plan;
    const int64_t options[] = {0, 1, 2, 4, 8};
    for (int64_t a : options)
      for (int64_t b : options)
        for (int64_t d : options) {
          const std::vector<int64_t> plan{a, b, d};
          const bool all_stored = a == 0 && b == 0 && d == 0;
          StrategyShape stored;
          const Prediction p = all_stored ? predict_step(c, rank, stored) : predict_step(c, rank, chunked, plan);
          if (double(p.activation_bytes) > room) continue;
          double ms = 0;
          for (int64_t l = 0; l < 3; ++l)
            ms += cost.layer_ms(c.model, rank.layers[size_t(l)].expert_rows, plan[size_t(l)]);
          if (ms < best) best = ms, best_plan = plan;
        }
    ASSERT_FALSE(best_plan.empty());
    ASSERT_NO_THROW(run(s)) << "budget " << budget;  // the guard throws past the budget
    const auto chosen = s->step_counters()["chunks"].get<std::vector<int64_t>>();
    EXPECT_NEAR(s->step_counters()["predicted_step_ms"].get<double>(), best, 1e-9)
        << "chosen " << ::testing::PrintToString(chosen) << ", fastest that fits "
        << ::testing::PrintToString(best_plan);
    // Mixing pays here: the last layer's backward comes first, so storing it costs little room.
    if (budget == one.static_bytes + one.activation_bytes * 2) EXPECT_NE(chosen, std::vector<int64_t>(3, 1));
  }
  // A cost model that cannot be read stops the step that needs it, naming the file.
  c.cost_model = "/nonexistent.json";
  EXPECT_THROW(run(s), std::runtime_error);
}
