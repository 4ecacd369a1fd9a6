#include "core/results.h"

#include <ATen/Parallel.h>
#include <ATen/Context.h>
#include <torch/version.h>
#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#ifdef MEMFINE_TORCH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>
#endif

namespace memfine {

namespace fs = std::filesystem;

std::vector<json> read_results(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path + ": cannot read results file");
  std::vector<json> out;
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.empty()) continue;
    try {
      out.push_back(json::parse(line));
    } catch (const json::exception& e) {
      throw std::runtime_error(path + ":" + std::to_string(n) + ": not a JSON record (" + e.what() + ")");
    }
    for (const char* key : {"experiment", "point", "strategy", "status"})
      if (!out.back().contains(key))
        throw std::runtime_error(path + ":" + std::to_string(n) + ": record has no '" + key + "'");
  }
  return out;
}

ResultsFile::ResultsFile(const std::string& dir, bool resume) {
  fs::create_directories(dir);
  path_ = (fs::path(dir) / "results.jsonl").string();
  if (!fs::exists(path_)) return;
  std::string text;
  {
    std::ifstream in(path_, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    text = ss.str();
  }
  if (text.empty()) return;
  if (!resume)
    throw std::runtime_error(path_ + " already holds results: pass --resume to continue it, or --out another folder");
  // Every complete line must parse; an unterminated last line is what a kill leaves behind.
  size_t pos = 0, good_end = 0;
  int lineno = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    ++lineno;
    const bool complete = nl != std::string::npos;
    const std::string line = text.substr(pos, complete ? nl - pos : std::string::npos);
    json rec;
    bool ok = true;
    try {
      rec = json::parse(line);
    } catch (const json::exception&) {
      ok = false;
    }
    if (!ok || !rec.contains("point") || !rec.contains("strategy")) {
      if (!complete) {
        repaired_ = path_ + ":" + std::to_string(lineno) + ": dropped a torn last record (" +
                    std::to_string(line.size()) + " bytes, from an interrupted run); that point runs again";
        break;
      }
      throw std::runtime_error(path_ + ":" + std::to_string(lineno) +
                               ": corrupt record; fix or remove the line (nothing was changed)");
    }
    if (!complete) {  // a whole record missing only its newline: keep it, end the line
      good_end = text.size();
      text += "\n";
    } else {
      good_end = nl + 1;
    }
    done_.insert({rec["point"].get<std::string>(), rec["strategy"].get<std::string>()});
    records_.push_back(std::move(rec));
    pos = complete ? nl + 1 : text.size();
  }
  if (good_end != fs::file_size(path_)) {
    // Rewrite through a temporary file, so a crash here cannot lose the good records.
    const std::string tmp = path_ + ".tmp";
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      out.write(text.data(), std::streamsize(good_end));
    }
    fs::rename(tmp, path_);
  }
}

bool ResultsFile::has(const std::string& point, const std::string& strategy) const {
  return done_.count({point, strategy}) > 0;
}

void ResultsFile::append(const json& record) {
  const std::string line = record.dump() + "\n";
  // One write() of the whole line with O_APPEND, then fsync: the line is on disk before we go on.
  int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd < 0) throw std::runtime_error(path_ + ": cannot open for appending");
  ssize_t written = ::write(fd, line.data(), line.size());
  ::fsync(fd);
  ::close(fd);
  if (written != ssize_t(line.size())) throw std::runtime_error(path_ + ": short write");
  done_.insert({record["point"].get<std::string>(), record["strategy"].get<std::string>()});
  records_.push_back(record);
}

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

std::string cpu_name() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown cpu";
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

json environment(const ExperimentConfig& c) {
  json env;
  // The checkout does not change during a run: ask git once per process, not once per point.
  static const std::string commit = [] {
    std::string c = run_command("git -C \"" MEMFINE_SOURCE_DIR "\" rev-parse --short=12 HEAD 2>/dev/null");
    if (c.empty()) c = MEMFINE_GIT_COMMIT;
    const std::string dirty =
        run_command("git -C \"" MEMFINE_SOURCE_DIR "\" status --porcelain --untracked-files=no 2>/dev/null");
    return c + (dirty.empty() ? "" : "-dirty");
  }();
  env["git_commit"] = commit;
  env["libtorch"] = TORCH_VERSION;
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
  env["blas"] = blas_name();
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

json config_to_json(const ExperimentConfig& c) {
  const ModelConfig& m = c.model;
  json strategies = json::array();
  for (const auto& s : c.strategies) strategies.push_back(s.label());
  return {{"name", c.name}, {"seed", c.seed}, {"device", c.device}, {"dtype", c.dtype}, {"kernels", c.kernels},
          {"threads", c.threads},
          {"warmup", c.warmup}, {"repeats", c.repeats}, {"verify", c.verify},
          {"model", {{"layers", m.layers}, {"hidden", m.hidden}, {"heads", m.heads}, {"kv_heads", m.kv_heads},
                     {"head_dim", m.head_dim}, {"ffn_hidden", m.ffn_hidden}, {"experts", m.experts},
                     {"topk", m.topk}, {"seq", m.seq}, {"micro_batch", m.micro_batch},
                     {"shared_experts", m.shared_experts}, {"attention", m.attention}}},
          {"parallel", {{"ep", c.ep}, {"rank", c.rank < 0 ? json("hottest") : json(c.rank)}}},
          {"workload", {{"kind", c.workload.kind}, {"alpha", c.workload.alpha}, {"sigma", c.workload.sigma},
                        {"hot_fraction", c.workload.hot_fraction}, {"hot_experts", c.workload.hot_experts},
                        {"trace", c.workload.trace}}},
          {"memory", {{"budget", c.budget < 0 ? json(nullptr) : json(c.budget)}}},
          {"strategies", strategies}};
}

}  // namespace memfine
