// The runner under faults and hostile input: nothing lost, nothing crashes, nothing hangs. Each
// case is one a hostile user tried (issue "Nothing lost, nothing crashes, nothing hangs").
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <random>
#include <thread>

#include "cli_testing.h"
#include "core/dist/dist.h"
#include "core/project/check.h"
#include "core/record/results.h"
#include "core/run/validate.h"

using namespace memfine::cli_test;
using memfine::json;

namespace {

// kTiny with one line replaced (`from` must occur in it).
std::string tiny_with(const std::string& from, const std::string& to) {
  std::string t = kTiny;
  const size_t at = t.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return at == std::string::npos ? t : t.replace(at, from.size(), to);
}

// Validates YAML text in this process: the errors (empty: valid).
std::vector<std::string> problems(const std::string& text) {
  const std::string path = write("in.yaml", text);
  std::vector<std::string> errors;
  memfine::load_and_validate(path, errors);
  return errors;
}

// `memfine launch --nproc 2` in the background, its stderr in scratch("launch.err"): the launcher's pid and, once
// it has started them (on a loaded machine, a while), its two ranks' (fewer: they did not start).
struct Launched {
  pid_t launcher = 0;
  std::vector<pid_t> ranks;
};
Launched launch_in_background(const std::string& yaml, const std::string& dir, const std::string& env) {
  const std::string pidfile = scratch("launch.pid");
  const std::string cmd = env + std::string(MEMFINE_BIN) + " launch --nproc 2 " + yaml + " --out " + dir +
                          " >/dev/null 2>" + scratch("launch.err") + " & echo $! > " + pidfile;
  Launched l;
  if (std::system(cmd.c_str()) != 0) return l;
  for (int tries = 0; tries < 200 && l.ranks.size() < 2; ++tries) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const std::string pid_text = slurp(pidfile);
    if (pid_text.empty()) continue;
    l.launcher = pid_t(std::stol(pid_text));
    l.ranks.clear();
    std::ifstream children("/proc/" + std::to_string(l.launcher) + "/task/" + std::to_string(l.launcher) + "/children");
    // A rank counts once it runs `memfine run`: stopped between posix_spawn's clone and its exec,
    // a child would hold the launcher inside posix_spawn, which no launcher can guard against.
    for (pid_t p; children >> p;)
      if (slurp("/proc/" + std::to_string(p) + "/cmdline").find(std::string("\0run\0", 5)) != std::string::npos)
        l.ranks.push_back(p);
  }
  return l;
}

// Whether a process has ended: gone, or a zombie its parent has not reaped.
bool has_ended(pid_t p) {
  const std::string stat = slurp("/proc/" + std::to_string(p) + "/stat");
  return stat.empty() || stat.find(") Z") != std::string::npos;
}

// A job that cannot end by itself while a test runs: tiny steps, very many of them.
std::string endless_yaml(const std::string& name) {
  std::string yaml = tiny_with("verify: true", "verify: false");
  yaml = yaml.replace(yaml.find("repeats: 1"), 10, "repeats: 1000000");
  return write(name, yaml);
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& e : v) s += e + "\n";
  return s;
}

}  // namespace

// Every example of the issue: a FILE:LINE: key: problem, exit 2 through the CLI, before anything runs.
TEST(Hostile, BadValuesAreErrorsWithFileLineAndKey) {
  const std::vector<std::tuple<std::string, std::string, std::string>> cases = {
      // {replace, with, expected in the errors}
      {"kv_heads: 1", "kv_heads: 0", "model.kv_heads: must be an integer in [1, 1024]"},
      {"parallel: {ep: 2}", "parallel: {ep: 0}", "parallel.ep: must be an integer in [1, 65536]"},
      {"model.seq: [16, 32]", "parallel.ep: [0, 2]", "parallel.ep: must be an integer in [1, 65536]"},
      {"heads: 2, kv_heads: 1", "heads: -9223372036854775808, kv_heads: -1", "model.heads: must be an integer in"},
      {"layers: 1,", "layers: 1000000000,", "model.layers: must be an integer in [1, 4096]"},
      {"model.seq: [16, 32]", "model.seq: [16, 9223372036854775807]", "model.seq: must be an integer in"},
      {"threads: 1", "threads: 99999", "threads: must be an integer in [0, 1024]"},
      {"threads: 1", "threads: 9223372036854775807", "threads: must be an integer in [0, 1024]"},
      {"warmup: 0", "warmup: 9223372036854775807", "warmup: must be an integer in [0, 1000000]"},
      {"alpha: 2.0", "alpha: .nan", "workload.alpha: must be a finite number"},
      {"alpha: 2.0", "alpha: 2.0, sigma: .inf", "workload.sigma: must be a finite number"},
      {"alpha: 2.0", "alpha: 2.0, hot_fraction: .nan", "workload.hot_fraction: must be a finite number"},
      {"alpha: 2.0", "alpha: 2.0, width: .nan", "workload.width: must be a finite number"},
      {"  - {name: memfine, chunks: 2}", "  - {name: memfine, chunks: auto, headroom: .nan}",
       "strategies[2].headroom: must be a finite number"},
      {"  - {name: memfine, chunks: 2}", "  - {name: capacity, capacity_factor: .inf}",
       "strategies[2].capacity_factor: must be a finite number"},
      {"  - {name: memfine, chunks: 2}", "  - {name: capacity, capacity_factor: 1e300}",
       "strategies[2].capacity_factor: must be a finite number in"},
      {"  - {name: memfine, chunks: 2}", "  - {name: memfine, chunks: auto, bins: [1, 1000000000000]}",
       "strategies[2].bins: must be a non-empty list of integers in [1, 16777216]"},
      {"  - {name: memfine, chunks: 2}", "  - {name: memfine, chunks: auto, bins: [1, 64]}",
       "exceeds the tokens per rank"},
      {"name: tiny", "name: tiny\nmemory: {budget: 9223372036854775808}",
       "memory.budget: '9223372036854775808' is larger"},
      {"name: tiny", "name: ../../../escaped", "name: must be a plain folder name"},
      {"name: tiny", "name: /abs/olute", "name: must be a plain folder name"},
      {"name: tiny", "name: ..", "name: '..' is not a folder name"},
      {"name: tiny", "name: .", "name: '.' is not a folder name"},
      {"name: tiny", "name: caf\xE9", "name: is not UTF-8"},
      {"seed: 2", "seed: 2\nmodel: {layers: 3}", "model: given twice (also at line"},
      {"strategies:\n  - no_recompute\n  - full_recompute\n  - {name: memfine, chunks: 2}", "strategies: []",
       "strategies: is empty"},
      {"seed: 2", "seed: !!binary 256", "seed: expected"},
      {"seed: 2", "seed: 2\n? [a]\n: 1", "(top): keys must be plain names"},
      {"model.seq: [16, 32]", "model.sequ: [16, 32]", ":15: model.sequ: unknown key"},
  };
  for (const auto& [from, to, want] : cases) {
    const auto errs = problems(tiny_with(from, to));
    EXPECT_FALSE(errs.empty()) << "accepted: " << to;
    if (errs.empty()) continue;
    EXPECT_NE(joined(errs).find(want), std::string::npos) << to << "\n" << joined(errs);
    // FILE:LINE: first
    EXPECT_EQ(errs[0].find(scratch("in.yaml") + ":"), 0u) << errs[0];
  }
  // Through the CLI: exit 2 (a crash would be 128 + its signal).
  for (const char* to : {"parallel: {ep: 0}", "kv_heads: 0"}) {
    const std::string from = to[0] == 'p' ? "parallel: {ep: 2}" : "kv_heads: 1";
    for (const char* cmd : {"validate", "predict"})
      EXPECT_EQ(run(std::string(cmd) + " " + write("c.yaml", tiny_with(from, to))).code, 2) << to;
  }
}

TEST(Hostile, SweepsAreLinearAndBounded) {
  // 11 keys x 64 values would wrap a size_t product of points: refused, not a segfault.
  std::string big = "name: big\nstrategies: [no_recompute]\nsweep:\n";
  for (const char* k : {"seed", "warmup", "repeats", "threads", "model.layers", "model.hidden", "model.heads",
                        "model.head_dim", "model.ffn_hidden", "model.seq", "model.micro_batch"}) {
    big += std::string("  ") + k + ": [";
    for (int i = 1; i <= 64; ++i) big += std::to_string(i) + (i < 64 ? "," : "]\n");
  }
  EXPECT_NE(joined(problems(big)).find("sweep: more than 10000 points"), std::string::npos);
  // 5000 points expand in linear time (was quadratic: 500 points took 35 s and 5 GB).
  std::string many = "name: many\nstrategies: [no_recompute]\nsweep:\n  seed: [";
  for (int i = 0; i < 5000; ++i) many += std::to_string(i) + (i < 4999 ? "," : "]\n");
  const auto t0 = std::chrono::steady_clock::now();
  const std::string path = write("many.yaml", many);
  std::vector<std::string> errors;
  EXPECT_EQ(memfine::load_and_validate(path, errors).size(), 5000u);
  EXPECT_TRUE(errors.empty());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20));
}

// A billion laughs: ten anchors, each a list of ten of the one before, a few hundred bytes that
// name 10^9 elements. Under any key, a strategy's parameters included, refused at once with
// FILE:LINE, never expanded (one strategy parameter reader once took over a minute on it).
std::string laughs(const std::string& indent) {
  std::string out = indent + "x0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n";
  for (int i = 1; i <= 9; ++i) {
    out += indent + "x" + std::to_string(i) + ": &a" + std::to_string(i) + " [";
    for (int j = 0; j < 10; ++j) out += "*a" + std::to_string(i - 1) + (j < 9 ? ", " : "]\n");
  }
  return out;
}

TEST(Hostile, AliasBombsAreRefusedAtOnce) {
  // The anchors sit in a strategy's map (its unknown keys), then the bomb is used under each key.
  const std::string head = "name: bomb\nstrategies:\n  - name: capacity\n" + laughs("    ");
  struct Case {
    std::string where, yaml, says;
  };
  const std::vector<Case> cases = {
      {"a strategy's count", head + "  - {name: memfine, chunks: *a9}\n", "strategies[1].chunks"},
      {"a strategy's number", head + "  - {name: capacity, capacity_factor: *a9}\n", "strategies[1].capacity_factor"},
      {"a strategy's list", head + "  - {name: memfine, chunks: auto, bins: *a9}\n", "strategies[1].bins"},
      {"a strategy's name", head + "  - {name: *a9}\n", "strategies[1]"},
      {"a section's key", head + "model: {seq: *a9}\n", "model.seq"},
      {"a top key", head + "seed: *a9\n", "seed"},
      {"a sweep", head + "sweep: {model.seq: *a9}\n", "model.seq"},
  };
  for (const Case& c : cases) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::string path = write("bomb.yaml", c.yaml);
    std::vector<std::string> errors;
    memfine::load_and_validate(path, errors);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_FALSE(errors.empty()) << c.where;
    EXPECT_NE(joined(errors).find(c.says), std::string::npos) << c.where << ": " << joined(errors);
    EXPECT_LT(s, 5.0) << c.where << ": a bomb must not be expanded";
  }
  // A project file's keys, its strategies included.
  const std::string project = "hardware: h100_80gb\nmodel: deepseek_v3\ngpus: 8\nglobal_batch: 8\nimbalance:\n" +
                              laughs("  ") + "strategies: [{name: memfine, chunks: *a9}]\nsearch: {tp: *a9}\n";
  const auto t0 = std::chrono::steady_clock::now();
  try {
    memfine::load_project(write("bomb_project.yaml", project),
                          std::string(MEMFINE_TESTS_DIR) + "/../experiments/project");
    ADD_FAILURE() << "a project bomb was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("search.tp"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("strategies[0].chunks"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
}

// `memfine project` neither crashes nor grows without bound on values each within its key's range,
// and prints no number that is not a result: a product of layout values beyond 64 bits, a pipeline
// layout that unrolls past any model, a search of millions of layouts, a rate of 0.
TEST(Hostile, ProjectionsAreBoundedAndTheirNumbersResults) {
  const std::string presets = std::string(MEMFINE_TESTS_DIR) + "/../experiments/project";
  const std::string base = "model: mixtral_8x7b\ngpus: 64\nglobal_batch: 512\nstrategies: [full_recompute]\n";
  auto project = [&](const std::string& name, const std::string& text) {
    return run("project " + write(name, text) + " --presets " + presets);
  };
  Result wide = project("wide.yaml", "hardware: h100_80gb\n" + std::string(base).replace(base.find("64"), 2, "16777216") +
                                         "search: {tp: [1], pp: [1], ep: [1], micro_batch: [1048576], "
                                         "grad_accumulation: [1048576]}\n");
  EXPECT_NE(wide.code, 128 + SIGFPE) << wide.err;
  EXPECT_EQ(wide.code, 0) << wide.err;  // every layout rejected, said as such
  const auto t0 = std::chrono::steady_clock::now();
  Result layout = project("unroll.yaml", "hardware: h100_80gb\n" + base + "pipeline_layout: \"(t*999999)*999999\"\n");
  EXPECT_EQ(layout.code, 2);
  EXPECT_NE(layout.err.find("unroll.yaml:6: pipeline_layout: unrolls to more than"), std::string::npos) << layout.err;
  std::string axes;
  for (const char* k : {"tp", "pp", "ep", "cp", "micro_batch", "vpp", "grad_accumulation"})
    axes += std::string(axes.empty() ? "" : ", ") + k + ": [1,2,3,4,5,6,7]";
  Result search = project("search.yaml", "hardware: h100_80gb\n" + base + "search: {" + axes + "}\n");
  EXPECT_EQ(search.code, 2);
  EXPECT_NE(search.err.find("search.yaml:6: search: its axes' combinations"), std::string::npos) << search.err;
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 20.0);
  Result rate = project("rate.yaml", "hardware: {memory_gb: 80, gpus_per_node: 8, gemm_tflops: 600, "
                                     "attention_tflops: 400, grouped_gemm_tflops: 500, grouped_gemm_small_tflops: 100, "
                                     "nvlink_gb_s: 0, network_gb_s: 40, hbm_gb_s: 3000}\n" + base);
  EXPECT_EQ(rate.code, 2);
  EXPECT_NE(rate.err.find("rate.yaml:1: hardware.nvlink_gb_s: must be a finite number in [1e-06"), std::string::npos)
      << rate.err;
  Result gpus = project("gpus.yaml", "hardware: h100_80gb\n" + std::string(base).replace(base.find("64"), 2, "0"));
  EXPECT_EQ(gpus.code, 2);
  EXPECT_EQ(gpus.err.find("gpus: missing"), std::string::npos) << gpus.err;
}

// What an experiment refuses, `project` refuses alike, with the file's line.
TEST(Hostile, ProjectRefusesWhatAnExperimentRefuses) {
  const std::string presets = std::string(MEMFINE_TESTS_DIR) + "/../experiments/project";
  const std::string base = "hardware: h100_80gb\nmodel: mixtral_8x7b\ngpus: 64\nglobal_batch: 512\n";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"imbalance: {kind: pareto}\n", "imbalance.kind: 'pareto' is not one of"},
      {"imbalance: {kind: zipf, alpah: 1}\n", "imbalance.alpah: unknown key"},
      {"imbalance: {kind: router}\n", "imbalance.kind: 'router' decides at run time"},
      {"imbalance: {kind: hot, hot_experts: 99}\n", "imbalance: hot_experts (99) exceeds experts (8)"},
      {"strategies: [{name: chunked_ep, chunks: 1073741824}]\n", "chunks: 1073741824 exceeds the tokens per rank"},
      {"strategies: [{name: memfine, chunks: [2, 4]}]\n", "the per-layer list has 2 counts for 32 layers"},
      {"framework: {workspace_gb: -0.5}\n", "framework.workspace_gb: -1 (the framework's) or at least 0"},
      {"framework: {ep_overlap_hidden: 0.5}\n", "framework.ep_overlap_hidden: says how much"},
      {"framework: {compile_loss: true}\n", "framework.compile_loss: is torchtitan's"},
      {"framework: {name: torchtitan, loss: chunked, compile_loss: true}\n",
       "framework.compile_loss: picks the loss under `loss: auto`, but framework.loss names chunked"}};
  for (const auto& [text, says] : cases) {
    Result r = run("project " + write("refused.yaml", base + text) + " --presets " + presets);
    EXPECT_EQ(r.code, 2) << text;
    EXPECT_NE(r.err.find("refused.yaml:5: "), std::string::npos) << text << r.err;
    EXPECT_NE(r.err.find(says), std::string::npos) << text << r.err;
  }
  // An overload given outright is no overload at EP 1: one rank holds every expert.
  Result ep1 = run("project " + write("ep1.yaml", base + "imbalance: {overload: 9}\nsearch: {ep: [1]}\n") +
                   " --presets " + presets + " --json");
  ASSERT_EQ(ep1.code, 0) << ep1.err;
  EXPECT_EQ(ep1.out.find("\"worst\":9"), std::string::npos) << ep1.out.substr(0, 600);
  EXPECT_NE(ep1.out.find("\"worst\":1.0"), std::string::npos) << ep1.out.substr(0, 600);
  // A stash's pool is whole pages: one page of 2^30 rows does not fit.
  Result pages = run("project " + write("pages.yaml", base + "strategies: [{name: paged_stash, page_rows: 1073741824}]\n") +
                     " --presets " + presets + " --json");
  ASSERT_EQ(pages.code, 0) << pages.err;
  EXPECT_EQ(pages.out.find("\"fits\":true"), std::string::npos) << pages.out.substr(0, 600);
  // predict's Figure 2 is a CSV of its rows, not a folder or any text.
  const std::string paper = std::string(MEMFINE_TESTS_DIR) + "/../experiments/paper_table4.yaml";
  std::ifstream in(paper);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  const size_t at = text.find("figure2: ");
  ASSERT_NE(at, std::string::npos);
  const size_t end = text.find('\n', at);
  for (const std::string& csv : {memfine::test_util::scratch_root(), write("fig2.txt", "hello\nworld\n")}) {
    Result r = run("predict " + write("fig2.yaml", text.substr(0, at) + "figure2: " + csv + text.substr(end)));
    EXPECT_EQ(r.code, 2) << csv;
    EXPECT_NE(r.err.find("paper.figure2: "), std::string::npos) << r.err;
  }
}

TEST(Hostile, FilesThatAreNotExperiments) {
  // A missing file gives the OS's reason and no invented line; a folder, a FIFO and a second
  // document are refused; none hangs.
  Result missing = run("validate /nonexistent/x.yaml");
  EXPECT_EQ(missing.code, 2);
  EXPECT_NE(missing.err.find("/nonexistent/x.yaml: cannot read: No such file or directory"), std::string::npos)
      << missing.err;
  Result folder = run("validate " + memfine::test_util::scratch_root());
  EXPECT_EQ(folder.code, 2);
  EXPECT_NE(folder.err.find("not a regular file"), std::string::npos) << folder.err;
  const std::string fifo = scratch("fifo.yaml");
  ::unlink(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  Result f = run("validate " + fifo);
  EXPECT_EQ(f.code, 2);
  EXPECT_NE(joined(problems(std::string(kTiny) + "---\nname: second\n")).find("a second YAML document"),
            std::string::npos);
  // Traces: fractional or exponent fields are not integers; /dev/zero and a FIFO are no trace.
  const std::string csv = write("t.csv", "layer,expert,tokens\n0,1.9,1e3\n");
  EXPECT_NE(
      joined(problems(tiny_with("{kind: zipf, alpha: 2.0}", "{kind: trace, trace: " + csv + "}"))).find("not integers"),
      std::string::npos);
  EXPECT_NE(joined(problems(tiny_with("{kind: zipf, alpha: 2.0}", "{kind: trace, trace: /dev/zero}")))
                .find("not a regular file"),
            std::string::npos);
  EXPECT_NE(joined(problems(tiny_with("{kind: zipf, alpha: 2.0}", "{kind: trace, trace: " + fifo + "}")))
                .find("not a regular file"),
            std::string::npos);
}

TEST(Hostile, FlagsAreParsedStrictly) {
  const std::string yaml = write("tiny.yaml", kTiny);
  for (const char* t : {"1e3", "2.9", "4294967297", "-1", ""})
    EXPECT_EQ(run("run " + yaml + " --out " + fresh_dir("f") + " --threads '" + t + "'").code, 2) << t;
  EXPECT_EQ(run("launch --nproc 2x " + yaml).code, 2);
  Result out = run("run " + yaml + " --out ''");
  EXPECT_EQ(out.code, 2);
  EXPECT_NE(out.err.find("--out needs DIR"), std::string::npos) << out.err;
  // launch --nproc 1 of an ep: 2 file would quietly emulate, --nproc 3 would start 3 ranks that
  // each say so: refused once, before any rank starts.
  for (const char* n : {"1", "3"}) {
    Result r = run(std::string("launch --nproc ") + n + " " + yaml + " --out " + fresh_dir("n"));
    EXPECT_EQ(r.code, 2);
    const std::string msg = std::string("but the job has ") + n + " rank(s)";
    EXPECT_NE(r.err.find(msg), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find(msg), r.err.rfind(msg)) << "said more than once:\n" << r.err;
  }
  // A rank started by another launcher with WORLD_SIZE=1 of an ep: 2 file: refused too.
  Result one = run("run " + yaml + " --out " + fresh_dir("one"), "", "WORLD_SIZE=1 RANK=0 ");
  EXPECT_EQ(one.code, 2);
  EXPECT_NE(one.err.find("the job has 1 rank(s)"), std::string::npos) << one.err;
}

TEST(ResultsFolder, DamagedOrOddResultsFilesAreRefusedUntouched) {
  const std::string yaml = write("tiny.yaml", kTiny);
  // One line of non-JSON without a newline is not a torn record after good ones: refused.
  std::string dir = fresh_dir("junk");
  fs::create_directories(dir);
  std::ofstream(dir + "/results.jsonl") << "hello";
  Result r = run("run " + yaml + " --out " + dir + " --resume");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(slurp(dir + "/results.jsonl"), "hello");
  // A record whose point is a number.
  std::ofstream(dir + "/results.jsonl", std::ios::trunc)
      << R"({"experiment":"x","point":3,"strategy":"s","status":"ok"})"
      << "\n";
  EXPECT_EQ(run("run " + yaml + " --out " + dir + " --resume").code, 2);
  // A symbolic link and a FIFO as results.jsonl.
  dir = fresh_dir("link");
  fs::create_directories(dir);
  fs::create_symlink(scratch("elsewhere.jsonl"), dir + "/results.jsonl");
  Result l = run("run " + yaml + " --out " + dir + " --resume");
  EXPECT_EQ(l.code, 2);
  EXPECT_NE(l.err.find("symbolic link"), std::string::npos) << l.err;
  dir = fresh_dir("fifo");
  fs::create_directories(dir);
  ASSERT_EQ(::mkfifo((dir + "/results.jsonl").c_str(), 0644), 0);
  EXPECT_EQ(run("run " + yaml + " --out " + dir + " --resume").code, 2);
  // A folder that cannot be made is found before anything is measured, with the OS's reason.
  const std::string file = write("plain.txt", "x");
  Result nf = run("run " + yaml + " --out " + file + "/sub");
  EXPECT_EQ(nf.code, 2);
  EXPECT_NE(nf.err.find("Not a directory"), std::string::npos) << nf.err;
}

// The readers (`table`, `--csv`, `compare`) refuse, with the file and why, what is not a record: a
// folder or a FIFO named results.jsonl (without blocking), a field of the wrong type, a number that
// is not a result; `--resume` says which record has no status.
TEST(ResultsFolder, ReadersRefuseWhatIsNotARecord) {
  const std::string dir = fresh_dir("readers");
  fs::create_directories(dir + "/as_folder/results.jsonl");
  fs::create_directories(dir + "/fifo");
  ASSERT_EQ(::mkfifo((dir + "/fifo/results.jsonl").c_str(), 0644), 0);
  for (const char* folder : {"as_folder", "fifo"})
    for (const std::string& cmd : std::vector<std::string>{"table ", "table --csv ", "compare " + dir + "/as_folder "}) {
      Result r = run(cmd + dir + "/" + folder);
      EXPECT_EQ(r.code, 2) << cmd << folder;
      EXPECT_NE(r.err.find("results.jsonl"), std::string::npos) << cmd << folder << ": " << r.err;
    }
  const std::string good = R"({"experiment":"x","point":"base","strategy":"s","status":"ok",)";
  for (const std::string& bad : std::vector<std::string>{good + R"("step_ms":"fast"})", good + R"("step_ms":{"median":-3.0}})",
                                 good + R"("peak_activation_bytes":-5})", good + R"("step_ms":1e999})"}) {
    fs::create_directories(dir + "/bad");
    std::ofstream(dir + "/bad/results.jsonl", std::ios::trunc) << bad << "\n";
    for (const char* cmd : {"table ", "table --csv "}) {
      Result r = run(cmd + dir + "/bad");
      EXPECT_EQ(r.code, 2) << cmd << bad;
      EXPECT_NE(r.err.find("results.jsonl:1:"), std::string::npos) << cmd << bad << ": " << r.err;
    }
  }
  // A folder holding two runs' records is no one run to compare.
  fs::create_directories(dir + "/one"), fs::create_directories(dir + "/two");
  const std::string rec = R"({"experiment":"x","point":"base","strategy":"s","status":"ok","config":{"seed":1}})";
  std::ofstream(dir + "/one/results.jsonl") << rec << "\n";
  std::ofstream(dir + "/two/results.jsonl") << rec << "\n"
                                            << R"({"experiment":"y","point":"base","strategy":"s","status":"ok",)"
                                            << R"("config":{"seed":2}})" << "\n";
  Result mixed = run("compare " + dir + "/one " + dir + "/two");
  EXPECT_EQ(mixed.code, 2);
  EXPECT_NE(mixed.err.find("holds the records of 2 runs"), std::string::npos) << mixed.err;
  std::ofstream(dir + "/bad/results.jsonl", std::ios::trunc) << R"({"experiment":"x","point":"base","strategy":"s"})"
                                                             << "\n";
  Result r = run("run " + write("tiny.yaml", kTiny) + " --out " + dir + "/bad --resume");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("results.jsonl:1: not a results record"), std::string::npos) << r.err;
}

// A full disk, injected with a file-size limit (RLIMIT_FSIZE: writes past it fail with EFBIG, as
// writes to a full disk fail with ENOSPC): nothing already written is lost, nothing is torn.
// `verify: true` checks a strategy under the budget its steps run under: what needs more than the
// budget is out of memory there too (a result), not an allocator's failure recorded as an error.
TEST(Hostile, VerifyKeepsTheBudgetsOutcome) {
  std::string text = kTiny;
  text.replace(text.find("seed: 2"), 7, "seed: 2\nmemory: {budget: 64MiB}");
  text.replace(text.find("  - {name: memfine, chunks: 2}"), 30, "  - {name: paged_stash, device_factor: 1000000}");
  const std::string dir = fresh_dir("verify_budget");
  Result r = run("run " + write("verify_budget.yaml", text) + " --out " + dir);
  EXPECT_EQ(r.code, 0) << r.err;
  int stash = 0;
  for (const auto& rec : memfine::read_results(dir + "/results.jsonl")) {
    if (rec.at("name") != "paged_stash") continue;
    ++stash;
    EXPECT_EQ(rec.at("status"), "oom") << rec.dump();
    EXPECT_NE(rec.at("error").get<std::string>().find("activations exceed the budget"), std::string::npos);
  }
  EXPECT_EQ(stash, 2);
}

TEST(ResultsFolder, AFullDiskLosesNothing) {
  const std::string yaml = write("tiny.yaml", kTiny);
  const std::string dir = fresh_dir("full");
  ASSERT_EQ(run("run " + yaml + " --out " + dir).code, 0);
  const std::string path = dir + "/results.jsonl";
  std::vector<std::string> lines;
  {
    std::ifstream in(path);
    for (std::string l; std::getline(in, l);) lines.push_back(l);
  }
  ASSERT_EQ(lines.size(), 6u);
  // Two whole records and a torn third; resume while the "disk" holds less than their rewrite.
  {
    std::ofstream out(path, std::ios::trunc);
    out << lines[0] << "\n" << lines[1] << "\n" << lines[2].substr(0, 100);
  }
  const std::string before = slurp(path);
  const size_t blocks = (lines[0].size() + 1) / 512;  // less than two records
  const std::string limit = "trap '' XFSZ; ulimit -f " + std::to_string(blocks) + "; ";
  Result r = run("run " + yaml + " --out " + dir + " --resume", "", limit);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("File too large"), std::string::npos) << r.err;  // the OS's reason
  EXPECT_EQ(slurp(path), before);                                       // the original, as it was
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  // Appending past the limit: the run stops at the first record that does not fit, the ones
  // before stay whole, and a resume with room completes the rest without duplicates.
  const std::string dir2 = fresh_dir("full2");
  const size_t room = (lines[0].size() + lines[1].size() + 2 + lines[2].size() / 2) / 512;
  Result a = run("run " + yaml + " --out " + dir2, "", "trap '' XFSZ; ulimit -f " + std::to_string(room) + "; ");
  EXPECT_EQ(a.code, 1);
  EXPECT_NE(a.err.find("cannot write a record"), std::string::npos) << a.err;
  const auto kept = memfine::read_results(dir2 + "/results.jsonl");  // whole records only
  EXPECT_GE(kept.size(), 1u);
  EXPECT_LT(kept.size(), 6u);
  ASSERT_EQ(run("run " + yaml + " --out " + dir2 + " --resume").code, 0);
  const auto all = memfine::read_results(dir2 + "/results.jsonl");
  std::set<std::pair<std::string, std::string>> keys;
  for (const auto& rec : all) keys.insert({rec["point"].get<std::string>(), rec["strategy"].get<std::string>()});
  EXPECT_EQ(all.size(), 6u);
  EXPECT_EQ(keys.size(), 6u);
}

// One run per results folder: a second fails at once, exit 2, naming the holder's pid.
TEST(ResultsFolder, ASecondRunIntoOneFolderIsRefused) {
  const std::string yaml = write("tiny.yaml", kTiny);
  const std::string dir = fresh_dir("locked");
  fs::create_directories(dir);
  const int fd = ::open((dir + "/.memfine.lock").c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
  const std::string pid = std::to_string(::getpid());
  ASSERT_EQ(::pwrite(fd, pid.data(), pid.size(), 0), ssize_t(pid.size()));
  for (const char* extra : {"", " --resume"}) {
    const auto t0 = std::chrono::steady_clock::now();
    Result r = run("run " + yaml + " --out " + dir + extra);
    EXPECT_EQ(r.code, 2);
    EXPECT_NE(r.err.find("in use by another run (pid " + pid + ")"), std::string::npos) << r.err;
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  }
  EXPECT_FALSE(fs::exists(dir + "/results.jsonl") && fs::file_size(dir + "/results.jsonl") > 0);
  ::close(fd);  // released: the next run goes ahead
  EXPECT_EQ(run("run " + yaml + " --out " + dir).code, 0);
}

// A rank that hangs (stopped from outside, as a wedged process would be) instead of dying: launch
// ends the job in bounded time.
TEST(Launch, AHungRankEndsTheJobInBoundedTime) {
  const auto t0 = std::chrono::steady_clock::now();
  const Launched l =
      launch_in_background(endless_yaml("hang.yaml"), fresh_dir("hang"), "MEMFINE_COLLECTIVE_TIMEOUT=3 ");
  ASSERT_EQ(l.ranks.size(), 2u);
  ASSERT_EQ(::kill(l.ranks[1], SIGSTOP), 0);
  bool ended = false;
  // The launcher is the shell's child, not ours: wait for it to go.
  while (!ended && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(60)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ended = has_ended(l.launcher);
  }
  const auto took = std::chrono::steady_clock::now() - t0;
  if (!ended) ::kill(l.launcher, SIGKILL), ::kill(l.ranks[1], SIGKILL), ::kill(l.ranks[0], SIGKILL);
  EXPECT_TRUE(ended) << "the job did not end with a stopped rank";
  EXPECT_NE(slurp(scratch("launch.err")).find("killing it"), std::string::npos) << slurp(scratch("launch.err"));
  EXPECT_LT(took, std::chrono::seconds(40));
  for (pid_t p : l.ranks) EXPECT_TRUE(has_ended(p)) << "rank pid " << p << " outlived the job";
}

// Over the budget on real ranks: a rank cannot stop mid-step while the others wait in its
// collectives, so the step runs whole, every rank records "oom" for that strategy, and the job goes
// on to the next (out of memory is a result). Rank 0's peaks: about 49 KiB stored or recomputed
// whole, 35 KiB in 2 chunks, against 41 KiB of room.
TEST(Launch, OutOfMemoryOnRealRanksIsAResult) {
  std::string yaml = tiny_with("verify: true", "verify: false\nmemory: {budget: 182000}");
  yaml = yaml.substr(0, yaml.find("sweep:"));
  const std::string dir = fresh_dir("oom");
  Result r = run("launch --nproc 2 " + write("oom.yaml", yaml) + " --out " + dir);
  ASSERT_EQ(r.code, 0) << r.err;
  std::map<std::string, std::vector<std::string>> status;  // strategy -> per rank
  std::istringstream in(slurp(dir + "/results.jsonl"));
  for (std::string line; std::getline(in, line);) {
    const json rec = json::parse(line);
    status[rec["strategy"].get<std::string>()].push_back(rec["status"].get<std::string>());
    if (rec["status"] == "oom")
      EXPECT_NE(rec["error"].get<std::string>().find("the fullest rank reached"), std::string::npos) << rec["error"];
  }
  EXPECT_EQ(status["no_recompute"], (std::vector<std::string>{"oom", "oom"}));
  EXPECT_EQ(status["full_recompute"], (std::vector<std::string>{"oom", "oom"}));
  EXPECT_EQ(status["memfine(chunks=2)"], (std::vector<std::string>{"ok", "ok"}));
}

// Two machines, played by two launches on loopback (node 0 and node 1, one rank each): one job,
// as one launch of two ranks runs it. Node 0 writes the records; node 1 writes nothing.
TEST(Launch, TwoNodesOnLoopbackAreOneJob) {
  std::string yaml = tiny_with("verify: true", "verify: false");
  yaml = write("nodes.yaml", yaml.substr(0, yaml.find("sweep:")));
  const std::string one = fresh_dir("one_launch"), two = scratch("two_nodes"), other = scratch("node1_out");
  ASSERT_EQ(run("launch --nproc 2 --threads 1 " + yaml + " --out " + one + " --no-progress").code, 0);
  // Node 1 in the background (the shell's &), node 0 here; both must end well. Their store is on
  // loopback, which LibTorch 1.13 cannot bind to alone: asked for, as a 1.13 user must. A port found
  // free can be taken before the store listens at it (another test's outgoing connection): then the
  // job is run again at another, as a user would pick another --master-port.
  Result r;
  for (int attempt = 0; attempt < 3; ++attempt) {
    fs::remove(scratch("node1_code")), fs::remove_all(two), fs::remove_all(other);
    const std::string port = std::to_string(memfine::free_loopback_port());
    const std::string node =
        "launch --nproc 1 --nnodes 2 --master-addr 127.0.0.1 --master-port " + port + " --threads 1 ";
    r = run(node + "--node-rank 0 " + yaml + " --out " + two + " --no-progress", "",
            "export MEMFINE_STORE_ANY_INTERFACE=1; ( " + std::string(MEMFINE_BIN) + " " + node + "--node-rank 1 " +
                yaml + " --out " + other + " >/dev/null 2>&1; echo $? > " + scratch("node1_code") + " ) & ");
    for (int i = 0; i < 100 && slurp(scratch("node1_code")).empty(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (r.code == 0 || r.err.find("in use") == std::string::npos) break;
  }
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(slurp(scratch("node1_code")), "0\n");
  EXPECT_FALSE(fs::exists(other + "/results.jsonl")) << "only node 0's rank 0 writes the records";
  const auto a = memfine::read_results(one + "/results.jsonl"), b = memfine::read_results(two + "/results.jsonl");
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(b[i]["rank"], a[i]["rank"]);
    EXPECT_EQ(b[i]["loss"], a[i]["loss"]) << a[i]["strategy"];
    EXPECT_EQ(b[i]["tokens_received"], a[i]["tokens_received"]);
    // Gloo's own threads allocate through the same meter at their own moments: peaks agree to 2%
    // or 16 KiB (two launches of one node differ as much under load at this tiny size).
    const double want = a[i]["peak_activation_bytes"].get<double>();
    EXPECT_NEAR(b[i]["peak_activation_bytes"].get<double>(), want, std::max(0.02 * want, 16384.0)) << a[i]["strategy"];
  }
}

// Killing launch kills its ranks: no orphan goes on writing.
TEST(Launch, RanksDieWithTheLauncher) {
  // The job cannot end by itself before the launcher is killed.
  const Launched l = launch_in_background(endless_yaml("orphans.yaml"), fresh_dir("orphans"), "");
  const pid_t launcher = l.launcher;
  const std::vector<pid_t> ranks = l.ranks;
  ASSERT_EQ(ranks.size(), 2u);
  std::this_thread::sleep_for(std::chrono::seconds(1));
  ASSERT_EQ(::kill(launcher, SIGKILL), 0);
  // A rank still loading LibTorch when the launcher dies has not yet asked to die with it; it ends
  // on finding its launcher gone (join_job). Under load that can take seconds, so wait, bounded.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!std::all_of(ranks.begin(), ranks.end(), has_ended) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  for (pid_t p : ranks) {
    EXPECT_TRUE(has_ended(p)) << "rank pid " << p << " still alive";
    if (!has_ended(p)) ::kill(p, SIGKILL);
  }
}

// Hundreds of generated mutants of a valid experiment through validation, each in a child
// process with a time limit: none crashes (a signal), none hangs.
TEST(Fuzz, MutantsNeitherCrashNorHang) {
  const std::string base = slurp(std::string(MEMFINE_TESTS_DIR) + "/../experiments/quickstart.yaml");
  ASSERT_FALSE(base.empty());
  const std::vector<std::string> values = {"0",
                                           "-1",
                                           "1",
                                           "2",
                                           "3",
                                           "7",
                                           "-9223372036854775808",
                                           "9223372036854775807",
                                           "18446744073709551616",
                                           "1e308",
                                           "-1e308",
                                           ".nan",
                                           ".inf",
                                           "-.inf",
                                           "0.5",
                                           "1000000000",
                                           "''",
                                           "\"\"",
                                           "[]",
                                           "{}",
                                           "[1, 0]",
                                           "null",
                                           "~",
                                           "true",
                                           "auto",
                                           "!!binary 256",
                                           "\"\\xff\"",
                                           "..",
                                           "/",
                                           "a: b"};
  std::mt19937_64 rng(20261123);
  int crashes = 0, hangs = 0, valid = 0, refused = 0;
  std::string first_bad;
  const int kMutants = 400;
  for (int m = 0; m < kMutants; ++m) {
    std::string text = base;
    // 1-3 edits: a scalar value replaced, a line dropped or duplicated, a character flipped.
    const int edits = 1 + int(rng() % 3);
    for (int e = 0; e < edits; ++e) {
      const int kind = int(rng() % 4);
      std::vector<size_t> starts = {0};
      for (size_t i = 0; i < text.size(); ++i)
        if (text[i] == '\n' && i + 1 < text.size()) starts.push_back(i + 1);
      const size_t line = starts[rng() % starts.size()];
      const size_t end = text.find('\n', line) == std::string::npos ? text.size() : text.find('\n', line);
      if (kind == 0) {  // a value after ": "
        const size_t colon = text.find(": ", line);
        if (colon == std::string::npos || colon >= end) continue;
        size_t vend = colon + 2;
        while (vend < end && text[vend] != ',' && text[vend] != '}' && text[vend] != '#') ++vend;
        text.replace(colon + 2, vend - colon - 2, values[rng() % values.size()]);
      } else if (kind == 1) {
        text.erase(line, end - line);
      } else if (kind == 2) {
        text.insert(line, text.substr(line, end - line) + "\n");
      } else if (!text.empty()) {
        text[rng() % text.size()] = "{}[]:,-#&*!|>'\"%@ 0\n"[rng() % 20];
      }
    }
    const std::string path = scratch("mutant.yaml");
    std::ofstream(path, std::ios::trunc) << text;
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::alarm(10);  // a hang ends as SIGALRM, counted below
      std::vector<std::string> errors;
      memfine::load_and_validate(path, errors);
      ::_exit(errors.empty() ? 0 : 2);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM)
      ++hangs;
    else if (WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) != 0 && WEXITSTATUS(status) != 2))
      ++crashes;
    else if (WEXITSTATUS(status) == 0)
      ++valid;
    else
      ++refused;
    if ((WIFSIGNALED(status) || (WEXITSTATUS(status) != 0 && WEXITSTATUS(status) != 2)) && first_bad.empty())
      first_bad = text;
  }
  std::cout << kMutants << " mutants: " << valid << " valid, " << refused << " refused, " << crashes << " crashed, "
            << hangs << " hung\n";
  EXPECT_EQ(crashes, 0) << "first:\n" << first_bad;
  EXPECT_EQ(hangs, 0) << "first:\n" << first_bad;
  EXPECT_GT(refused, kMutants / 4);  // the mutants do reach the checks
}
