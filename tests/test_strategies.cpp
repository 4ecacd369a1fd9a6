#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <set>

#include <filesystem>
#include <fstream>

#include "core/meter/memory_meter.h"
#include "core/moe/capacity.h"
#include "core/run/rank_step.h"
#include "core/strategy/registry.h"
#include "testing.h"

using namespace memfine;
using memfine::test_util::loss_and_grads;
using memfine::test_util::max_rel_diff;
using memfine::test_util::spec;
using memfine::test_util::tiny_config;

namespace {

// Every registered dropless strategy with its defaults (a new one is covered without listing it,
// the tests' own expert_probe included), and memfine at several chunk counts. A lossy one stores
// activations in a narrower format by design: its error is tested on its own (test_compress.cpp).
std::vector<StrategySpec> dropless_variants() {
  std::vector<StrategySpec> v;
  for (const auto& [name, info] : strategy_registry()) {
    const auto s = make_strategy(StrategySpec{name, {}});
    if (info.role != Role::Reference && s->dropless() && !s->lossy()) v.push_back(spec(name));
  }
  for (const char* c : {"2", "3", "4", "8", "48"}) v.push_back(spec("memfine", {{"chunks", c}}));
  // Chunks composed with each way an expert keeps its activations, and MoEBlaze keeping SiLU(a)*b.
  for (const char* e : {"moe_act", "buffer_free"}) v.push_back(spec("memfine", {{"chunks", "3"}, {"experts", e}}));
  v.push_back(spec("memfine", {{"chunks", "2"}, {"experts", "buffer_free"}, {"keep_act", "true"}}));
  v.push_back(spec("moeblaze", {{"keep_act", "true"}}));
  // A plan that stores one layer whole and chunks the other (objective: time's kind), both ways.
  for (const char* plan : {"[0, 3]", "[2, 0]"}) v.push_back(spec("memfine", {{"chunks", plan}}));
  // Blocks smaller than an expert's rows, own and peer rows sharing a block.
  v.push_back(spec("moeblaze", {{"block_rows", "5"}}));
  v.push_back(spec("moeblaze", {{"block_rows", "3"}, {"keep_act", "true"}}));
  // Offloading every module, nothing prefetched; composed with moe_act and with chunks.
  const char* all = "[attn_norm, qkv_linear, core_attn, attn_proj, mlp_norm, expert_fc1, moe_act, expert_fc2]";
  v.push_back(spec("offload", {{"modules", all}, {"prefetch", "0"}, {"min_bytes", "64"}}));
  v.push_back(spec("offload", {{"modules", all}, {"experts", "moe_act"}}));
  v.push_back(spec("offload", {{"modules", all}, {"chunks", "3"}, {"margin", "1"}}));
  v.push_back(spec("memfine", {{"chunks", "[0, 3]"}, {"modules", all}}));
  // Skipping the replay's dead fc2 and combine (Megatron's arrangement: the probabilities in the activation).
  for (const char* s : {"full_recompute", "moe_recompute"}) v.push_back(spec(s, {{"skip_dead", "true"}}));
  // ChunkedEP: replayed last to first with the next chunk prefetched (more chunks than some layers'
  // rows: empty chunks), and stored chunk by chunk.
  for (const char* c : {"3", "48"}) v.push_back(spec("chunked_ep", {{"chunks", c}}));
  v.push_back(spec("chunked_ep", {{"chunks", "3"}, {"recompute", "none"}}));
  // Paged Stash: every expert in device pages; spilling to host pages; rerun (a capacity too small).
  v.push_back(spec("paged_stash", {{"capacity_factor", "100"}, {"device_factor", "100"}}));
  v.push_back(spec("paged_stash", {{"capacity_factor", "100"}, {"device_factor", "0.2"}, {"host_factor", "100"}}));
  v.push_back(spec("paged_stash", {{"capacity_factor", "0.5"}}));
  return v;
}

StrategySpec reference() { return spec(strategy_of_role(Role::Reference)); }

}  // namespace

class SameMath : public ::testing::TestWithParam<std::string> {};

// Every dropless strategy computes the same loss and gradients as storing everything.
TEST_P(SameMath, Float64) {
  ExperimentConfig c = tiny_config("float64", GetParam());
  const auto ref = loss_and_grads(c, reference());
  for (const auto& s : dropless_variants()) EXPECT_LT(max_rel_diff(loss_and_grads(c, s), ref), 1e-10) << s.label();
}

TEST_P(SameMath, Float32) {
  ExperimentConfig c = tiny_config("float32", GetParam());
  const auto ref = loss_and_grads(c, reference());
  // Chunking changes the order of float additions; 1e-4 relative bounds that rounding.
  for (const auto& s : dropless_variants()) EXPECT_LT(max_rel_diff(loss_and_grads(c, s), ref), 1e-4) << s.label();
}

INSTANTIATE_TEST_SUITE_P(Workloads, SameMath, ::testing::Values("balanced", "zipf", "hot"));

TEST(Strategies, SingleRankAndRouterDecidedRoutingAgree) {
  ExperimentConfig c = tiny_config("float64", "router", 1);
  const auto ref = loss_and_grads(c, spec("no_recompute"));
  EXPECT_LT(max_rel_diff(loss_and_grads(c, spec("memfine", {{"chunks", "3"}})), ref), 1e-10);
  EXPECT_LT(max_rel_diff(loss_and_grads(c, spec("full_recompute")), ref), 1e-10);
}

// Paged Stash's counters say what happened: pages filled without overflow; host pages where the
// device's run out; a rerun (and both passes' peaks, the step's the larger) where capacity is short.
TEST(PagedStash, CountsPagesSpillsAndReruns) {
  ExperimentConfig c = tiny_config("float32", "zipf");
  auto run = [&](const StrategySpec& sp) {
    auto st = make_train_state(c);
    auto s = make_strategy(sp);
    MemoryMeter& meter = MemoryMeter::get("cpu");
    meter.reset_peak();
    const int64_t start = meter.current_bytes();
    train_step(*st, *s, 0);
    json j = s->step_counters();
    j["peak"] = meter.peak_bytes() - start;
    return j;
  };
  const json fits = run(spec("paged_stash", {{"capacity_factor", "100"}, {"device_factor", "100"}}));
  EXPECT_EQ(fits["reruns"], 0);
  EXPECT_GT(fits["pages_used"].get<int64_t>(), 0);
  EXPECT_EQ(fits["host_pages"], 0);
  EXPECT_EQ(fits["overflow"], "");
  const json spills = run(spec("paged_stash", {{"capacity_factor", "100"}, {"device_factor", "0.2"}, {"host_factor", "100"}}));
  EXPECT_EQ(spills["reruns"], 0);
  EXPECT_GT(spills["host_pages"].get<int64_t>(), 0);
  const json reruns = run(spec("paged_stash", {{"capacity_factor", "1.0"}}));
  EXPECT_EQ(reruns["reruns"], 1) << reruns.dump();
  EXPECT_NE(reruns["overflow"], "");
  EXPECT_EQ(reruns["peak"].get<int64_t>(),
            std::max(reruns["first_pass_peak_bytes"].get<int64_t>(), reruns["rerun_peak_bytes"].get<int64_t>()));
}

TEST(Capacity, LargeFactorDropsNothingAndEqualsDropless) {
  ExperimentConfig c = tiny_config("float64", "zipf");
  const auto ref = loss_and_grads(c, spec("no_recompute"));
  for (const char* policy : {"probs", "position"}) {
    auto st = make_train_state(c, true);
    auto s = make_strategy(spec("capacity", {{"capacity_factor", "100"}, {"drop_policy", policy}}));
    test_util::Grads g;
    g.loss = train_step(*st, *s, 0, false);
    for (const auto& p : st->model.parameters()) g.grads.push_back(p.grad().clone());
    g.grads.push_back(st->input.grad().clone());
    EXPECT_LT(max_rel_diff(g, ref), 1e-10) << policy;
    EXPECT_EQ(s->step_counters()["dropped"].get<int64_t>(), 0);
  }
}

// Dropped assignments = sum over (sending rank, expert) of max(0, count - capacity), whatever the
// policy: the policy decides which are dropped, not how many.
TEST(Capacity, DroppedCountMatchesBruteForce) {
  ExperimentConfig c = tiny_config("float64", "zipf");
  auto st = make_train_state(c);
  const int64_t T = c.model.tokens(), k = c.model.topk, E = c.model.experts;
  for (double factor : {0.5, 1.0, 1.5}) {
    const int64_t cap = capacity_per_expert(T, k, E, factor);
    int64_t expected = 0, assignments = 0;
    for (int64_t l = 0; l < c.model.layers; ++l) {
      const RankRouting& r = st->rank.layers[size_t(l)];
      std::map<std::pair<int64_t, int64_t>, int64_t> count;  // (sender, expert) -> rows
      auto own = r.own_experts.reshape(-1);
      for (int64_t i = 0; i < own.numel(); ++i) ++count[{r.rank, own[i].item<int64_t>()}];
      for (int64_t i = 0; i < r.peer_pos.numel(); ++i)
        ++count[{r.peer_rank[i].item<int64_t>(), r.first_expert + r.peer_expert[i].item<int64_t>()}];
      for (auto& [key, n] : count) expected += std::max<int64_t>(0, n - cap), assignments += n;
    }
    for (const char* policy : {"probs", "position"}) {
      auto s = make_strategy(spec("capacity", {{"capacity_factor", std::to_string(factor)}, {"drop_policy", policy}}));
      train_step(*st, *s, 0, false);
      EXPECT_EQ(s->step_counters()["dropped"].get<int64_t>(), expected) << policy << " factor " << factor;
      EXPECT_EQ(s->step_counters()["assignments"].get<int64_t>(), assignments);
    }
  }
}

TEST(Capacity, KeepsTheHighestPriorityInEachGroup) {
  at::manual_seed(1);
  at::Tensor group = at::randint(0, 5, {300}, at::kLong);
  at::Tensor prio = at::rand({300}, at::kDouble);
  at::Tensor keep = keep_within_capacity(group, prio, 7);
  for (int64_t g = 0; g < 5; ++g) {
    at::Tensor in = group.eq(g);
    const int64_t n = in.sum().item<int64_t>();
    at::Tensor kept = keep.logical_and(in), dropped = keep.logical_not().logical_and(in);
    EXPECT_EQ(kept.sum().item<int64_t>(), std::min<int64_t>(n, 7));
    if (dropped.any().item<bool>())
      EXPECT_GE(prio.masked_select(kept).min().item<double>(), prio.masked_select(dropped).max().item<double>());
  }
  EXPECT_EQ(capacity_per_expert(100, 2, 8, 1.0), 25);
  EXPECT_EQ(capacity_per_expert(100, 3, 8, 1.0), 38);  // ceil(37.5)
}

// Measured on an imbalanced workload: chunking lowers the activation peak below full
// recomputation, which is below storing everything.
TEST(Strategies, MeasuredPeaksFallWithRecomputeAndChunking) {
  MemoryMeter& meter = MemoryMeter::get("cpu");
  ExperimentConfig c = tiny_config("float32", "zipf", 8);
  c.model.hidden = 64, c.model.ffn_hidden = 128, c.model.experts = 16, c.model.seq = 128, c.model.micro_batch = 1;
  c.model.heads = 4, c.model.kv_heads = 1, c.model.head_dim = 16, c.model.layers = 3, c.model.topk = 4;
  c.workload.alpha = 1.5;
  std::map<std::string, int64_t> peak;
  for (const auto& sp : {spec("no_recompute"), spec("full_recompute"), spec("memfine", {{"chunks", "4"}})}) {
    auto st = make_train_state(c);
    auto s = make_strategy(sp);
    train_step(*st, *s, 0);  // first step allocates nothing persistent, but warm anyway
    meter.reset_peak();
    const int64_t start = meter.current_bytes();
    train_step(*st, *s, 1);
    peak[sp.label()] = meter.peak_bytes() - start;
  }
  double overload = 0;
  for (const auto& l : make_emulated_rank(c, -1).layers) overload = std::max(overload, l.overload_factor);
  EXPECT_GT(overload, 2.0);  // strongly imbalanced: the hottest layer receives over twice the balanced rows
  EXPECT_LT(peak["memfine(chunks=4)"], peak["full_recompute"]);
  EXPECT_LT(peak["full_recompute"], peak["no_recompute"]);
}

// bfloat16 runs where the device supports it (here through oneDNN on the CPU); chunking keeps
// the loss within bf16 rounding of storing everything.
TEST(Strategies, Bfloat16RunsAndAgreesToItsPrecision) {
  ExperimentConfig c = tiny_config("bfloat16", "zipf");
  const double ref = loss_and_grads(c, spec("no_recompute")).loss;
  for (const auto& s : {spec("full_recompute"), spec("memfine", {{"chunks", "4"}})})
    EXPECT_NEAR(loss_and_grads(c, s).loss, ref, 2e-2 * std::abs(ref)) << s.label();
}

// Recomputation stores less than storing everything, and chunking never stores more than full
// recomputation (1%), even at one chunk (where it may be lower: its MoE activations are not held
// while the shared expert's backward runs), lower with more under imbalance. The eager-PyTorch
// comparison (scripts/compare-pytorch, a ctest) holds full recomputation to PyTorch's checkpoint.
TEST(Strategies, MemFineNeverAboveFullRecompute) {
  MemoryMeter::get("cpu");
  for (const char* kind : {"balanced", "zipf"}) {
    ExperimentConfig c = tiny_config("float32", kind, 4);
    c.model.hidden = 64, c.model.ffn_hidden = 128, c.model.seq = 64;
    const int64_t full = test_util::step_peak(c, spec("full_recompute"), 1);
    EXPECT_LT(full, test_util::step_peak(c, spec("no_recompute"), 1)) << kind;
    for (const char* chunks : {"1", "2", "4", "8"}) {
      const int64_t mf = test_util::step_peak(c, spec("memfine", {{"chunks", chunks}}), 1);
      EXPECT_LE(double(mf), double(full) * 1.01) << kind << " chunks " << chunks;
      if (std::string(kind) == "zipf" && std::string(chunks) == "4") EXPECT_LT(double(mf), double(full) * 0.8) << kind;
    }
  }
}

namespace memfine {
namespace {

// Figures draw and say a strategy as it declares itself (`memfine schema --json`'s looks): every
// registered one has a colour and a marker of its own, and each parameter's declared words for a
// value are words for one of the values it accepts.
TEST(Strategies, EachDeclaresHowFiguresDrawAndSayIt) {
  std::set<std::string> colours, markers;
  for (const auto& [name, info] : strategy_registry()) {
    EXPECT_EQ(info.colour.size(), 7u) << name << ": " << info.colour;
    EXPECT_FALSE(info.marker.empty()) << name;
    EXPECT_TRUE(colours.insert(info.colour).second) << name << " shares its colour";
    EXPECT_TRUE(markers.insert(info.marker).second) << name << " shares its marker";
    for (const Param& p : info.params)
      for (const auto& [value, words] : p.phrases) {
        try {
          p.read(YAML::Load(value));
        } catch (const std::invalid_argument& e) {
          ADD_FAILURE() << name << "." << p.name << ": words for '" << value << "', which it refuses: " << e.what();
        }
      }
  }
}

// A strategy is its own file's: no code of the harness (core/ outside core/strategy/) names a
// registered strategy, so a new one reaches run, predict, project and every table untouched.
TEST(Strategies, NoCodeOutsideTheStrategiesNamesOne) {
  namespace fs = std::filesystem;
  const fs::path core = fs::path(MEMFINE_TESTS_DIR) / ".." / "core";
  std::vector<std::string> found;
  for (const auto& e : fs::recursive_directory_iterator(core)) {
    const std::string path = e.path().string(), ext = e.path().extension().string();
    if (!e.is_regular_file() || (ext != ".cpp" && ext != ".h" && ext != ".cu")) continue;
    if (path.find("/core/strategy/") != std::string::npos) continue;
    std::ifstream in(path);
    int line = 0;
    for (std::string text; std::getline(in, text);) {
      ++line;
      for (const auto& [name, info] : strategy_registry())
        if (text.find("\"" + name + "\"") != std::string::npos)
          found.push_back(path + ":" + std::to_string(line) + ": \"" + name + "\"");
    }
  }
  EXPECT_TRUE(found.empty()) << found.size() << " place(s), the first " << found.front();
  EXPECT_GT(strategy_registry().size(), 7u) << "the registry this test reads is the shipped one";
}

}  // namespace
}  // namespace memfine
