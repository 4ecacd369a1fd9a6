// Running the built `memfine` binary from tests: scratch files, a run with its exit code and
// output, and a tiny experiment.
#pragma once
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "scratch.h"

namespace memfine::cli_test {

namespace fs = std::filesystem;

// Per-test file names: ctest runs the tests in parallel processes.
inline std::string scratch(const std::string& name) {
  return test_util::scratch_root() + "/" + ::testing::UnitTest::GetInstance()->current_test_info()->name() + "_" + name;
}

struct Result {
  int code;
  std::string out, err;
};

// A whole file's bytes ("" when it cannot be read).
inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs memfine with `args`, in the folder `cwd` when given, after the shell commands `before`
// (environment, limits).
inline Result run(const std::string& args, const std::string& cwd = "", const std::string& before = "") {
  const std::string out = scratch("stdout.txt"), err = scratch("stderr.txt");
  const std::string cmd = (cwd.empty() ? "" : "cd '" + cwd + "' && ") + before + std::string(MEMFINE_BIN) + " " + args +
                          " >" + out + " 2>" + err;
  const int status = std::system(cmd.c_str());
  return {WEXITSTATUS(status), slurp(out), slurp(err)};
}

// `run`'s `before` that kills memfine (SIGKILL) once `file` in its results folder holds `lines`
// records (tests/kill_at_records.cpp, preloaded: memfine has no hook for it).
inline std::string killed_at_records(int lines, const std::string& file = "train.jsonl") {
  return "LD_PRELOAD=" + std::string(MEMFINE_KILL_LIB) + " MEMFINE_TEST_KILL_FILE=" + file +
         " MEMFINE_TEST_KILL_AT_LINES=" + std::to_string(lines) + " ";
}

inline std::string write(const std::string& name, const std::string& text) {
  const std::string path = scratch(name);
  std::ofstream(path) << text;
  return path;
}

inline const char* kTiny = R"(name: tiny
seed: 2
threads: 1
warmup: 0
repeats: 1
verify: true
model: {layers: 1, hidden: 16, heads: 2, kv_heads: 1, head_dim: 8, ffn_hidden: 16, experts: 4, topk: 2, seq: 16}
parallel: {ep: 2}
workload: {kind: zipf, alpha: 2.0}
strategies:
  - no_recompute
  - full_recompute
  - {name: memfine, chunks: 2}
sweep:
  model.seq: [16, 32]
)";

inline std::string fresh_dir(const std::string& name) {
  const std::string d = scratch(name);
  fs::remove_all(d);
  return d;
}

}  // namespace memfine::cli_test
