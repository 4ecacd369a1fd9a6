#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "megatron_trace.h"
#include "scratch.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>

#include "core/workload/ep_rank.h"
#include "core/workload/workload.h"
#include "testing.h"

using namespace memfine;
using memfine::test_util::tiny_config;

namespace {
void expect_realises(const at::Tensor& ids, const std::vector<int64_t>& counts) {
  at::Tensor bc = at::bincount(ids.flatten(), {}, int64_t(counts.size()));
  for (size_t e = 0; e < counts.size(); ++e) EXPECT_EQ(bc[int64_t(e)].item<int64_t>(), counts[e]) << "expert " << e;
  // No token picks an expert twice.
  at::Tensor sorted = std::get<0>(ids.sort(1));
  EXPECT_FALSE(sorted.narrow(1, 1, ids.size(1) - 1).eq(sorted.narrow(1, 0, ids.size(1) - 1)).any().item<bool>());
}
}  // namespace

TEST(Workload, BalancedIsEven) {
  ModelConfig m;
  m.experts = 16, m.topk = 4, m.seq = 64, m.micro_batch = 1;
  auto c = expert_counts(WorkloadConfig{}, m, 4, 0, 1);
  for (auto n : c) EXPECT_EQ(n, 4 * 64 * 4 / 16);
  expect_realises(assign_experts(c, 4 * 64, 4, 1), c);
}

TEST(Workload, ZipfFollowsItsLaw) {
  ModelConfig m;
  m.experts = 32, m.topk = 2, m.seq = 4096, m.micro_batch = 1;
  WorkloadConfig w;
  w.kind = "zipf", w.alpha = 1.0;
  auto c = expert_counts(w, m, 8, 0, 1);
  std::vector<int64_t> s = c;
  std::sort(s.rbegin(), s.rend());
  EXPECT_EQ(std::accumulate(c.begin(), c.end(), int64_t(0)), 8 * 4096 * 2);
  EXPECT_NEAR(double(s[0]) / double(s[1]), 2.0, 0.01);
  EXPECT_NEAR(double(s[0]) / double(s[9]), 10.0, 0.05);
  expect_realises(assign_experts(c, 8 * 4096, 2, 1), c);
}

TEST(Workload, ZipfNeverGivesATokenTheSameExpertTwice) {
  ModelConfig m;
  m.experts = 8, m.topk = 4, m.seq = 100, m.micro_batch = 1;
  WorkloadConfig w;
  w.kind = "zipf", w.alpha = 4.0;  // the top expert wants more than every token: capped at one per token
  auto c = expert_counts(w, m, 2, 0, 1);
  for (auto n : c) EXPECT_LE(n, 200);
  expect_realises(assign_experts(c, 200, 4, 1), c);
}

TEST(Workload, LognormalSpreadMatchesSigma) {
  ModelConfig m;
  m.experts = 512, m.topk = 8, m.seq = 8192, m.micro_batch = 1;
  WorkloadConfig w;
  w.kind = "lognormal", w.sigma = 0.5;
  auto c = expert_counts(w, m, 8, 0, 1);
  std::vector<double> logs;
  for (auto n : c) logs.push_back(std::log(double(n)));
  const double mean = std::accumulate(logs.begin(), logs.end(), 0.0) / double(logs.size());
  double var = 0;
  for (double v : logs) var += (v - mean) * (v - mean);
  EXPECT_NEAR(std::sqrt(var / double(logs.size() - 1)), 0.5, 0.05);
}

TEST(Workload, HotExpertsGetTheirShare) {
  ModelConfig m;
  m.experts = 16, m.topk = 2, m.seq = 1000, m.micro_batch = 1;
  WorkloadConfig w;
  w.kind = "hot", w.hot_fraction = 0.3, w.hot_experts = 2;
  auto c = expert_counts(w, m, 4, 0, 1);
  std::vector<int64_t> s = c;
  std::sort(s.rbegin(), s.rend());
  EXPECT_EQ(s[0] + s[1], 2400);  // 30% of 4 * 1000 * 2
}

TEST(Workload, HotExpertsOnOneRankGiveItTheHotShareInEveryLayer) {
  ModelConfig m;
  m.experts = 128, m.topk = 4, m.seq = 256, m.micro_batch = 1, m.layers = 4;
  WorkloadConfig w;
  w.kind = "hot", w.hot_fraction = 0.625, w.hot_experts = 4, w.hot_placement = "one_rank";
  const int64_t ep = 32, El = 4, total = ep * 256 * 4;
  int64_t rank = -1;
  for (int64_t l = 0; l < m.layers; ++l) {
    const auto c = expert_counts(w, m, ep, l, 7);
    std::vector<int64_t> per_rank(size_t(ep), 0);
    for (int64_t e = 0; e < m.experts; ++e) per_rank[size_t(e / El)] += c[size_t(e)];
    const auto hot = std::max_element(per_rank.begin(), per_rank.end());
    if (rank < 0) rank = hot - per_rank.begin();
    EXPECT_EQ(hot - per_rank.begin(), rank) << "layer " << l;
    EXPECT_EQ(*hot, total * 5 / 8);  // 0.625 of all assignments: 20x the balanced share of a rank
  }
  // Spread at random, the four hot experts rarely share a rank: the hottest rank gets far less.
  w.hot_placement = "random";
  const auto c = expert_counts(w, m, ep, 0, 7);
  std::vector<int64_t> per_rank(size_t(ep), 0);
  for (int64_t e = 0; e < m.experts; ++e) per_rank[size_t(e / El)] += c[size_t(e)];
  EXPECT_LT(*std::max_element(per_rank.begin(), per_rank.end()), total * 5 / 8);
  w.kind = "zipf", w.hot_placement = "one_rank";
  EXPECT_THROW(validate_workload(w, m, ep), std::invalid_argument);
}

TEST(Workload, TraceReplaysExactly) {
  const std::string path = memfine::test_util::scratch_root() + "/trace.csv";
  const std::vector<int64_t> layer0 = {50, 10, 0, 2, 8, 20, 10, 0};  // 100 = 2 ranks * 25 tokens * top-2
  const std::vector<int64_t> layer1 = {60, 40, 0, 0, 0, 0, 0, 0};    // 60 > 50 tokens: cannot replay
  {
    std::ofstream out(path);
    out << "layer,expert,tokens\n";
    for (int e = 0; e < 8; ++e) out << "0," << e << "," << layer0[size_t(e)] << "\n";
    for (int e = 0; e < 8; ++e) out << "1," << e << "," << layer1[size_t(e)] << "\n";
  }
  ModelConfig m;
  m.experts = 8, m.topk = 2, m.seq = 25, m.micro_batch = 1;
  WorkloadConfig w;
  w.kind = "trace", w.trace = path;
  const auto c0 = expert_counts(w, m, 2, 0, 1);
  EXPECT_EQ(c0, layer0);
  expect_realises(assign_experts(c0, 50, 2, 1), c0);
  const auto c1 = expert_counts(w, m, 2, 1, 1);
  EXPECT_EQ(std::accumulate(c1.begin(), c1.end(), int64_t(0)), 100);
  EXPECT_EQ(*std::max_element(c1.begin(), c1.end()), 50);
  EXPECT_EQ(expert_counts(w, m, 2, 2, 1), layer0);  // layers beyond the trace cycle through it
  EXPECT_THROW(read_trace(path + ".missing", 0, 8), std::invalid_argument);
}

// Megatron-Core's router trace (a folder of router_trace_rank{r}.jsonl, or one of them) replays
// exactly: each step's and layer's counts are the trace's, decoder layers in their order from
// Megatron's numbers, MTP records apart; one of another model is refused saying what it has.
TEST(Workload, MegatronTraceReplaysExactly) {
  namespace fs = std::filesystem;
  const std::string dir = memfine::test_util::scratch_root() + "/megatron_trace";
  fs::remove_all(dir);
  fs::create_directories(dir);
  // 8 ranks of 16 tokens, top-2 of 16 experts: 256 assignments a layer, skewed differently each step.
  std::vector<std::vector<std::vector<int64_t>>> counts(3, std::vector<std::vector<int64_t>>(2));
  for (int64_t step = 0; step < 3; ++step)
    for (int64_t layer = 0; layer < 2; ++layer) {
      std::vector<int64_t> c(16, 8);  // 128 spread evenly
      c[size_t((step + layer) % 16)] += 100, c[size_t((3 * step + 5) % 16)] += 28;  // and 128 hot
      counts[size_t(step)][size_t(layer)] = c;
    }
  memfine::test_util::write_megatron_trace(dir, counts, 8, 16, 2, 3, true);
  ModelConfig m;
  m.layers = 2, m.experts = 16, m.topk = 2, m.seq = 16, m.micro_batch = 1;
  WorkloadConfig w;
  w.kind = "trace", w.trace = dir, w.schedule = "trace";
  EXPECT_NO_THROW(validate_workload(w, m, 8));
  for (int64_t step = 0; step < 3; ++step)
    for (int64_t layer = 0; layer < 2; ++layer)
      EXPECT_EQ(expert_counts(w, m, 8, layer, 1, step), counts[size_t(step)][size_t(layer)]) << step << " " << layer;
  // One rank's file alone: its share, scaled to the model's tokens.
  w.trace = dir + "/router_trace_rank0.jsonl";
  const auto one = expert_counts(w, m, 8, 0, 1, 0);
  EXPECT_EQ(std::accumulate(one.begin(), one.end(), int64_t(0)), 256);
  // Another model: top-k, layers and experts refused with what the trace has.
  w.trace = dir;
  auto refused = [&](ModelConfig other, const std::string& want) {
    try {
      validate_workload(w, other, 8);
      ADD_FAILURE() << "accepted: " << want;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  };
  ModelConfig k = m;
  k.topk = 4;
  refused(k, "routes each token to 2 experts; the model's topk is 4");
  ModelConfig l = m;
  l.layers = 3;
  refused(l, "has 2 decoder MoE layers (8 ranks, 3 steps, its MTP records apart); the model has 3");
  ModelConfig e = m;
  e.experts = 8;
  refused(e, "router_trace_rank");
  std::ofstream(dir + "/router_trace_rank8.jsonl") << "{\"step\": 0, \"layer\": 3, \"rank\": 8}\n";
  refused(m, "router_trace_rank8.jsonl:1: num_tokens: expected a whole number");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/router_trace_rank0.jsonl")
      << "{\"step\": 0, \"layer\": 1, \"rank\": 0, \"num_tokens\": 0, \"topk\": 2, \"top_indices\": []}\n";
  refused(m, "router_trace_rank0.jsonl:1: step 0, decoder layer 1 routes no tokens");
  fs::remove_all(dir);
}

TEST(EmulatedRank, ReceivesWhatTheWorkloadRoutesToIt) {
  ExperimentConfig c = tiny_config("float32", "zipf", 4);
  at::Tensor ids = global_routing(c, 0);
  const int64_t El = c.model.experts / c.ep;
  int64_t best = -1, best_rank = -1;
  for (int64_t r = 0; r < c.ep; ++r) {
    RankRouting rr = rank_routing(ids, c, r, 0);
    const int64_t expected = ids.div(El, "floor").eq(r).sum().item<int64_t>();
    EXPECT_EQ(rr.tokens_received, expected);
    EXPECT_DOUBLE_EQ(rr.overload_factor, double(expected) / double(c.model.tokens() * c.model.topk));
    EXPECT_FALSE(rr.peer_rank.eq(r).any().item<bool>());
    if (expected > best) best = expected, best_rank = r;
  }
  c.model.layers = 1;
  EXPECT_EQ(hottest_rank(c), best_rank);
}
