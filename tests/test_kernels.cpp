// The fused dispatch/combine ops (core/moe/fused.h) against ATen: the ops alone in every dtype, then
// whole training steps under every strategy. On CPU the ops run the host reference of the CUDA
// kernels (the same per-row code, core/moe/rows.h); on a CUDA build with a GPU the kernels themselves.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "core/meter/memory_meter.h"
#include "core/moe/fused.h"
#include "core/moe/rows.h"
#include "core/run/rank_step.h"
#include "core/strategy/registry.h"
#include "testing.h"

using namespace memfine;
using memfine::test_util::loss_and_grads;
using memfine::test_util::max_rel_diff;
using memfine::test_util::rel_diff;
using memfine::test_util::spec;
using memfine::test_util::tiny_config;

namespace {

struct OpsResult {
  at::Tensor gathered, y, grad_x, grad_rows, grad_weight, grad_remote_weight;
};

// dispatch's gather of rows (tokens, table rows, padding), then combine's weighted scatter-add of
// some rows and of table rows, then backward of a fixed loss; fused or with ATen ops.
OpsResult run_ops(bool fused, at::ScalarType dtype, at::Device device) {
  const int64_t tokens = 40, hidden = 24, table_rows = 7, rows = 90;
  at::Generator gen = at::detail::createCPUGenerator(11);
  auto opt = at::TensorOptions().dtype(dtype).device(device);
  at::Tensor x = at::randn({tokens, hidden}, gen, at::kDouble).to(opt).requires_grad_(true);
  at::Tensor table = at::randn({table_rows, hidden}, gen, at::kDouble).to(opt);
  at::Tensor token = at::randint(tokens, {rows}, gen, at::kLong);
  at::Tensor key = at::randint(table_rows, {rows}, gen, at::kLong);
  at::Tensor kind = at::arange(rows, at::kLong).remainder(5);  // 0-2: a token, 3: a table row, 4: padding
  at::Tensor src = at::where(
      kind < 3, token,
      at::where(kind == 3, key.neg() + rows::encode_table_row(0), at::full({rows}, rows::kZeroRow, at::kLong)));
  at::Tensor weight = at::rand({rows}, gen, at::kDouble).to(opt).requires_grad_(true);
  at::Tensor remote_weight = at::rand({rows}, gen, at::kDouble).to(opt).requires_grad_(true);
  at::Tensor probe = at::randn({tokens, hidden}, gen, at::kDouble).to(opt);

  OpsResult r;
  const at::Tensor tok_d = token.to(device), key_d = key.to(device);
  if (fused) {
    r.gathered = gather_rows(x, table, src.to(device));
  } else {
    std::vector<at::Tensor> parts;
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t k = kind[i].item<int64_t>();
      parts.push_back(k < 3    ? x.narrow(0, token[i].item<int64_t>(), 1)
                      : k == 3 ? table.narrow(0, key[i].item<int64_t>(), 1)
                               : at::zeros({1, hidden}, opt));
    }
    r.gathered = at::cat(parts);
  }
  at::Tensor expert_out = (r.gathered * 1.5).tanh();  // stands in for the experts
  at::Tensor y = at::zeros({tokens, hidden}, opt);
  if (fused) {
    scatter_add_rows_(y, expert_out, weight, at::Tensor(), tok_d);
    scatter_add_rows_(y, table, remote_weight, key_d, tok_d);
  } else {
    y.index_add_(0, tok_d, expert_out * weight.unsqueeze(1));
    y.index_add_(0, tok_d, table.index_select(0, key_d) * remote_weight.unsqueeze(1));
  }
  r.y = y;
  (y * probe).sum().backward();
  r.grad_x = x.grad(), r.grad_weight = weight.grad(), r.grad_remote_weight = remote_weight.grad();
  return r;
}

void expect_same_ops(at::ScalarType dtype, at::Device device, double tol) {
  const OpsResult f = run_ops(true, dtype, device), a = run_ops(false, dtype, device);
  // A gather copies: bit for bit in every dtype.
  EXPECT_TRUE(at::equal(f.gathered, a.gathered)) << dtype;
  EXPECT_LT(rel_diff(f.y, a.y), tol) << dtype;
  EXPECT_LT(rel_diff(f.grad_x, a.grad_x), tol) << dtype;
  EXPECT_LT(rel_diff(f.grad_weight, a.grad_weight), tol) << dtype;
  EXPECT_LT(rel_diff(f.grad_remote_weight, a.grad_remote_weight), tol) << dtype;
}

}  // namespace

// A layer's chunks routed in one pass (what the chunked MoE does) index the same rows, in the same
// order, as each chunk routed alone, with and without capacity's keep masks, for uneven chunks.
TEST(Dispatch, ChunksRoutedAtOnceEqualEachAlone) {
  ExperimentConfig c = tiny_config("float32", "zipf", 4);
  auto st = make_train_state(c);
  const RankRouting& rr = st->rank.layers[0];
  const int64_t T = c.model.tokens();
  for (bool masked : {false, true}) {
    MoeRouting mr;
    mr.rank = &rr, mr.tables = &st->rank, mr.expert_ids = rr.own_experts;
    if (masked) {
      mr.own_keep = at::rand(rr.own_experts.sizes()) < 0.7;
      mr.peer_keep = at::rand({rr.peer_pos.numel()}) < 0.6;
    }
    for (const std::vector<int64_t>& bounds :
         std::vector<std::vector<int64_t>>{{0, T}, {0, 5, 11, 30, T}, {3, 3, 20, T - 1}}) {
      const std::vector<Dispatched> all = dispatch_indices(mr, bounds, at::kCPU);
      ASSERT_EQ(all.size() + 1, bounds.size());
      for (size_t ci = 0; ci + 1 < bounds.size(); ++ci) {
        const Dispatched one = dispatch_indices(mr, bounds[ci], bounds[ci + 1], at::kCPU);
        const Dispatched& got = all[ci];
        EXPECT_EQ(got.begin, one.begin);
        EXPECT_EQ(got.end, one.end);
        EXPECT_EQ(got.own_rows, one.own_rows);
        EXPECT_EQ(got.peer_rows, one.peer_rows);
        for (size_t e = 0; e < one.own_rows.size(); ++e) {
          EXPECT_TRUE(at::equal(got.own_slot[e], one.own_slot[e])) << "chunk " << ci << " expert " << e;
          EXPECT_TRUE(at::equal(got.own_token[e], one.own_token[e]));
          EXPECT_TRUE(at::equal(got.peer_key[e], one.peer_key[e]));
        }
        EXPECT_TRUE(at::equal(got.remote_slot, one.remote_slot));
        EXPECT_TRUE(at::equal(got.remote_token, one.remote_token));
        EXPECT_TRUE(at::equal(got.remote_key, one.remote_key));
      }
    }
  }
}

// Tolerances: the fused scatter-add rounds once per addition where ATen rounds the weighted copy
// too, and dot products sum in another order (bf16 keeps 8 bits).
TEST(FusedOps, MatchAtenOnTheHost) {
  expect_same_ops(at::kDouble, at::kCPU, 1e-13);
  expect_same_ops(at::kFloat, at::kCPU, 1e-5);
  expect_same_ops(at::kBFloat16, at::kCPU, 2e-2);
}

class FusedSteps : public ::testing::TestWithParam<std::string> {};

// A whole step under each strategy: the same loss and gradients as with ATen's dispatch/combine.
TEST_P(FusedSteps, SameLossAndGradientsAsAten) {
  std::vector<StrategySpec> specs = {spec("no_recompute"),
                                     spec("full_recompute"),
                                     spec("moe_recompute"),
                                     spec("memfine", {{"chunks", "1"}}),
                                     spec("memfine", {{"chunks", "3"}}),
                                     spec("capacity", {{"capacity_factor", "1.0"}, {"pad", "true"}})};
  for (const char* dtype : {"float64", "float32"}) {
    ExperimentConfig c = tiny_config(dtype, GetParam(), GetParam() == "router" ? 1 : 4);
    c.expert_gemm = "loop";  // the stages' kernels: a ranged MoE has its own
    for (const auto& s : specs) {
      c.kernels = "aten";
      const auto ref = loss_and_grads(c, s);
      c.kernels = "fused";
      EXPECT_LT(max_rel_diff(loss_and_grads(c, s), ref), dtype[5] == '6' ? 1e-12 : 1e-5) << dtype << " " << s.label();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Workloads, FusedSteps, ::testing::Values("zipf", "hot", "router"));

// Writing each expert's input once, and adding weighted outputs without a weighted copy, keeps
// less: the stored step's activation peak falls (measured by the meter, both in one process).
TEST(FusedSteps, StoreLessThanAten) {
  MemoryMeter& meter = MemoryMeter::get("cpu");
  ExperimentConfig c = tiny_config("float32", "zipf", 4);
  c.model.hidden = 64, c.model.ffn_hidden = 96, c.model.seq = 64;
  c.expert_gemm = "loop";  // the stages' kernels: a ranged MoE has its own
  auto peak = [&](const std::string& kernels) {
    c.kernels = kernels;
    auto st = make_train_state(c);
    auto s = make_strategy(spec("no_recompute"));
    meter.reset_peak();
    const int64_t start = meter.current_bytes();
    train_step(*st, *s, 0);
    return meter.peak_bytes() - start;
  };
  const int64_t aten = peak("aten"), fused = peak("fused");
  std::cout << "no_recompute activation peak: aten " << aten << " B, fused " << fused << " B\n";
  EXPECT_LT(fused, aten);
}

#ifdef MEMFINE_KERNELS
// The CUDA kernels: the same ops on the GPU against ATen on the GPU, and a whole step.
TEST(CudaKernels, MatchAtenOnTheGpu) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  expect_same_ops(at::kDouble, at::kCUDA, 1e-12);
  expect_same_ops(at::kFloat, at::kCUDA, 1e-5);
  expect_same_ops(at::kBFloat16, at::kCUDA, 2e-2);
  ExperimentConfig c = tiny_config("float64", "zipf", 4);
  for (const auto& s : {spec("no_recompute"), spec("full_recompute"), spec("memfine", {{"chunks", "3"}}),
                        spec("chunked_ep", {{"chunks", "3"}})}) {
    c.device = "cpu", c.kernels = "aten", c.expert_gemm = "loop";
    const auto cpu = loss_and_grads(c, s);
    c.device = "cuda";
    const auto ref = loss_and_grads(c, s);
    // The whole CUDA path (routing decided on the host, indices moved) against the CPU's.
    EXPECT_LT(max_rel_diff(ref, cpu), 1e-10) << s.label();
    c.kernels = "fused";
    EXPECT_LT(max_rel_diff(loss_and_grads(c, s), ref), 1e-12) << s.label();
    // The ranged MoE's kernels (core/moe/ranged.h) on the GPU.
    c.expert_gemm = "grouped";
    EXPECT_LT(max_rel_diff(loss_and_grads(c, s), ref), 1e-10) << "ranged " << s.label();
  }
}
#endif

#ifdef MEMFINE_TORCH_CUDA
// The CUDA meter works as a process's first CUDA call (as in `memfine run`): LibTorch 2.x sizes the
// caching allocator's tables on CUDA's lazy start, and the first GPU run's every point failed with
// "Invalid device argument" before the meter started CUDA itself. Then it counts to the byte.
TEST(CudaMeter, WorksBeforeAnyTensorAndCountsAllocations) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  MemoryMeter& meter = MemoryMeter::get("cuda");
  meter.reset_peak();
  const int64_t before = meter.current_bytes();
  {
    at::Tensor t = at::empty({1 << 20}, at::TensorOptions().device(at::kCUDA).dtype(at::kFloat));
    EXPECT_EQ(meter.current_bytes() - before, int64_t(4) << 20);
  }
  EXPECT_EQ(meter.current_bytes(), before);
  EXPECT_GE(meter.peak_bytes() - before, int64_t(4) << 20);
}
#endif
