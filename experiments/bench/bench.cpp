// Micro-benchmarks of the kernels a chunked MoE step is made of, at the shapes of
// experiments/chunk_sweep.yaml: router top-k, dispatch + combine (ATen's ops and the fused ones,
// forward and backward; --moe_config=FILE measures them at an experiment's shapes, e.g. on a GPU
// experiments/gpu_kernels.yaml), one expert's SwiGLU forward and
// forward + backward from 16 to 65536 rows, one decoder layer's training step per strategy and
// chunk count, and a dense matmul as the machine's ceiling. scripts/cost_model.py fits the step-
// time model from the JSON this writes:
//   build/memfine_bench --benchmark_repetitions=5 --benchmark_out=FILE --benchmark_out_format=json
//   build/memfine_bench --moe_config=experiments/kernels.yaml --benchmark_filter=DispatchCombine
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <benchmark/benchmark.h>
#include <torch/version.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

#include "core/config/config.h"
#include "core/dist/process.h"
#include "core/meter/memory_meter.h"
#include "core/meter/timer.h"
#include "core/moe/fused.h"
#include "core/record/environment.h"
#include "core/run/rank_step.h"
#include "core/run/validate.h"
#include "core/strategy/registry.h"

namespace {

using namespace memfine;

// The shapes of chunk_sweep.yaml, one layer.
ExperimentConfig bench_config() {
  ExperimentConfig c;
  c.name = "bench";
  c.seed = 12;
  c.model.layers = 1, c.model.hidden = 128, c.model.heads = 4, c.model.kv_heads = 2, c.model.head_dim = 32;
  c.model.ffn_hidden = 256, c.model.experts = 32, c.model.topk = 4, c.model.seq = 512;
  c.ep = 8;
  c.workload.kind = "zipf", c.workload.alpha = 1.5;
  return c;
}

void flops_counter(benchmark::State& state, double flops) {
  state.counters["FLOPS"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_RouterTopk(benchmark::State& state) {
  const ExperimentConfig c = bench_config();
  const int64_t T = state.range(0);
  at::NoGradGuard ng;
  Model m = make_model(c, 0);
  at::Tensor x = at::randn({T, c.model.hidden});
  for (auto _ : state) benchmark::DoNotOptimize(route(x, m.layers[0], at::Tensor(), c.model.topk).probs);
  flops_counter(state, 2.0 * double(T) * c.model.hidden * c.model.experts);
  state.counters["rows"] = double(T);
}

// dispatch -> combine, forward and backward, through ATen's ops or the fused ones on the same
// routing (the dispatched rows stand in for the experts' outputs): the kernels' own speed, apart
// from the expert matmuls that dominate a step. Registered in main() per config and kernel.
void BM_DispatchCombine(benchmark::State& state, ExperimentConfig c, bool fused) {
  auto st = make_train_state(c);
  const RankRouting& rr = st->rank.layers[0];
  MoeRouting mr;
  mr.rank = &rr, mr.tables = &st->rank, mr.expert_ids = rr.own_experts, mr.loss_norm = 1, mr.fused = fused;
  const int64_t T = c.model.tokens();
  at::Tensor x = st->input.detach().requires_grad_(true);
  at::Tensor probs = at::rand({T, c.model.topk}, options_of(c)).requires_grad_(true);
  for (auto _ : state) {
    Timer t(c.device);  // waits for the device at both ends
    {
      Dispatched d = dispatch(x, mr, 0, T);
      Combined out = combine(d.inputs, d, probs, mr);
      (out.y.sum() + out.peer_loss).backward();
    }
    state.SetIterationTime(t.elapsed_ms() / 1e3);
    x.mutable_grad().reset(), probs.mutable_grad().reset();
  }
  state.counters["rows"] = double(rr.tokens_received);
  state.SetLabel(c.device + "," + c.dtype + "," + (fused ? "fused" : "aten"));
}

// The shapes to compare the kernels at: every point of --moe_config=FILE (an experiment YAML; its
// `kernels` key is ignored, both are run), else chunk_sweep's layer at three sequence lengths.
void register_dispatch_combine(const std::string& file) {
  std::vector<std::pair<std::string, ExperimentConfig>> shapes;
  if (file.empty()) {
    for (int64_t seq : {128, 512, 2048}) {
      ExperimentConfig c = bench_config();
      c.model.seq = seq;
      shapes.emplace_back("seq=" + std::to_string(seq), c);
    }
  } else {
    std::vector<std::string> errors;
    auto points = load_and_validate(file, errors);
    if (!errors.empty()) {
      for (const auto& e : errors) std::cerr << e << "\n";
      std::exit(2);
    }
    for (auto& p : points) {
      std::string id;  // the point without its kernels key
      std::stringstream ss(p.id);
      for (std::string part; std::getline(ss, part, ',');)
        if (part.rfind("kernels=", 0) != 0) id += (id.empty() ? "" : ",") + part;
      if (id.empty()) id = "base";
      p.config.model.layers = 1;  // one layer's routing is all this measures
      if (std::none_of(shapes.begin(), shapes.end(), [&](const auto& s) { return s.first == id; }))
        shapes.emplace_back(id, p.config);
    }
  }
  for (const auto& [id, c] : shapes)
    for (bool fused : {false, true}) {
      if (fused && !fused_kernels_available(c.device)) continue;
      benchmark::RegisterBenchmark(("BM_DispatchCombine/" + id + (fused ? "/fused" : "/aten")).c_str(),
                                   BM_DispatchCombine, c, fused)
          ->Unit(benchmark::kMillisecond)
          ->UseManualTime();
    }
}

void BM_ExpertForward(benchmark::State& state) {
  const ExperimentConfig c = bench_config();
  const int64_t rows = state.range(0), h = c.model.hidden, g = c.model.ffn_hidden;
  at::NoGradGuard ng;
  at::Tensor x = at::randn({rows, h}), wi = at::randn({h, 2 * g}), wo = at::randn({g, h});
  for (auto _ : state) benchmark::DoNotOptimize(swiglu(x, wi, wo));
  flops_counter(state, 6.0 * double(rows) * h * g);
  state.counters["rows"] = double(rows);
}

// An expert's forward and backward at state.range(0) rows: `forward(x, w_in, w_out)` is SwiGLU, or
// its two GEMMs alone; FLOPs counted as the two GEMMs' (both do them).
template <class Forward>
void expert_forward_backward(benchmark::State& state, Forward forward) {
  const ExperimentConfig c = bench_config();
  const int64_t rows = state.range(0), h = c.model.hidden, g = c.model.ffn_hidden;
  at::Tensor x = at::randn({rows, h}).requires_grad_(true);
  at::Tensor wi = at::randn({h, 2 * g}).requires_grad_(true), wo = at::randn({g, h}).requires_grad_(true);
  at::Tensor gy = at::randn({rows, h});
  for (auto _ : state) forward(x, wi, wo).backward(gy);
  flops_counter(state, 18.0 * double(rows) * h * g);
  state.counters["rows"] = double(rows);
}

void BM_ExpertForwardBackward(benchmark::State& state) { expert_forward_backward(state, swiglu); }

// An expert's two GEMMs alone (SwiGLU's elementwise product left out): the grouped GEMM's rate
// against rows per expert, as memfine project divides by it.
void BM_ExpertGemm(benchmark::State& state) {
  expert_forward_backward(state, [](const at::Tensor& x, const at::Tensor& wi, const at::Tensor& wo) {
    return at::matmul(at::matmul(x, wi).narrow(1, 0, wo.size(0)), wo);
  });
}

// One decoder layer's training step. Arguments: strategy (0 no_recompute, 1 full_recompute,
// 2 memfine) and chunk count.
void BM_LayerStep(benchmark::State& state) {
  const ExperimentConfig c = bench_config();
  StrategySpec spec;
  spec.name = state.range(0) == 0 ? "no_recompute" : state.range(0) == 1 ? "full_recompute" : "memfine";
  if (state.range(0) == 2) spec.written["chunks"] = YAML::Load(std::to_string(state.range(1)));
  auto st = make_train_state(c);
  auto s = make_strategy(spec);
  int64_t step = 0;
  for (auto _ : state) train_step(*st, *s, step++);
  state.SetLabel(spec.label());
  state.counters["rows"] = double(st->rank.layers[0].tokens_received);
  state.counters["chunks"] = double(state.range(0) == 2 ? state.range(1) : 0);
}

// The machine's ceiling: the best dense matmul over a few sizes, same BLAS and threads.
void BM_Matmul(benchmark::State& state) {
  const int64_t n = state.range(0);
  at::Tensor a = at::randn({n, n}), b = at::randn({n, n});
  for (auto _ : state) benchmark::DoNotOptimize(at::matmul(a, b));
  flops_counter(state, 2.0 * double(n) * n * n);
}

// The machine's memory bandwidth as a tensor copy moves it (read and write), for what
// memory-bound kernels cost (memfine project's hbm_gb_s on this machine).
void BM_Copy(benchmark::State& state) {
  const int64_t n = state.range(0);
  at::Tensor a = at::randn({n}), b = at::empty({n});
  for (auto _ : state) b.copy_(a);
  state.counters["bytes_per_second"] =
      benchmark::Counter(2.0 * double(n) * 4, benchmark::Counter::kIsIterationInvariantRate);
}

BENCHMARK(BM_RouterTopk)->RangeMultiplier(4)->Range(256, 16384)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_ExpertForward)->RangeMultiplier(4)->Range(16, 65536)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_ExpertForwardBackward)->RangeMultiplier(4)->Range(16, 65536)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_ExpertGemm)->RangeMultiplier(4)->Range(16, 65536)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_LayerStep)
    ->Args({0, 0})
    ->Args({1, 0})
    ->Args({2, 1})
    ->Args({2, 2})
    ->Args({2, 4})
    ->Args({2, 8})
    ->Args({2, 16})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_Matmul)->Arg(512)->Arg(1024)->Arg(1536)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Copy)->Arg(1 << 24)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  memfine::use_passive_openmp_waits(argv);
  // Our one flag, taken out before Google Benchmark reads the rest.
  std::string moe_config;
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--moe_config=", 0) == 0)
      moe_config = a.substr(13);
    else
      argv[kept++] = argv[i];
  }
  argc = kept;
  if (!moe_config.empty() && !std::ifstream(moe_config)) {
    std::cerr << "memfine_bench: cannot read --moe_config=" << moe_config << "\n";
    return 2;
  }
  register_dispatch_combine(moe_config);
  benchmark::AddCustomContext("moe_config", moe_config.empty() ? "(built in)" : moe_config);
  benchmark::AddCustomContext("libtorch", TORCH_VERSION);
  benchmark::AddCustomContext("git_commit", memfine::git_commit());  // what measured it
  benchmark::AddCustomContext("cpu_model", memfine::cpu_name());     // a cost model fitted here names its machine
  // The runs' allocator: the meter's counting allocator keeps freed blocks in the heap (no page
  // faults on every large allocation), so kernels are timed as the runs time them.
  memfine::MemoryMeter::get("cpu");
  const char* threads = std::getenv("MEMFINE_THREADS");
  at::set_num_threads(threads ? std::atoi(threads) : 2);
  benchmark::AddCustomContext("libtorch_threads", std::to_string(at::get_num_threads()));
  const ModelConfig m = bench_config().model;  // the layer steps' shapes, for scaling the cost model
  for (auto [k, v] : std::vector<std::pair<const char*, int64_t>>{{"hidden", m.hidden},
                                                                  {"heads", m.heads},
                                                                  {"kv_heads", m.kv_heads},
                                                                  {"head_dim", m.head_dim},
                                                                  {"ffn_hidden", m.ffn_hidden},
                                                                  {"experts", m.experts},
                                                                  {"topk", m.topk},
                                                                  {"seq", m.seq},
                                                                  {"micro_batch", m.micro_batch},
                                                                  {"ep", bench_config().ep}})
    benchmark::AddCustomContext(std::string("model_") + k, std::to_string(v));
  {
    // The rows each local expert of the benchmarked layer receives (the cost model splits them by chunk).
    const EmulatedRank rank = make_emulated_rank(bench_config(), -1);
    std::string rows;
    for (int64_t r : rank.layers[0].expert_rows) rows += (rows.empty() ? "" : ",") + std::to_string(r);
    benchmark::AddCustomContext("layer_expert_rows", rows);
  }
  benchmark::AddCustomContext("omp_wait_policy", std::getenv("OMP_WAIT_POLICY") ? std::getenv("OMP_WAIT_POLICY") : "");
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
