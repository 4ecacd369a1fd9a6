// Grouped expert GEMMs (core/moe/grouped.h) against the loop of one GEMM per expert: the weights'
// one storage, the alias the GEMM reads, and whole training steps under every strategy whose
// experts have a grouped path. On a CPU (and LibTorch without the op) the grouped plumbing runs a
// GEMM per group; on a CUDA build with a GPU and LibTorch 2.8+ LibTorch's `_grouped_mm` itself.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "core/moe/grouped.h"
#include "core/run/rank_step.h"
#include "core/strategy/registry.h"
#include "core/util/tensors.h"
#include "testing.h"

using namespace memfine;
using memfine::test_util::loss_and_grads;
using memfine::test_util::max_rel_diff;
using memfine::test_util::spec;
using memfine::test_util::tiny_config;

namespace {

std::vector<StrategySpec> grouped_specs() {
  return {spec("no_recompute"),
          spec("full_recompute"),
          spec("moe_recompute"),
          spec("moe_act_recompute"),
          spec("memfine", {{"chunks", "3"}}),
          spec("memfine", {{"chunks", "2"}, {"experts", "moe_act"}}),
          spec("memfine", {{"chunks", "2"}, {"experts", "buffer_free"}}),
          spec("chunked_ep", {{"chunks", "2"}, {"recompute", "none"}}),
          spec("capacity", {{"capacity_factor", "1.0"}, {"pad", "true"}})};
}

// The largest difference between the loop and the grouped GEMMs over every strategy.
void expect_grouped_as_loop(ExperimentConfig c, double tolerance) {
  for (const auto& s : grouped_specs()) {
    c.expert_gemm = "loop";
    const auto ref = loss_and_grads(c, s);
    c.expert_gemm = "grouped";
    EXPECT_LT(max_rel_diff(loss_and_grads(c, s), ref), tolerance)
        << c.dtype << " " << c.device << " kernels " << c.kernels << " " << s.label();
  }
}

}  // namespace

// A layer's experts lie in one storage, in order, made so at creation and kept by a clone: the
// grouped GEMM reads them as [experts, in, out] without a copy.
TEST(GroupedExperts, WeightsLieInOneStorageAndTheStackIsAnAlias) {
  auto st = make_train_state(tiny_config("float64", "zipf", 2), true);
  for (const Model& m : {st->model, st->model.clone()}) {
    const LayerWeights& w = m.layers[0];
    ASSERT_EQ(w.w_in.size(), 4u);
    EXPECT_TRUE(back_to_back(w.w_in));
    EXPECT_TRUE(back_to_back(w.w_out));
    EXPECT_TRUE(w.w_in[1].is_leaf());
    at::Tensor s = stacked_experts(w.w_in);
    EXPECT_EQ(s.sizes(), (std::vector<int64_t>{4, w.w_in[0].size(0), w.w_in[0].size(1)}));
    EXPECT_EQ(s.data_ptr(), w.w_in[0].data_ptr());
    EXPECT_TRUE(at::equal(s[2], w.w_in[2]));
    // Each expert's gradient is its slice of the stack's.
    for (const auto& t : w.w_in) t.mutable_grad() = at::Tensor();
    (s * at::arange(4, s.options().requires_grad(false)).view({4, 1, 1})).sum().backward();
    for (int64_t e = 0; e < 4; ++e) EXPECT_TRUE(at::allclose(w.w_in[size_t(e)].grad(), at::full_like(w.w_in[0], double(e))));
  }
  std::vector<at::Tensor> apart = {at::zeros({2, 3}), at::zeros({2, 3})};
  EXPECT_FALSE(back_to_back(apart));
  EXPECT_THROW(stacked_experts(apart), std::logic_error);
  pack_experts(apart);
  EXPECT_TRUE(back_to_back(apart));
}

// The op's two shapes against per-group products, an empty group among them.
TEST(GroupedExperts, GroupedProductsAreEachGroupsProduct) {
  at::Generator gen = at::detail::createCPUGenerator(3);
  const std::vector<int64_t> sizes = {3, 0, 5, 1};
  at::Tensor a = at::randn({9, 6}, gen, at::kDouble), b = at::randn({4, 6, 7}, gen, at::kDouble);
  const ExpertGroups g = expert_groups(sizes, a);
  at::Tensor out = grouped_mm(a, b, g), grad = grouped_mm_weight_grad(a.t(), out, g);
  int64_t off = 0;
  for (size_t e = 0; e < sizes.size(); ++e) {
    at::Tensor ae = a.narrow(0, off, sizes[e]), oe = out.narrow(0, off, sizes[e]);
    EXPECT_TRUE(at::allclose(oe, at::matmul(ae, b[int64_t(e)])));
    EXPECT_TRUE(at::allclose(grad[int64_t(e)], at::matmul(ae.t(), oe)));
    off += sizes[e];
  }
}

// Whole steps: the same loss and gradients as the loop, in float64 and float32, with ATen's and the
// fused dispatch, for every routing.
TEST(GroupedExperts, SameLossAndGradientsAsTheLoop) {
  for (const char* workload : {"zipf", "hot"})
    for (const char* dtype : {"float64", "float32"})
      for (const char* kernels : {"aten", "fused"}) {
        ExperimentConfig c = tiny_config(dtype, workload, 2);
        c.kernels = kernels;
        expect_grouped_as_loop(c, dtype[5] == '6' ? 1e-12 : 1e-5);
      }
}

// Where LibTorch has the op, it runs natively on bf16 GPU tensors only (elsewhere the plumbing loops).
TEST(GroupedExperts, NativeOnlyInBf16OnAGpu) {
  EXPECT_FALSE(grouped_mm_native(at::zeros({2, 2}, at::kBFloat16)));
  EXPECT_FALSE(grouped_mm_native(at::zeros({2, 2}, at::kFloat)));
  EXPECT_FALSE(expert_groups({1, 1}, at::zeros({2, 2}, at::kBFloat16)).offs.defined());
}

#ifdef MEMFINE_TORCH_CUDA
// On the GPU in bf16, LibTorch's grouped GEMM (CUTLASS on sm90) against the loop: the products with
// an empty group, then whole steps. bf16's tolerance as `verify`'s.
TEST(GroupedExperts, NativeGroupedGemmMatchesTheLoopOnTheGpu) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  auto opt = at::TensorOptions().device(at::kCUDA).dtype(at::kBFloat16);
  if (!grouped_mm_native(at::empty({1}, opt))) GTEST_SKIP() << "this LibTorch has no native grouped GEMM";
  at::Generator gen = at::detail::createCPUGenerator(5);
  const std::vector<int64_t> sizes = {40, 0, 72, 8};
  at::Tensor a = at::randn({120, 64}, gen, at::kFloat).to(opt), b = at::randn({4, 64, 96}, gen, at::kFloat).to(opt);
  const ExpertGroups g = expert_groups(sizes, a);
  ASSERT_TRUE(g.offs.defined());
  at::Tensor out = grouped_mm(a, b, g), grad = grouped_mm_weight_grad(a.t(), out, g);
  int64_t off = 0;
  for (size_t e = 0; e < sizes.size(); ++e) {
    if (sizes[e] == 0) {  // an empty group's weight gradient is zero
      EXPECT_EQ(grad[int64_t(e)].abs().max().item<float>(), 0.0f);
      continue;
    }
    at::Tensor ae = a.narrow(0, off, sizes[e]).to(at::kFloat), oe = out.narrow(0, off, sizes[e]).to(at::kFloat);
    EXPECT_LT(memfine::test_util::rel_diff(oe, at::matmul(ae, b[int64_t(e)].to(at::kFloat))), 2e-2) << e;
    EXPECT_LT(memfine::test_util::rel_diff(grad[int64_t(e)].to(at::kFloat), at::matmul(ae.t(), oe)), 2e-2) << e;
    off += sizes[e];
  }
  ExperimentConfig c = tiny_config("bfloat16", "zipf", 2);
  c.device = "cuda", c.kernels = "fused";
  expect_grouped_as_loop(c, 3e-2);
}
#endif
