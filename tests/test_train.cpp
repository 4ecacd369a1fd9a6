// `memfine train` end to end on tests/train_tiny.yaml (a 2-layer byte-level MoE language model on
// Debian's fortunes): the loss falls, the dropless strategies train the same model, a killed run
// resumes from its checkpoint without gap or repeat, and bad input is refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <vector>

#include "cli_testing.h"

namespace memfine {
namespace {

using namespace cli_test;
using json = nlohmann::json;

const std::string kTinyTrain = std::string(MEMFINE_TESTS_DIR) + "/train_tiny.yaml";

// strategy -> records in file order
std::map<std::string, std::vector<json>> read_steps(const std::string& dir) {
  std::map<std::string, std::vector<json>> out;
  std::istringstream in(slurp(dir + "/train.jsonl"));
  for (std::string line; std::getline(in, line);) {
    json r = json::parse(line);
    out[r["strategy"].get<std::string>()].push_back(r);
  }
  return out;
}

// The tiny model's head (everything before its strategies) with `edits` applied in order.
std::string tiny_head(const std::vector<std::pair<std::string, std::string>>& edits) {
  const std::string all = slurp(kTinyTrain);
  std::string text = all.substr(0, all.find("strategies:"));
  for (const auto& [from, to] : edits) {
    const size_t at = text.find(from);
    if (at == std::string::npos)
      ADD_FAILURE() << "'" << from << "' not in " << kTinyTrain;
    else
      text.replace(at, from.size(), to);
  }
  return text;
}

// A run killed and resumed against the same run whole: every step once, in order, with the
// same numbers to the bit (the same state and data).
void expect_resumed_as_whole(const std::vector<json>& whole, const std::vector<json>& resumed, size_t steps) {
  ASSERT_EQ(resumed.size(), steps);
  for (size_t i = 0; i < resumed.size(); ++i) {
    EXPECT_EQ(resumed[i]["step"].get<int64_t>(), int64_t(i)) << "a gap or a repeat";
    EXPECT_EQ(resumed[i]["loss"].get<double>(), whole[i]["loss"].get<double>()) << "step " << i;
    EXPECT_EQ(resumed[i]["expert_tokens"], whole[i]["expert_tokens"]) << "step " << i;
  }
}

TEST(Train, LossFallsAndDroplessStrategiesTrainTheSameModel) {
  const std::string dir = scratch("out");
  fs::remove_all(dir);
  Result r = run("train " + kTinyTrain + " --out " + dir + " --no-progress");
  ASSERT_EQ(r.code, 0) << r.err;
  auto runs = read_steps(dir);
  ASSERT_EQ(runs.size(), 3u);
  const auto& ref = runs.at("no_recompute");
  ASSERT_EQ(ref.size(), 40u);
  // Bytes are 5.55 nats apart when uniform (ln 256); a model that learns nothing stays there.
  EXPECT_GT(ref.front()["loss"].get<double>(), 5.0);
  EXPECT_LT(ref.back()["loss"].get<double>(), 4.0);
  EXPECT_LT(ref.back()["eval_loss"].get<double>(), 4.0);
  for (const auto& [label, recs] : runs) {
    ASSERT_EQ(recs.size(), ref.size()) << label;
    // Learned routing: the strategies sum in other orders, and a last-bit difference (another BLAS,
    // another CPU) can flip a near-tie top-k choice; from then on the runs train on other routes.
    // Until the first flip they are one model to float32 rounding (1e-4 nats; chunking that changed
    // the math would miss by far more at step 0); after it they may drift, within 0.02 nats.
    size_t flip = recs.size();
    for (size_t i = 0; i < recs.size() && flip == recs.size(); ++i)
      if (recs[i]["expert_tokens"] != ref[i]["expert_tokens"]) flip = i;
    EXPECT_GE(flip, 10u) << label << ": the routes parted within the first steps";
    for (size_t i = 0; i < recs.size(); ++i) {
      ASSERT_EQ(recs[i]["status"], "ok") << label << " step " << i;
      const double tolerance = i < flip ? 1e-4 : 2e-2;
      EXPECT_NEAR(recs[i]["loss"].get<double>(), ref[i]["loss"].get<double>(), tolerance) << label << " step " << i;
      // After a flip, near-ties go either way: at most 10% of a layer's assignments move.
      for (size_t l = 0; l < ref[i]["expert_tokens"].size(); ++l) {
        int64_t moved = 0, all = 0;
        for (size_t e = 0; e < ref[i]["expert_tokens"][l].size(); ++e) {
          moved +=
              std::abs(recs[i]["expert_tokens"][l][e].get<int64_t>() - ref[i]["expert_tokens"][l][e].get<int64_t>());
          all += ref[i]["expert_tokens"][l][e].get<int64_t>();
        }
        EXPECT_LE(double(moved), 0.1 * double(all)) << label << " step " << i << " layer " << l;
      }
      if (ref[i].contains("eval_loss"))
        EXPECT_NEAR(recs[i]["eval_loss"].get<double>(), ref[i]["eval_loss"].get<double>(), tolerance) << label;
    }
  }
  // The statistics: per layer, the router's rows per expert sum to tokens x topk; s' is the
  // hottest of stats_ep ranks' share, at least the mean.
  const json& last = ref.back();
  for (size_t l = 0; l < 2; ++l) {
    int64_t sum = 0;
    for (const auto& n : last["expert_tokens"][l]) sum += n.get<int64_t>();
    EXPECT_EQ(sum, 64 * 4 * 2);
    EXPECT_GE(last["tokens_received_per_layer"][l].get<int64_t>(), sum / 4);  // overload factor >= 1
  }
  EXPECT_TRUE(ref.front().contains("config"));
  EXPECT_FALSE(ref.back().contains("config"));
  EXPECT_FALSE(ref[1].contains("eval_loss")) << "only evaluated steps have one";
}

TEST(Train, KilledRunResumesWithoutGapOrRepeat) {
  // One strategy: the whole run, then the same run killed after 25 steps (its last checkpoint is
  // after step 19) and resumed. DeepSeek-V3's expert bias is on: it is state the checkpoint must hold.
  const std::string yaml = write("one.yaml", tiny_head({{"aux_loss: 0.01,", "aux_loss: 0.01, bias_update: 0.01,"}}) +
                                                 "strategies: [{name: memfine, chunks: 2}]\n");
  // The copied file names no corpus: the default (Debian's fortunes) is read from anywhere.
  const std::string whole = scratch("whole"), killed = scratch("killed");
  fs::remove_all(whole), fs::remove_all(killed);
  ASSERT_EQ(run("train " + yaml + " --out " + whole + " --no-progress").code, 0);
  Result k = run("train " + yaml + " --out " + killed + " --no-progress", "", killed_at_records(25));
  ASSERT_NE(k.code, 0);
  ASSERT_EQ(read_steps(killed).at("memfine(chunks=2)").size(), 25u);
  Result again = run("train " + yaml + " --out " + killed + " --no-progress");
  EXPECT_NE(again.code, 0) << "an existing train.jsonl needs --resume";
  Result resumed = run("train " + yaml + " --out " + killed + " --resume --no-progress");
  ASSERT_EQ(resumed.code, 0) << resumed.err;
  expect_resumed_as_whole(read_steps(whole).at("memfine(chunks=2)"), read_steps(killed).at("memfine(chunks=2)"), 40);
}

TEST(Train, RoutingWrittenAsATraceReplays) {
  const std::string yaml = write("one.yaml", tiny_head({}) + "strategies: [no_recompute]\n");
  const std::string dir = scratch("out"), trace = scratch("routing.csv");
  fs::remove_all(dir), fs::remove_all(scratch("replayed"));
  Result t = run("train " + yaml + " --out " + dir + " --no-progress --trace-out " + trace);
  ASSERT_EQ(t.code, 0) << t.err;
  const auto trained = read_steps(dir).at("no_recompute");
  // 40 steps x 2 layers x 8 experts, and a header.
  const std::string csv = slurp(trace);
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 40 * 2 * 8 + 1);
  // The same routing replayed by an emulated rank of 4 with as many assignments (4 x 64 tokens x 2):
  // exactly the counts training recorded, step by step.
  const std::string replay = write("replay.yaml",
                                   "name: replay\nwarmup: 0\nrepeats: 2\nthreads: 1\n"
                                   "model: {layers: 2, hidden: 16, heads: 2, kv_heads: 1, head_dim: 8, ffn_hidden: 16, "
                                   "experts: 8, topk: 2, seq: 16, micro_batch: 4}\n"
                                   "parallel: {ep: 4}\nworkload: {kind: trace, trace: " +
                                       trace + ", schedule: trace, peak_step: 7}\nstrategies: [no_recompute]\n");
  Result r = run("run " + replay + " --out " + scratch("replayed") + " --no-progress");
  ASSERT_EQ(r.code, 0) << r.err;
  const json rec = json::parse(slurp(scratch("replayed") + "/results.jsonl"));
  EXPECT_EQ(rec["expert_tokens_step"], 7);
  EXPECT_EQ(rec["expert_tokens"], trained[7]["expert_tokens"]);
  // A trace without steps cannot drive a step schedule.
  const std::string flat = write("flat.csv", "layer,expert,tokens\n0,0,5\n0,1,3\n");
  std::string text = slurp(replay);
  text.replace(text.find(trace), trace.size(), flat);
  Result bad = run("validate " + write("flat.yaml", text));
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("needs a trace with a step column"), std::string::npos) << bad.err;
}

TEST(Train, ExpertBiasBalancesLearnedRouting) {
  // DeepSeek-V3's auxiliary-loss-free balancing against none (no auxiliary loss either): the
  // hottest of 4 ranks' load over the mean, averaged over the last 20 of 40 steps.
  auto late_overload = [&](const std::string& rate) {
    const std::string text = tiny_head({{"aux_loss: 0.01,", "aux_loss: 0, bias_update: " + rate + ","}});
    const std::string dir = scratch("bias" + rate);
    fs::remove_all(dir);
    Result r =
        run("train " + write("bias.yaml", text + "strategies: [no_recompute]\n") + " --out " + dir + " --no-progress");
    EXPECT_EQ(r.code, 0) << r.err;
    double sum = 0;
    int n = 0;
    const auto runs = read_steps(dir);
    for (const auto& rec : runs.at("no_recompute"))
      if (rec["step"].get<int64_t>() >= 20) {
        double top = 0;  // the overload factor: s' over the mean rank's share (64 x 4 x 2 / 4 rows)
        for (const auto& r : rec["tokens_received_per_layer"]) top = std::max(top, r.get<double>() / 128.0);
        sum += top, ++n;
      }
    return n ? sum / n : 0.0;
  };
  const double off = late_overload("0"), on = late_overload("0.01");
  EXPECT_LT(on, 0.8 * off) << "with the bias " << on << ", without " << off;  // measured: 2.31 and 3.54
}

TEST(Train, RealRanksTrainWhatOneProcessTrains) {
  // 2 real ranks of 2 sequences each against one process of 4 (the same global batch, weights and
  // data), 20 steps. Without an auxiliary loss (each rank's is over its own tokens, as Megatron's)
  // the math is the same; DeepSeek-V3's bias is on, so every rank must update it from the whole
  // job's counts. Stated tolerance: 1e-4 nats per step (float32; measured 1.4e-6 over 12 steps).
  const auto head = [&](bool ranks) {
    return tiny_head({{"steps: 40", "steps: 20"},
                      {"aux_loss: 0.01,", "aux_loss: 0, bias_update: 0.01,"},
                      {"stats_ep: 4", "stats_ep: 2"}}) +
           (ranks ? "parallel: {ep: 2}\n" : "");
  };
  std::string ranks = head(true);
  ranks.replace(ranks.find("micro_batch: 4"), 14, "micro_batch: 2");
  ranks.replace(ranks.find(", stats_ep: 2"), 13, "");
  const std::string one = scratch("one"), two = scratch("two");
  fs::remove_all(one), fs::remove_all(two);
  Result a =
      run("train " + write("one.yaml", head(false) + "strategies: [no_recompute, {name: memfine, chunks: 2}]\n") +
          " --out " + one + " --no-progress");
  ASSERT_EQ(a.code, 0) << a.err;
  const std::string yaml2 = write("two.yaml", ranks +
                                                  "strategies: [no_recompute, {name: memfine, chunks: 2}, "
                                                  "{name: capacity, capacity_factor: 1.0}]\n");
  Result b = run("launch --nproc 2 " + yaml2 + " --out " + two + " --no-progress");
  ASSERT_EQ(b.code, 0) << b.err;
  const auto x = read_steps(one), y = read_steps(two);
  for (const std::string label : {"no_recompute", "memfine(chunks=2)"}) {
    ASSERT_EQ(y.at(label).size(), 20u) << label;
    for (size_t i = 0; i < 20; ++i) {
      const json &p = x.at(label)[i], &q = y.at(label)[i];
      EXPECT_NEAR(q["loss"].get<double>(), p["loss"].get<double>(), 1e-4) << label << " step " << i;
      EXPECT_EQ(q["expert_tokens"], p["expert_tokens"]) << label << " step " << i;
      // s' is the hottest real rank's here, and stats_ep's there: the same split of the experts.
      EXPECT_EQ(q["tokens_received_per_layer"], p["tokens_received_per_layer"]) << label << " step " << i;
      if (p.contains("eval_loss")) EXPECT_NEAR(q["eval_loss"].get<double>(), p["eval_loss"].get<double>(), 1e-4);
    }
  }
  EXPECT_EQ(y.at("no_recompute").front()["ranks"], 2);
  // Capacity's counters are the job's: every assignment of the 4 x 64 tokens (top-2) of each of the
  // 2 layers counted once.
  for (const auto& rec : y.at("capacity(capacity_factor=1.0,drop_policy=probs)")) {
    ASSERT_EQ(rec["status"], "ok");
    EXPECT_EQ(rec["assignments"], 2 * 4 * 64 * 2);
    EXPECT_LE(rec["dropped"].get<int64_t>(), rec["assignments"].get<int64_t>());
  }
  // One process cannot stand in for ranks, nor ranks for a file of another ep.
  Result alone = run("train " + yaml2 + " --out " + scratch("alone") + " --no-progress");
  EXPECT_EQ(alone.code, 2);
  EXPECT_NE(alone.err.find("memfine launch --nproc 2"), std::string::npos) << alone.err;
  Result given = run("validate " + write("stats.yaml", ranks + "strategies: [no_recompute]\n"));
  EXPECT_EQ(given.code, 0) << given.err;
  std::string wrong = ranks;
  wrong.replace(wrong.find("aux_loss: 0,"), 12, "aux_loss: 0, stats_ep: 4,");
  Result bad = run("validate " + write("stats.yaml", wrong + "strategies: [no_recompute]\n"));
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("train.stats_ep: parallel.ep is 2"), std::string::npos) << bad.err;
}

TEST(Train, RealRanksResumeTogether) {
  // Every rank killed after 15 steps (the checkpoints are after step 9), then resumed: each rank
  // loads its own state of the same step, and the records are the uninterrupted run's, to the bit.
  const std::string yaml = write("ranks.yaml", tiny_head({{"steps: 40", "steps: 20"},
                                                          {"micro_batch: 4", "micro_batch: 2"},
                                                          {", stats_ep: 4", ", bias_update: 0.01"}}) +
                                                   "parallel: {ep: 2}\nstrategies: [{name: memfine, chunks: 2}]\n");
  const std::string whole = scratch("whole2"), killed = scratch("killed2");
  fs::remove_all(whole), fs::remove_all(killed);
  ASSERT_EQ(run("launch --nproc 2 " + yaml + " --out " + whole + " --no-progress").code, 0);
  Result k = run("launch --nproc 2 " + yaml + " --out " + killed + " --no-progress", "", killed_at_records(15));
  ASSERT_NE(k.code, 0);
  ASSERT_EQ(read_steps(killed).at("memfine(chunks=2)").size(), 15u);
  Result resumed = run("launch --nproc 2 " + yaml + " --out " + killed + " --resume --no-progress");
  ASSERT_EQ(resumed.code, 0) << resumed.err;
  expect_resumed_as_whole(read_steps(whole).at("memfine(chunks=2)"), read_steps(killed).at("memfine(chunks=2)"), 20);
  EXPECT_TRUE(fs::is_empty(killed + "/checkpoints")) << "a whole run keeps no checkpoint";
}

TEST(Train, MactPlansLearnedRoutingOnRealRanks) {
  // 2 real ranks whose router sends most rows to one of them. Under a budget that a whole layer
  // fits only while routing is mild, MACT reads every rank's counts after each layer's router,
  // plans for the rank receiving the most, and runs more chunks the more it receives; the fullest
  // rank stays within the budget. full_recompute does not, and its run ends "oom" (a result).
  const std::string head = tiny_head({{"steps: 40", "steps: 12"},
                                      {"micro_batch: 4", "micro_batch: 2"},
                                      {"aux_loss: 0.01, stats_ep: 4", "aux_loss: 0"}}) +
                           "parallel: {ep: 2}\nmemory: {budget: 6400000}\n";
  const std::string dir = scratch("mact");
  fs::remove_all(dir);
  Result r = run("launch --nproc 2 " +
                 write("mact.yaml", head + "strategies: [full_recompute, {name: memfine, chunks: auto}]\n") +
                 " --out " + dir + " --no-progress");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto runs = read_steps(dir);
  const auto& full = runs.at("full_recompute");
  EXPECT_EQ(full.back()["status"], "oom");
  EXPECT_NE(full.back()["error"].get<std::string>().find("the fullest rank reached"), std::string::npos);
  const auto& mact = runs.at("memfine(chunks=auto)");
  ASSERT_EQ(mact.size(), 12u);
  const int64_t room = 6400000 - mact.front()["static_bytes"].get<int64_t>();
  std::map<int64_t, std::vector<int64_t>> chunks_by_rows;  // s' -> the chunk counts chosen for it
  for (const auto& rec : mact) {
    ASSERT_EQ(rec["status"], "ok") << rec.value("error", "");
    EXPECT_LE(rec["peak_activation_bytes"].get<int64_t>(), room) << "step " << rec["step"];
    for (size_t l = 0; l < 2; ++l)
      chunks_by_rows[rec["tokens_received_per_layer"][l].get<int64_t>()].push_back(rec["chunks"][l].get<int64_t>());
  }
  // More rows never get fewer chunks, and the plan changes with the routing.
  int64_t most = 0;
  for (const auto& [rows, cs] : chunks_by_rows) {
    EXPECT_GE(*std::min_element(cs.begin(), cs.end()), most) << "s' " << rows;
    most = std::max(most, *std::max_element(cs.begin(), cs.end()));
  }
  EXPECT_GT(most, chunks_by_rows.begin()->second.front()) << "one chunk count for every s'";
}

TEST(Train, BadInputIsRefused) {
  const std::string text = slurp(kTinyTrain);
  auto with = [&](const std::string& from, const std::string& to) {
    std::string t = text;
    t.replace(t.find(from), from.size(), to);
    return write("bad.yaml", t);
  };
  Result missing =
      run("train " + with("stats_ep: 4}", "stats_ep: 4, corpus: /no/such/corpus}") + " --out " + scratch("o1"));
  EXPECT_EQ(missing.code, 2);
  EXPECT_NE(missing.err.find("'fortunes' package"), std::string::npos) << missing.err;
  Result no_vocab = run("validate " + with("vocab: 256", "vocab: 0"));
  EXPECT_EQ(no_vocab.code, 2);
  EXPECT_NE(no_vocab.err.find("train: training needs a language model"), std::string::npos) << no_vocab.err;
  Result fixed_routing = run("validate " + with("strategies:", "workload: {kind: zipf}\nstrategies:"));
  EXPECT_EQ(fixed_routing.code, 2);
  EXPECT_NE(fixed_routing.err.find("workload.kind: training learns its routing"), std::string::npos)
      << fixed_routing.err;
  Result measured = run("run " + kTinyTrain + " --out " + scratch("o2"));
  EXPECT_EQ(measured.code, 2);
  EXPECT_NE(measured.err.find("use memfine train"), std::string::npos) << measured.err;
}

}  // namespace
}  // namespace memfine
