// The ranged MoE (core/moe/ranged.h) and its operators (core/moe/range_ops.h) against the loop of
// one GEMM per expert through ATen: the weights' and their gradients' one storage, each operator
// against ATen's arithmetic, whole training steps under every strategy, and what a chunk costs the
// host in operators. On a CPU (and LibTorch without `_grouped_mm`) the grouped GEMM is a product per
// group inside one operator; on a CUDA build with a GPU and LibTorch 2.8+ LibTorch's op itself.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "core/meter/host_work.h"
#include "core/moe/grouped.h"
#include "core/moe/range_ops.h"
#include "core/moe/rows.h"
#include "core/run/rank_step.h"
#include "core/strategy/registry.h"
#include "core/util/tensors.h"
#include "testing.h"

using namespace memfine;
using memfine::test_util::loss_and_grads;
using memfine::test_util::max_rel_diff;
using memfine::test_util::rel_diff;
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
          spec("chunked_ep", {{"chunks", "3"}}),
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

at::Tensor randn(at::IntArrayRef shape, at::Generator& gen) { return at::randn(shape, gen, at::kDouble); }
at::Tensor longs(std::vector<int64_t> v) { return at::tensor(v, at::kLong); }

}  // namespace

// A layer's experts lie in one storage, in order, made so at creation and kept by a clone; the
// optimizer gives their gradients one storage too: one grouped GEMM adds into all of them.
TEST(GroupedExperts, WeightsAndTheirGradientsLieInOneStorage) {
  auto st = make_train_state(tiny_config("float64", "zipf", 2), true);
  for (const Model& m : {st->model, st->model.clone()}) {
    const LayerWeights& w = m.layers[0];
    ASSERT_EQ(w.w_in.size(), 4u);
    EXPECT_TRUE(back_to_back(w.w_in));
    EXPECT_TRUE(back_to_back(w.w_out));
    EXPECT_TRUE(w.w_in[1].is_leaf());
  }
  const LayerWeights& w = st->model.layers[0];
  std::vector<at::Tensor> grads;
  for (const auto& t : w.w_out) grads.push_back(t.grad());
  EXPECT_TRUE(back_to_back(grads));
  std::vector<at::Tensor> apart = {at::zeros({2, 3}), at::zeros({2, 3})};
  EXPECT_FALSE(back_to_back(apart));
  pack_experts(apart);
  EXPECT_TRUE(back_to_back(apart));
}

// The grouped GEMM and the weights' gradient it adds, against a product per group, an empty group
// among them.
TEST(GroupedExperts, GroupedProductsAreEachGroupsProduct) {
  at::Generator gen = at::detail::createCPUGenerator(3);
  const std::vector<int64_t> sizes = {3, 0, 5, 1};
  at::Tensor a = randn({9, 6}, gen), b = randn({4, 6, 7}, gen), bt = b.transpose(1, 2).contiguous();
  at::Tensor out = ops::moe_grouped_mm(a, b, at::Tensor(), sizes, false);
  at::Tensor out_t = ops::moe_grouped_mm(a, bt, at::Tensor(), sizes, true);
  at::Tensor grad = at::ones({4, 6, 7}, at::kDouble);
  ops::moe_grouped_wgrad_(grad, a, out, at::Tensor(), sizes);
  int64_t off = 0;
  for (size_t e = 0; e < sizes.size(); ++e) {
    at::Tensor ae = a.narrow(0, off, sizes[e]), oe = out.narrow(0, off, sizes[e]);
    EXPECT_TRUE(at::allclose(oe, at::matmul(ae, b[int64_t(e)])));
    EXPECT_TRUE(at::allclose(out_t.narrow(0, off, sizes[e]), oe));
    EXPECT_TRUE(at::allclose(grad[int64_t(e)], 1 + at::matmul(ae.t(), oe)));  // added, not replaced
    off += sizes[e];
  }
}

// Each row operator against the same arithmetic in ATen: dispatch's gather (tokens, peers' rows,
// padding), SwiGLU and its derivative, combine (own and remote rows), the peers' loss term, the
// outputs' gradient, the probabilities' and the rows' gradient back to tokens; from an offset into
// the layer's arrays, as a range reads them.
TEST(GroupedExperts, RangeOperatorsAreTheirArithmetic) {
  at::Generator gen = at::detail::createCPUGenerator(5);
  const int64_t T = 6, k = 2, h = 5, g = 3;
  at::Tensor x = randn({T, h}, gen), table = randn({4, h}, gen), grads = randn({4, h}, gen);
  at::Tensor probs = at::rand({T, k}, gen, at::kDouble), remote = randn({4, h}, gen);
  // Two leading rows belong to another range; then token 1, peer row 2, token 4, zero, peer row 0.
  at::Tensor src = longs({0, 3, 1, rows::encode_table_row(2), 4, rows::kZeroRow, rows::encode_table_row(0)});
  at::Tensor slot = longs({0, 7, 3, -1, 8, -1, -1});
  const int64_t b = 2, R = 5;
  at::Tensor rows = ops::moe_gather(x, table, src, b, R);
  at::Tensor want = at::stack({x[1], table[2], x[4], at::zeros({h}, at::kDouble), table[0]});
  EXPECT_TRUE(at::allclose(rows, want));
  // SwiGLU and its derivative, against autograd through ATen's.
  at::Tensor z = randn({R, 2 * g}, gen).requires_grad_(true);
  auto ab = z.chunk(2, -1);
  at::Tensor act = at::silu(ab[0]) * ab[1];
  EXPECT_LT(rel_diff(ops::moe_swiglu(z.detach()), act), 1e-14);
  at::Tensor g_act = randn({R, g}, gen);
  act.backward(g_act);
  EXPECT_LT(rel_diff(ops::moe_swiglu_backward(g_act, z.detach()), z.grad()), 1e-14);
  // Combine: y[token] += prob * row; remote assignments 1 and 2 (of 3) add theirs.
  at::Tensor out = randn({R, h}, gen), flat = probs.reshape(-1);
  at::Tensor rkey = longs({0, 3, 1}), rtok = longs({0, 2, 5}), rslot = longs({1, 5, 11});
  at::Tensor y = at::zeros({T, h}, at::kDouble), y_want = at::zeros({T, h}, at::kDouble);
  ops::moe_combine_(y, out, probs, src, slot, b, remote, rkey, rtok, rslot, 1, 2);
  y_want[1] += flat[3] * out[0], y_want[4] += flat[8] * out[2];
  y_want[2] += flat[5] * remote[3], y_want[5] += flat[11] * remote[1];
  EXPECT_TRUE(at::allclose(y, y_want));
  // The peers' loss term: their rows' dot products with the gradients they send back, over norm.
  at::Tensor acc = at::zeros({}, at::kDouble);
  ops::moe_peer_loss_(acc, out, grads, src, b, 4.0);
  EXPECT_NEAR(acc.item<double>(), ((out[1] * grads[2]).sum() + (out[4] * grads[0]).sum()).item<double>() / 4.0, 1e-12);
  // The outputs' gradient: a token's row weighed by its probability, a peer's by g_peer / norm.
  at::Tensor gy = randn({T, h}, gen), g_peer = at::full({}, 0.5, at::kDouble);
  at::Tensor g_out = ops::moe_output_grad(gy, probs, grads, g_peer, 4.0, src, slot, b, R);
  at::Tensor g_want = at::stack({flat[3] * gy[1], grads[2] * 0.125, flat[8] * gy[4], at::zeros({h}, at::kDouble),
                                 grads[0] * 0.125});
  EXPECT_TRUE(at::allclose(g_out, g_want));
  // The probabilities' gradient at each slot; the rows' gradient back to their tokens.
  at::Tensor gp = at::zeros({T, k}, at::kDouble);
  ops::moe_probs_grad_(gp, out, gy, src, slot, b, remote, rkey, rtok, rslot, 1, 2);
  at::Tensor gp_want = at::zeros({T * k}, at::kDouble);
  gp_want[3] = (out[0] * gy[1]).sum(), gp_want[8] = (out[2] * gy[4]).sum();
  gp_want[5] = (remote[3] * gy[2]).sum(), gp_want[11] = (remote[1] * gy[5]).sum();
  EXPECT_TRUE(at::allclose(gp.reshape(-1), gp_want));
  at::Tensor gx = at::zeros({T, h}, at::kDouble);
  ops::moe_scatter_grad_(gx, out, src, b);
  at::Tensor gx_want = at::zeros({T, h}, at::kDouble);
  gx_want[1] += out[0], gx_want[4] += out[2];
  EXPECT_TRUE(at::allclose(gx, gx_want));
}

// Whole steps: the same loss and gradients as the loop, in float64 and float32, with ATen's and the
// fused dispatch (ATen's: the loop in both), for every routing.
TEST(GroupedExperts, SameLossAndGradientsAsTheLoop) {
  for (const char* workload : {"zipf", "hot"})
    for (const char* dtype : {"float64", "float32"})
      for (const char* kernels : {"aten", "fused"}) {
        ExperimentConfig c = tiny_config(dtype, workload, 2);
        c.kernels = kernels;
        expect_grouped_as_loop(c, dtype[5] == '6' ? 1e-12 : 1e-5);
      }
}

// What a chunk costs the host: MemFine's 8 chunks against full recomputation on 8 local experts
// with hot routing, counted on the dispatcher. A chunk is a few operators whatever the experts'
// count (the stages one by one took about 90 an expert), and no chunk reads from the device.
TEST(GroupedExperts, AChunkIsAFewOperatorsAndNoRead) {
  ExperimentConfig c = tiny_config("float32", "hot", 8);
  c.model.experts = 64, c.model.topk = 8, c.model.seq = 64, c.model.micro_batch = 1;
  c.workload.hot_fraction = 0.5, c.workload.hot_experts = 4;
  auto count = [&](const StrategySpec& sp) {
    auto st = make_train_state(c);
    auto s = make_strategy(sp);
    train_step(*st, *s, 0);
    HostWorkCounter counter;
    train_step(*st, *s, 1);
    return counter.counted();
  };
  const HostWork full = count(spec("full_recompute")), eight = count(spec("memfine", {{"chunks", "8"}}));
  const double per_chunk = double(eight.ops - full.ops) / double(7 * c.model.layers);
  std::cout << "full_recompute " << full.ops << " operators, memfine(chunks=8) " << eight.ops << ": " << per_chunk
            << " an extra chunk and layer\n";
  EXPECT_LE(per_chunk, 40);
  EXPECT_GT(per_chunk, 0);
  EXPECT_LE(eight.host_syncs, full.host_syncs);
}

// Where LibTorch has the op, it runs natively on bf16 GPU tensors only (elsewhere a product per group).
TEST(GroupedExperts, NativeOnlyInBf16OnAGpu) {
  EXPECT_FALSE(grouped_mm_native(at::zeros({2, 2}, at::kBFloat16)));
  EXPECT_FALSE(grouped_mm_native(at::zeros({2, 2}, at::kFloat)));
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
  at::Tensor offs = at::tensor(std::vector<int32_t>{40, 40, 112, 120}, at::kInt).to(at::kCUDA);
  at::Tensor out = ops::moe_grouped_mm(a, b, offs, sizes, false);
  at::Tensor grad = at::zeros({4, 64, 96}, opt);
  ops::moe_grouped_wgrad_(grad, a, out, offs, sizes);
  int64_t off = 0;
  for (size_t e = 0; e < sizes.size(); ++e) {
    if (sizes[e] == 0) {  // an empty group's weight gradient is zero
      EXPECT_EQ(grad[int64_t(e)].abs().max().item<float>(), 0.0f);
      continue;
    }
    at::Tensor ae = a.narrow(0, off, sizes[e]).to(at::kFloat), oe = out.narrow(0, off, sizes[e]).to(at::kFloat);
    EXPECT_LT(rel_diff(oe, at::matmul(ae, b[int64_t(e)].to(at::kFloat))), 2e-2) << e;
    EXPECT_LT(rel_diff(grad[int64_t(e)].to(at::kFloat), at::matmul(ae.t(), oe)), 2e-2) << e;
    off += sizes[e];
  }
  ExperimentConfig c = tiny_config("bfloat16", "zipf", 2);
  c.device = "cuda", c.kernels = "fused";
  for (const char* wgrad : {"grouped", "per_expert"}) {
    c.expert_wgrad = wgrad;
    expect_grouped_as_loop(c, 3e-2);
  }
}
#endif
