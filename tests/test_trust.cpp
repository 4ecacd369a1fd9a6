// Results you can trust: each way the suite once kept or published a wrong number without a word,
// held to what it does now (one name per strategy, a clean meter after out of memory, verify with
// a verdict, resume that never mixes runs, training records that stay the truth, bad input
// refused where it is first read, predict bounded by what it reasons about).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>
#include <map>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_testing.h"
#include "core/record/results.h"

namespace memfine {
namespace {

using namespace cli_test;
using json = nlohmann::json;

const std::string kTinyTrain = std::string(MEMFINE_TESTS_DIR) + "/train_tiny.yaml";

std::vector<json> records_of(const std::string& dir, const std::string& file = "results.jsonl") {
  return read_results(dir + "/" + file);
}

std::string replaced(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  if (at == std::string::npos)
    ADD_FAILURE() << "'" << from << "' not in the text";
  else
    text.replace(at, from.size(), to);
  return text;
}

Result run_probe(const std::string& args) {
  const std::string out = scratch("probe_stdout.txt"), err = scratch("probe_stderr.txt");
  const int status = std::system((std::string(MEMFINE_PROBE_BIN) + " " + args + " >" + out + " 2>" + err).c_str());
  return {WEXITSTATUS(status), slurp(out), slurp(err)};
}

// 1. One name per strategy: a sweep written in block style is resumed by the same sweep written
// in flow style with its defaults spelled out, and nothing is measured again.
TEST(Trust, OneNamePerStrategyWhateverTheYamlStyle) {
  const std::string head = R"(name: styles
seed: 2
threads: 1
warmup: 0
repeats: 1
model: {layers: 1, hidden: 16, heads: 2, kv_heads: 1, head_dim: 8, ffn_hidden: 16, experts: 4, topk: 2, seq: 16}
parallel: {ep: 2}
workload: {kind: zipf, alpha: 2.0}
memory: {budget: 1GiB}
)";
  const std::string block = head + R"(strategies:
  - name: memfine
    chunks: auto
  - name: capacity
    capacity_factor: 1
)";
  const std::string flow = head + R"(strategies:
  - {name: memfine, chunks: auto, bins: [1, 2, 4, 8], headroom: 0.05}
  - {name: capacity, capacity_factor: 1.0, drop_policy: probs}
)";
  const std::string dir = fresh_dir("styles");
  ASSERT_EQ(run("run " + write("block.yaml", block) + " --out " + dir + " --no-progress").code, 0);
  const Result again = run("run " + write("flow.yaml", flow) + " --out " + dir + " --resume --no-progress");
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_NE(again.out.find("(0 new records, 2 in all)"), std::string::npos) << again.out;
  std::set<std::string> labels;
  for (const auto& r : records_of(dir)) labels.insert(r["strategy"].get<std::string>());
  EXPECT_EQ(labels, (std::set<std::string>{"memfine(chunks=auto)", "capacity(capacity_factor=1.0,drop_policy=probs)"}));
}

// 2. A strategy measured after another ran out of memory reads what it reads alone, to the byte,
// with no warmup step to absorb what the failed step left behind (the issue's case: full
// recomputation runs out of memory in its backward, then MACT plans [1,1,2,2]).
TEST(Trust, APeakAfterAnOutOfMemoryIsThePeakAlone) {
  const std::string head = R"(name: after_oom
seed: 4
threads: 2
warmup: 0
repeats: 1
model: {layers: 4, hidden: 192, heads: 6, kv_heads: 3, head_dim: 32, ffn_hidden: 256, experts: 16, topk: 2, seq: 768}
parallel: {ep: 8}
workload: {kind: zipf, alpha: 1.5}
memory: {budget: 84MiB}
strategies:
)";
  const std::string both = fresh_dir("both"), alone = fresh_dir("alone");
  const Result r = run("run " + write("both.yaml", head + "  - full_recompute\n  - {name: memfine, chunks: auto}\n") +
                       " --out " + both + " --no-progress");
  ASSERT_EQ(r.code, 0) << r.err;
  ASSERT_EQ(run("run " + write("alone.yaml", head + "  - {name: memfine, chunks: auto}\n") + " --out " + alone +
                " --no-progress")
                .code,
            0);
  const auto b = records_of(both), a = records_of(alone);
  ASSERT_EQ(b[0]["status"], "oom") << "the case needs the first strategy to run out of memory";
  ASSERT_EQ(b[1]["status"], "ok");
  EXPECT_EQ(b[1]["chunks"], a[0]["chunks"]);
  EXPECT_EQ(b[1]["peak_activation_bytes"], a[0]["peak_activation_bytes"]);
}

// 2b. Each strategy's outcome is its own: with verify on and a budget MACT cannot meet, MACT runs
// out of memory, and the others are verified and measured, or out of memory, each on its own
// (MACT's refusal was once recorded as the other strategies' error).
TEST(Trust, EachStrategysOutcomeIsItsOwn) {
  const std::string yaml = write("own.yaml", R"(name: own
seed: 1
threads: 2
warmup: 0
repeats: 1
verify: true
model: {layers: 2, hidden: 256, heads: 4, kv_heads: 2, head_dim: 64, ffn_hidden: 512, experts: 16, topk: 4, seq: 512}
parallel: {ep: 8}
workload: {kind: zipf, alpha: 1.5}
memory: {budget: 40MiB}
strategies:
  - no_recompute
  - full_recompute
  - {name: memfine, chunks: auto}
)");
  const std::string dir = fresh_dir("own");
  const Result r = run("run " + yaml + " --out " + dir + " --no-progress");
  EXPECT_EQ(r.code, 0) << r.err;  // out of memory is a result
  const auto recs = records_of(dir);
  ASSERT_EQ(recs.size(), 3u);
  for (const auto& rec : recs) {
    EXPECT_EQ(rec["status"], "oom") << rec["strategy"] << ": " << rec["error"];
    EXPECT_EQ(rec["error"].get<std::string>().find("MACT") == std::string::npos, rec["name"] != "memfine")
        << rec["strategy"] << "'s error is " << rec["error"];
  }
  EXPECT_EQ(recs[0]["verified"], true) << "no_recompute is verified on its own";
  EXPECT_TRUE(recs[2]["verified"].is_null()) << "MACT found no plan: nothing was verified";
}

// 3. verify gives a verdict against the dtype's stated tolerance, in the records and the table,
// and fails the run (exit 1) when a dropless strategy does not compute what the reference does:
// on one process, on real ranks against one process computing the whole batch, and in training.
TEST(Trust, VerifyGivesAVerdict) {
  const std::string yaml =
      write("verify.yaml", replaced(kTiny, "  - {name: memfine, chunks: 2}\n",
                                    "  - {name: memfine, chunks: 2}\n  - off_by_a_thousandth\n  - capacity\n"));
  for (const std::string how : {"run", "launch --nproc 2"}) {
    const std::string dir = fresh_dir("verify" + std::to_string(how.size()));
    const Result r = run_probe(how + " " + yaml + " --out " + dir + " --no-progress");
    EXPECT_EQ(r.code, 1) << how << ": " << r.err;
    EXPECT_NE(r.err.find("verify: off_by_a_thousandth at model.seq=16"), std::string::npos) << how << ": " << r.err;
    EXPECT_NE(r.out.find("FAIL"), std::string::npos) << r.out;
    for (const auto& rec : records_of(dir)) {
      const std::string name = rec["name"];
      if (name == "capacity")
        EXPECT_TRUE(rec["verified"].is_null()) << "capacity computes another model";
      else
        EXPECT_EQ(rec["verified"], name != "off_by_a_thousandth")
            << how << " " << name << " " << rec["grad_max_rel_err"];
      if (name != "capacity") EXPECT_EQ(rec["verify_tolerance"], 1e-4);  // float32
    }
  }
  // Training: the verdict is in each run's head; on real ranks it is refused, saying why.
  const std::string train = replaced(slurp(kTinyTrain), "steps: 40", "steps: 2") + "verify: true\n";
  const std::string tdir = fresh_dir("verify_train");
  const Result t = run("train " + write("train.yaml", train) + " --out " + tdir + " --no-progress");
  ASSERT_EQ(t.code, 0) << t.err;
  int heads = 0;
  for (const auto& rec : records_of(tdir, "train.jsonl"))
    if (rec["step"] == 0) {
      EXPECT_EQ(rec["verified"], true) << rec["strategy"];
      ++heads;
    }
  EXPECT_EQ(heads, 3);
  const std::string on_ranks =
      replaced(replaced(train, "micro_batch: 4", "micro_batch: 2"), "stats_ep: 4", "stats_ep: 2") +
      "parallel: {ep: 2}\n";
  const Result rr = run("launch --nproc 2 " + write("train2.yaml", on_ranks) + " --out " + fresh_dir("verify_ranks"));
  EXPECT_EQ(rr.code, 2);
  EXPECT_NE(rr.err.find("verify: training on real ranks is not verified"), std::string::npos) << rr.err;
}

// 4. --resume refuses another configuration's records, naming what differs, and leaves them.
TEST(Trust, ResumeNeverMixesRuns) {
  const std::string a = std::string(kTiny);
  const std::string b = replaced(replaced(a, "name: tiny", "name: other"), "hidden: 16", "hidden: 32");
  const std::string dir = fresh_dir("mixed");
  ASSERT_EQ(run("run " + write("a.yaml", a) + " --out " + dir + " --no-progress").code, 0);
  const std::string before = slurp(dir + "/results.jsonl");
  const Result r = run("run " + write("b.yaml", b) + " --out " + dir + " --resume --no-progress");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("model.hidden: 16 there, 32 here"), std::string::npos) << r.err;
  EXPECT_EQ(slurp(dir + "/results.jsonl"), before);
  // A record whose config was edited by hand is not this point's.
  std::string edited = before;
  edited.replace(edited.find("\"hidden\":16"), 11, "\"hidden\":17");
  std::ofstream(dir + "/results.jsonl", std::ios::trunc) << edited;
  const Result e = run("run " + write("a.yaml", a) + " --out " + dir + " --resume --no-progress");
  EXPECT_EQ(e.code, 2);
  EXPECT_NE(e.err.find("results.jsonl:1: "), std::string::npos) << e.err;
  // A point the file does not have.
  const Result p = run("run " + write("a2.yaml", replaced(a, "model.seq: [16, 32]", "model.seq: [64]")) + " --out " +
                       dir + " --resume --no-progress");
  EXPECT_EQ(p.code, 2);
  EXPECT_NE(p.err.find("is not a point of this experiment"), std::string::npos) << p.err;
  // Training resumed with another learning rate: refused, not continued under the old head.
  const std::string train = replaced(slurp(kTinyTrain), "steps: 40", "steps: 12");
  const std::string tdir = fresh_dir("train_lr");
  const Result killed =
      run("train " + write("t.yaml", train) + " --out " + tdir + " --no-progress", "", killed_at_records(11));
  EXPECT_NE(killed.code, 0);
  const Result lr = run("train " + write("t2.yaml", replaced(train, "lr: 0.01", "lr: 0.02")) + " --out " + tdir +
                        " --resume --no-progress");
  EXPECT_EQ(lr.code, 2);
  EXPECT_NE(lr.err.find("train.lr: 0.01 there, 0.02 here"), std::string::npos) << lr.err;
}

// 5. Training records are the truth a resumed run continues from: a lost records file, a gap, a
// repeat, a checkpoint ahead of the records, damaged or foreign checkpoints.
class TrainResume : public ::testing::Test {
 protected:
  void SetUp() override {
    yaml_ = write(
        "resume.yaml",
        replaced(slurp(kTinyTrain), "strategies:\n  - no_recompute\n  - full_recompute\n  - {name: memfine, chunks: 2}",
                 "strategies: [no_recompute]"));
    whole_ = fresh_dir("whole");
    ASSERT_EQ(run("train " + yaml_ + " --out " + whole_ + " --no-progress").code, 0);
    // Killed after 15 steps: records 0..14, a checkpoint after step 9.
    killed_ = fresh_dir("killed");
    run("train " + yaml_ + " --out " + killed_ + " --no-progress", "", killed_at_records(15));
    ckpt_ = killed_ + "/checkpoints/base__no_recompute.ckpt";
    ASSERT_TRUE(fs::exists(ckpt_));
    records_ = slurp(killed_ + "/train.jsonl");
    pristine_ = slurp(ckpt_);
  }
  Result resume(bool flag = true) {
    return run("train " + yaml_ + " --out " + killed_ + (flag ? " --resume" : "") + " --no-progress");
  }
  // The resumed records equal the whole run's: every step once, the same losses to the bit.
  void expect_whole() {
    const auto got = records_of(killed_, "train.jsonl"), want = records_of(whole_, "train.jsonl");
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i]["step"], int64_t(i));
      EXPECT_EQ(got[i]["loss"], want[i]["loss"]) << "step " << i;
    }
    EXPECT_TRUE(got[0].contains("config")) << "the head record";
  }
  // Each damage is made to the checkpoint as the killed run wrote it, so one fixture serves many:
  // a refused resume writes nothing (expect_refused_naming_checkpoint checks the records).
  void set_checkpoint(const std::function<void(json& head, std::string& data)>& edit) {
    const std::string& bytes = pristine_;
    const size_t nl = bytes.find('\n');
    json head = json::parse(bytes.substr(0, nl));
    std::string data = bytes.substr(nl + 1);
    edit(head, data);
    std::ofstream(ckpt_, std::ios::binary | std::ios::trunc) << head.dump() << "\n" << data;
  }
  void expect_refused_naming_checkpoint(const std::string& why) {
    const Result r = resume();
    EXPECT_EQ(r.code, 1) << r.err;
    EXPECT_NE(r.err.find(ckpt_ + ": " + why), std::string::npos) << r.err;
    EXPECT_EQ(slurp(killed_ + "/train.jsonl"), records_) << "records already written are kept";
  }
  std::string yaml_, whole_, killed_, ckpt_, records_, pristine_;
};

TEST_F(TrainResume, KilledRunResumesAsWhole) {
  ASSERT_EQ(resume().code, 0);
  expect_whole();
}

TEST_F(TrainResume, RecordsLostWithTheCheckpointKeptStartOver) {
  fs::remove(killed_ + "/train.jsonl");
  const Result r = resume(false);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("past the last recorded step"), std::string::npos) << r.err;
  expect_whole();
}

TEST_F(TrainResume, ATornRecordAtTheCheckpointsStepIsWrittenAgain) {
  // Records 0..9 with step 9's line torn: the checkpoint holds step 9, the records step 8.
  std::istringstream in(records_);
  std::string kept, line;
  for (int i = 0; i < 9 && std::getline(in, line); ++i) kept += line + "\n";
  std::getline(in, line);
  std::ofstream(killed_ + "/train.jsonl", std::ios::trunc) << kept << line.substr(0, line.size() / 2);
  ASSERT_EQ(resume().code, 0);
  expect_whole();
}

TEST_F(TrainResume, AGapOrARepeatIsRefused) {
  std::istringstream in(records_);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  std::string gap, repeat;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i != 6) gap += lines[i] + "\n";
    repeat += lines[i] + "\n" + (i == 6 ? lines[i] + "\n" : "");
  }
  for (const auto& [text, why] :
       {std::make_pair(gap, "goes from step 5 to step 7"), std::make_pair(repeat, "is recorded twice")}) {
    std::ofstream(killed_ + "/train.jsonl", std::ios::trunc) << text;
    const Result r = resume();
    EXPECT_EQ(r.code, 2);
    EXPECT_NE(r.err.find(why), std::string::npos) << r.err;
    EXPECT_EQ(slurp(killed_ + "/train.jsonl"), text);
  }
}

TEST_F(TrainResume, AStepMovedInTheCheckpointIsRefused) {
  for (int64_t step : {23, -3}) {
    set_checkpoint([&](json& head, std::string&) { head["step"] = step; });
    expect_refused_naming_checkpoint(step < 0 ? "its 'step' is not an integer >= 0" : "its checksum does not match");
  }
}

TEST_F(TrainResume, DamagedCheckpointsAreRefused) {
  set_checkpoint([](json&, std::string& data) { std::fill(data.begin() + 64, data.begin() + 64 + 4096, '\0'); });
  expect_refused_naming_checkpoint("its checksum does not match its bytes");
  set_checkpoint([](json&, std::string& data) { data[1003] ^= 0x40; });  // an exponent bit
  expect_refused_naming_checkpoint("its checksum does not match its bytes");
  set_checkpoint([](json& head, std::string&) { head["step"] = "9"; });
  expect_refused_naming_checkpoint("its 'step' is not an integer >= 0");
  set_checkpoint([](json&, std::string& data) { data += "TRAILING"; });  // whatever its checksum says
  expect_refused_naming_checkpoint("bytes were added after its end");
  set_checkpoint([](json&, std::string& data) { data.resize(data.size() - 4); });
  expect_refused_naming_checkpoint("it is cut short");
  fs::remove(ckpt_);
  ASSERT_EQ(::mkfifo(ckpt_.c_str(), 0644), 0);
  expect_refused_naming_checkpoint("not a regular file");
}

// 6. Inputs that once passed validate and failed later, or never: refused by validate, FILE:LINE.
TEST(Trust, BadInputIsRefusedWhereItIsRead) {
  const std::string train = slurp(kTinyTrain);
  const Result vocab = run("validate " + write("vocab.yaml", replaced(train, "vocab: 256", "vocab: 100")));
  EXPECT_EQ(vocab.code, 2);
  EXPECT_NE(vocab.err.find("model.vocab: 100 is fewer than the byte tokenizer's 256"), std::string::npos) << vocab.err;
  const std::string corpus = scratch("short_corpus");
  fs::create_directories(corpus);
  {
    std::ofstream f(corpus + "/entries");
    for (int i = 0; i < 40; ++i) f << "abcd\n%\n";
  }
  const Result short_corpus =
      run("validate " + write("short.yaml", replaced(train, "stats_ep: 4}", "stats_ep: 4, corpus: " + corpus + "}")));
  EXPECT_EQ(short_corpus.code, 2);
  EXPECT_NE(short_corpus.err.find("_short_corpus: its held-out split has"), std::string::npos) << short_corpus.err;
  auto trace =
      [&](const std::string& rows) {
        std::ofstream(scratch("t.csv"), std::ios::binary | std::ios::trunc) << rows;
        return run("validate " + write("trace.yaml", R"(name: trace
model: {layers: 2, hidden: 16, heads: 2, kv_heads: 1, head_dim: 8, ffn_hidden: 16, experts: 4, topk: 2, seq: 16}
workload: {kind: trace, trace: )" + scratch("t.csv") + R"(, schedule: trace}
strategies: [no_recompute]
)"));
      };
  const std::vector<std::pair<std::string, std::string>> traces = {
      {"step,layer,expert,tokens\n0,0,0,5\n0,1,1,5\n1,0,2,5\n1,1,3,0\n", "t.csv:5: step 1, layer 1 routes no tokens"},
      {"step,layer,expert,tokens\n0,0,0,5\n0,-1,1,5\n1,0,2,5\n",
       "t.csv:3: step, layer, expert and tokens must be >= 0"},
      {std::string("step,layer,expert,tokens\n0,0,0,8\0junk\n1,0,1,3\n", 44),
       "t.csv:2: not integers: '0,0,0,8\\x00junk'"},
  };
  for (const auto& [rows, why] : traces) {
    const Result r = trace(rows);
    EXPECT_EQ(r.code, 2) << why;
    EXPECT_NE(r.err.find(why), std::string::npos) << r.err;
  }
  std::string huge = "step,layer,expert,tokens\n0,1,0,3\n1,0,0,3\n1,1,0,3\n";
  for (int i = 0; i < 2000; ++i) huge += "0,0,0,1099511627776\n";  // 2^40 each: past 2^50 in all
  const Result overflow = trace(huge);
  EXPECT_EQ(overflow.code, 2);
  EXPECT_NE(overflow.err.find("add up past 2^50"), std::string::npos) << overflow.err;
}

// 7. predict needs memory in proportion to the experts it reasons about, not to tokens: any file
// validate accepts predicts in under 1 GiB and 20 s.
TEST(Trust, PredictIsBoundedOnAnyValidFile) {
  int files = 0;
  auto big = [&](int layers, int experts, int seq, int ep, const std::string& extra, int hidden = 4096) {
    return write("big" + std::to_string(files++) + ".yaml",
                 "name: big\nwarmup: 0\nrepeats: 64\nmodel: {layers: " + std::to_string(layers) +
                     ", hidden: " + std::to_string(hidden) +
                     ", heads: 32, kv_heads: 8, head_dim: 128, ffn_hidden: 2048, experts: " + std::to_string(experts) +
                     ", topk: 8, seq: " + std::to_string(seq) + ", micro_batch: 16}\nparallel: {ep: " +
                     std::to_string(ep) + "}\nworkload: {kind: zipf, alpha: 1.2" + extra +
                     "}\nstrategies: [full_recompute, no_recompute, {name: memfine, chunks: 8}, {name: memfine, "
                     "chunks: auto}, capacity, {name: memfine, chunks: " +
                     std::to_string(seq) + "}]\n");
  };
  for (const std::string& yaml : {big(4096, 1024, 4096, 1024, ""), big(64, 65536, 1 << 20, 16, ""),
                                  big(1024, 64, 65536, 1, ", schedule: figure5"), big(4096, 65536, 1 << 20, 65536, ""),
                                  big(4, 64, 1 << 20, 8, "", 65536)}) {
    const Result v = run("validate " + yaml);
    const Result p = run("predict --json " + yaml, "", "ulimit -v 1048576; timeout 20 ");
    if (v.code != 0) {
      EXPECT_EQ(p.code, 2) << "predict accepts what validate refuses: " << v.err;
      continue;
    }
    EXPECT_EQ(p.code, 0) << slurp(yaml) << p.err;
  }
}

}  // namespace
}  // namespace memfine
