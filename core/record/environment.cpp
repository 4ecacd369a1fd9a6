#include "core/record/environment.h"

#include <ATen/Parallel.h>
#include <torch/version.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>

#ifdef MEMFINE_TORCH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>
#endif

namespace memfine {

using json = nlohmann::json;

namespace {
std::string run_command(const char* cmd) {
  std::array<char, 256> buf{};
  std::string out;
  FILE* p = popen(cmd, "r");
  if (!p) return "";
  while (fgets(buf.data(), buf.size(), p)) out += buf.data();
  pclose(p);
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

// The BLAS actually loaded (Debian switches libblas.so.3 through alternatives).
std::string blas_name() {
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    if (line.find("openblas") != std::string::npos) return "OpenBLAS (" + line.substr(line.find('/')) + ")";
    if (line.find("libmkl") != std::string::npos) return "MKL";
    if (line.find("libblis") != std::string::npos) return "BLIS";
  }
  for (std::string line; std::getline(maps, line);)
    if (line.find("libblas") != std::string::npos) return "reference BLAS";
  return "unknown";
}
}  // namespace

std::string source_dir() { return MEMFINE_SOURCE_DIR; }

std::string cpu_name() {
  static const std::string name = [] {  // read once per process
    std::ifstream in("/proc/cpuinfo");
    for (std::string line; std::getline(in, line);)
      if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
    return std::string("unknown cpu");
  }();
  return name;
}

namespace {
struct SourceCommit {
  std::string id;        // 12 hex digits, "-dirty" when code or experiments differ from it
  bool checkout = true;  // false: the source tree is gone, the id is the one the build saw
};

const SourceCommit& source_commit() {
  // The checkout does not change during a run: ask git once per process, not once per point.
  // Dirty means changed code or experiments: the outputs (results/, paper_figures/) change while
  // the suite measures and plots, and a remeasure rewrites them, which says nothing of the code.
  static const SourceCommit commit = [] {
    // Where the checkout's git metadata is not its files' (a GPU machine is sent a copy of the files
    // with older metadata), scripts/gpu-run checks the files against a commit's tree
    // (scripts/source-tree) and names the commit here, "-dirty" where they differ.
    if (const char* named = std::getenv("MEMFINE_SOURCE_COMMIT"); named && *named) return SourceCommit{named};
    SourceCommit c{run_command("git -C \"" MEMFINE_SOURCE_DIR "\" rev-parse --short=12 HEAD 2>/dev/null")};
    if (c.id.empty()) return SourceCommit{MEMFINE_GIT_COMMIT, false};
    const std::string dirty = run_command("git -C \"" MEMFINE_SOURCE_DIR
                                          "\" status --porcelain --untracked-files=no -- . "
                                          "':(exclude)results' ':(exclude)paper_figures' 2>/dev/null");
    if (!dirty.empty()) c.id += "-dirty";
    return c;
  }();
  return commit;
}
}  // namespace

std::string git_commit() { return source_commit().id; }

std::string version_text() {
  const SourceCommit& c = source_commit();
  return "memfine " + c.id + (c.checkout ? "" : " (built from; the source tree is gone)") + ", LibTorch " +
         TORCH_VERSION;
}

json environment(const ExperimentConfig& c) {
  json env;
  env["git_commit"] = git_commit();
  env["libtorch"] = TORCH_VERSION;
  env["build"] = MEMFINE_BUILD_TYPE;  // CMake's: only a Release build's timings are results
  env["device"] = c.device;
  env["device_name"] = cpu_name();
#ifdef MEMFINE_TORCH_CUDA
  if (c.device == "cuda") {
    cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, c10::cuda::current_device());
    env["device_name"] = std::string(prop.name);
  }
#endif
  env["threads"] = at::get_num_threads();
  static const std::string blas = blas_name();  // the libraries loaded do not change during a run
  env["blas"] = blas;
  env["omp_wait_policy"] = std::getenv("OMP_WAIT_POLICY") ? std::getenv("OMP_WAIT_POLICY") : "default";
  static const std::string host = run_command("hostname 2>/dev/null");
  env["hostname"] = host;
  std::time_t now = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  env["date"] = buf;
  return env;
}

std::string device_class(const std::string& device) {
#ifdef MEMFINE_TORCH_CUDA
  if (device == "cuda") {
    cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, c10::cuda::current_device());
    std::string name = prop.name;
    for (const char* k : {"H100", "H200", "A100", "B200", "L40", "A10"})
      if (name.find(k) != std::string::npos) {
        std::string s = k;
        for (auto& ch : s) ch = char(std::tolower(ch));
        return s;
      }
    return "cuda";
  }
#endif
  return device;
}

}  // namespace memfine
