// One rank of the multi-rank tests: runs one training step (no update) of the test config under
// RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT and writes its loss and gradients to a file.
//   dist_worker STRATEGY CHUNKS OUT_DIR [fused] [throw]
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "core/dist/dist.h"
#include "core/run/rank_step.h"
#include "core/strategy/registry.h"
#include "dist_config.h"

int main(int argc, char** argv) {
  using namespace memfine;
  if (argc < 4) return 2;
  auto dist = Dist::from_env(std::chrono::seconds(20));
  if (!dist) return 3;
  const std::vector<std::string> flags(argv + 4, argv + argc);
  auto has = [&](const char* f) { return std::find(flags.begin(), flags.end(), f) != flags.end(); };
  if (has("throw") && dist->rank() == 1) {
    std::cerr << "rank 1: failing on purpose\n";
    return 7;
  }
  ExperimentConfig c = test_util::dist_config(dist->world());
  c.kernels = has("fused") ? "fused" : "aten";
  if (has("float32")) c.dtype = "float32";
  StrategySpec spec;
  spec.name = argv[1];
  // "-": defaults; "4" or "auto": memfine's chunks; "key=value,key=value" (or with ';'): any parameters.
  const std::string params = argv[2];
  if (params.find('=') == std::string::npos) {
    if (params != "-") spec.written["chunks"] = YAML::Load(params);
  } else {
    // ';' separates where a value is a list with commas in it.
    const char sep = params.find(';') == std::string::npos ? ',' : ';';
    std::stringstream list(params);
    for (std::string kv; std::getline(list, kv, sep);)
      spec.written[kv.substr(0, kv.find('='))] = YAML::Load(kv.substr(kv.find('=') + 1));
  }
  auto st = make_rank_state(c, *dist, true);
  auto s = make_strategy(spec);
  const double loss = train_step(*st, *s, 0, false);
  std::ofstream out(std::string(argv[3]) + "/rank" + std::to_string(dist->rank()) + ".bin", std::ios::binary);
  auto put = [&](const at::Tensor& t) {
    at::Tensor d = t.detach().to(at::kDouble).contiguous();
    const int64_t n = d.numel();
    out.write(reinterpret_cast<const char*>(&n), sizeof n);
    out.write(reinterpret_cast<const char*>(d.data_ptr<double>()), std::streamsize(n * 8));
  };
  put(at::tensor({loss}, at::kDouble));
  for (const auto& p : st->model.parameters()) put(p.grad());
  put(st->input.grad());
  const json counters = s->step_counters();
  const std::vector<int64_t> chosen =
      counters.contains("chunks") ? counters["chunks"].get<std::vector<int64_t>>() : std::vector<int64_t>{0};
  at::Tensor chunks = at::tensor(chosen, at::kLong);
  put(chunks.to(at::kDouble));
  // The tests' own strategy counts the rows its expert saw (tests/probe_strategy.cpp): -1 for others.
  put(at::tensor({counters.contains("expert_rows") ? counters["expert_rows"].get<double>() : -1.0}, at::kDouble));
  return 0;
}
