// Activation offloading (core/strategy/offload.h, baselines/offload.cpp): what it moves, what the
// device meter sees, what the model predicts and how the copy times are modelled. Its gradients
// are checked with every strategy's (test_strategies.cpp, test_dist.cpp), its peak with every
// strategy's (test_memory_model.cpp).
#include <gtest/gtest.h>

#include <chrono>

#include "core/meter/memory_meter.h"
#include "core/run/rank_step.h"
#include "core/strategy/offload.h"
#include "core/strategy/registry.h"
#include "testing.h"

namespace memfine {
namespace {

using test_util::spec;

const char* kAll = "[attn_norm, qkv_linear, core_attn, attn_proj, mlp_norm, expert_fc1, moe_act, expert_fc2]";

// Offloading the experts' modules runs the stages one expert at a time (core/moe/ranged.h): the
// plain strategy it is held against runs them so too.
ExperimentConfig config() {
  ExperimentConfig c = test_util::tiny_config("float32", "zipf", 4);
  c.model.layers = 4, c.model.hidden = 64, c.model.ffn_hidden = 96, c.model.seq = 64;
  c.expert_gemm = "loop";
  return c;
}

// One step's counters.
json step_counters(const ExperimentConfig& c, const StrategySpec& sp) {
  auto st = make_train_state(c);
  auto s = make_strategy(sp);
  train_step(*st, *s, 0);
  return s->step_counters();
}

// The device meter's peak falls by what the model says offloading takes off it, and the host
// holds what the model says, to the byte.
TEST(Offload, TheDevicePeakFallsAsTheModelSaysAndTheHostHoldsIt) {
  const ExperimentConfig c = config();
  const EmulatedRank rank = make_emulated_rank(c, -1);
  const StrategySpec plain = spec("no_recompute");
  const int64_t measured_plain = test_util::step_peak(c, plain);
  const int64_t predicted_plain = make_strategy(plain)->predict(c, rank).activation_bytes;
  for (const auto& sp : {spec("offload", {{"modules", kAll}, {"prefetch", "0"}}), spec("offload"),
                         spec("offload", {{"modules", kAll}, {"margin", "1"}, {"prefetch", "2"}}),
                         spec("offload", {{"modules", "[core_attn, moe_act]"}, {"min_bytes", "20000"}})}) {
    const Prediction p = make_strategy(sp)->predict(c, rank);
    const int64_t measured = test_util::step_peak(c, sp);
    const int64_t measured_fall = measured_plain - measured, predicted_fall = predicted_plain - p.activation_bytes;
    EXPECT_GT(measured_fall, 0) << sp.label();
    // Within the model's 5% (of the peak), as the model holds every strategy.
    EXPECT_LT(std::abs(double(measured_fall - predicted_fall)), 0.05 * double(measured))
        << sp.label() << ": fell " << measured_fall << ", predicted " << predicted_fall << " (" << p.phase << ")";
    const json k = step_counters(c, sp);
    EXPECT_EQ(k["offload_host_peak_bytes"].get<int64_t>(), p.host_bytes) << sp.label();
    // Everything that left came back.
    EXPECT_EQ(k["offload_to_device_bytes"], k["offload_to_host_bytes"]) << sp.label();
  }
  // All modules, nothing prefetched: the peak falls by most of what is offloaded.
  const json all = step_counters(c, spec("offload", {{"modules", kAll}, {"prefetch", "0"}}));
  EXPECT_GT(all["offload_bytes_by_module"].size(), 6u);
}

// A margin of every layer offloads nothing; offloading nothing costs nothing.
TEST(Offload, AMarginOfEveryLayerMovesNothing) {
  ExperimentConfig c = config();
  const StrategySpec sp = spec("offload", {{"margin", "4"}});
  EXPECT_EQ(test_util::step_peak(c, sp), test_util::step_peak(c, spec("no_recompute")));
  EXPECT_EQ(step_counters(c, sp)["offload_to_host_bytes"], 0);
}

// The copies' times come from the bandwidth: each direction's busy time is its bytes over its
// bandwidth; a fast link hides every copy behind compute, a slow one exposes nearly all of it.
TEST(Offload, CopyTimesAreModelledFromTheBandwidth) {
  const ExperimentConfig c = config();
  const json fast = step_counters(c, spec("offload", {{"h2d_gbps", "100000"}, {"d2h_gbps", "100000"}}));
  const json slow = step_counters(c, spec("offload", {{"h2d_gbps", "0.001"}, {"d2h_gbps", "0.002"}}));
  const double bytes = fast["offload_to_host_bytes"].get<double>();
  ASSERT_GT(bytes, 0);
  EXPECT_DOUBLE_EQ(slow["offload_d2h_ms_modelled"].get<double>(), bytes / 0.002e6);
  EXPECT_DOUBLE_EQ(slow["offload_h2d_ms_modelled"].get<double>(), bytes / 0.001e6);
  EXPECT_LT(fast["copy_ms_modelled"].get<double>(), 0.01);
  // Slow: compute waits for nearly all of both directions (less what overlaps the step's compute,
  // far shorter than the copies here).
  const double busy = slow["offload_d2h_ms_modelled"].get<double>() + slow["offload_h2d_ms_modelled"].get<double>();
  EXPECT_GT(slow["copy_ms_modelled"].get<double>(), 0.5 * busy);
  EXPECT_LE(slow["copy_ms_modelled"].get<double>(), busy + 1e-9);
  // The emulation's own copying is measured inside the step: some time where bytes were copied,
  // and less than the whole step that holds it.
  auto st = make_train_state(c);
  auto s = make_strategy(spec("offload"));
  const auto t0 = std::chrono::steady_clock::now();
  train_step(*st, *s, 0);
  const double step_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  const double emulation_ms = s->step_counters()["offload_emulation_ms"].get<double>();
  EXPECT_GT(emulation_ms, 0);
  EXPECT_LT(emulation_ms, step_ms);
}

// MACT with offloading: where storing a layer whole fits only once its modules are offloaded,
// MACT stores it (offloaded) instead of recomputing it in chunks.
TEST(Offload, MactStoresOffloadedWhereStoringAloneDoesNotFit) {
  ExperimentConfig c = config();
  const EmulatedRank rank = make_emulated_rank(c, -1);
  StrategyShape stored, offloaded;
  for (const char* m :
       {"attn_norm", "qkv_linear", "core_attn", "attn_proj", "mlp_norm", "expert_fc1", "moe_act", "expert_fc2"})
    offloaded.offload.add(module_named(m));
  offloaded.offload.prefetch = 0;
  const Prediction p0 = predict_step(c, rank, stored), p1 = predict_step(c, rank, offloaded);
  ASSERT_LT(p1.activation_bytes, p0.activation_bytes);
  // Room for the offloaded layers, not for the stored ones (MACT keeps 5% of the room free).
  c.budget = p0.static_bytes + int64_t(double(p0.activation_bytes + p1.activation_bytes) / 2 / 0.95);
  auto plan = [&](const StrategySpec& sp) { return make_strategy(sp)->predict(c, rank).chunks; };
  const auto alone = plan(spec("memfine", {{"chunks", "auto"}, {"store_when_fits", "true"}}));
  const auto with =
      plan(spec("memfine", {{"chunks", "auto"}, {"store_when_fits", "true"}, {"modules", kAll}, {"prefetch", "0"}}));
  EXPECT_NE(alone, std::vector<int64_t>(size_t(c.model.layers), 0)) << "storing alone should not fit";
  EXPECT_EQ(with, std::vector<int64_t>(size_t(c.model.layers), 0)) << "stored, offloaded";
  // And it runs within the budget it planned for.
  EXPECT_LE(
      test_util::step_peak(
          c, spec("memfine", {{"chunks", "auto"}, {"store_when_fits", "true"}, {"modules", kAll}, {"prefetch", "0"}})),
      c.budget - p0.static_bytes);
  // Offloading where nothing is stored is refused, saying why.
  EXPECT_THROW(make_strategy(spec("memfine", {{"chunks", "4"}, {"modules", "[core_attn]"}})), std::invalid_argument);
}

// The engine that hands out the hooks is the process's from its start, not from the first
// offloading step: LibTorch 2.x gives device threads only to the engine that runs the process's
// first backward pass, and one installed later failed its first backward on a GPU.
TEST(Offload, ItsEngineIsTheDefaultBeforeAnyStep) { EXPECT_TRUE(offloading_engine_is_default()); }

// Wrong modules are refused where they are read, naming the choices.
TEST(Offload, UnknownModulesAreRefused) {
  std::vector<ParamProblem> problems;
  resolve_strategy(spec("offload", {{"modules", "[core_atn]"}}), problems);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0].key, "modules");
  EXPECT_NE(problems[0].message.find("core_attn"), std::string::npos) << problems[0].message;
}

#ifdef MEMFINE_TORCH_CUDA
// On a GPU the copies run on streams of their own, out while forward goes on and back while
// backward does: the loss and gradients are the stored layer's (float32; a race would show),
// prefetched or fetched when first needed, plain or FP8-encoded, and each copy is timed. The
// budgeted runs are experiments/gpu_offload.yaml.
TEST(Offload, CopiesOnTheirOwnCudaStreamsGiveTheStoredLayersGradients) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  ExperimentConfig c = config();
  c.device = "cuda", c.kernels = "fused";
  const auto ref = test_util::loss_and_grads(c, spec("no_recompute"));
  for (const char* prefetch : {"0", "1"}) {
    const auto sp = spec("offload", {{"modules", kAll}, {"prefetch", prefetch}});
    EXPECT_LT(test_util::max_rel_diff(test_util::loss_and_grads(c, sp), ref), 1e-5) << "prefetch " << prefetch;
    const json k = step_counters(c, sp);
    EXPECT_GT(k.value("offload_d2h_ms", 0.0), 0.0) << k.dump();
    EXPECT_GT(k.value("offload_h2d_ms", 0.0), 0.0) << k.dump();
    EXPECT_EQ(k["offload_to_host_bytes"], k["offload_to_device_bytes"]);
  }
  const auto fp8 = spec("offload", {{"modules", kAll}, {"format", "fp8_e5m2"}});
  EXPECT_LT(test_util::max_rel_diff(test_util::loss_and_grads(c, fp8), ref), 0.5);
  EXPECT_GT(step_counters(c, fp8).value("offload_h2d_ms", 0.0), 0.0);
}
#endif

}  // namespace
}  // namespace memfine
