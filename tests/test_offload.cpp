// Activation offloading's capture (core/strategy/offload): what autograd saves inside a scope
// leaves the metered memory and comes back for backward, gradients unchanged.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <optional>

#include "core/meter/memory_meter.h"
#include "core/strategy/offload.h"

namespace memfine {
namespace {

struct Outcome {
  int64_t held = 0;  // metered bytes autograd holds between forward and backward
  at::Tensor g0, g1, g3;
  HostPool pool;
};

// A SwiGLU on an activation: x = in w0, y = silu(x w1) * (x w3).
Outcome swiglu(bool offload) {
  torch::manual_seed(3);
  const auto in = torch::randn({256, 128}, torch::kDouble);
  const auto w0 = torch::randn({128, 128}, torch::kDouble).requires_grad_();
  const auto w1 = torch::randn({128, 512}, torch::kDouble).requires_grad_();
  const auto w3 = torch::randn({128, 512}, torch::kDouble).requires_grad_();
  MemoryMeter& meter = MemoryMeter::get("cpu");
  Outcome o;
  at::Tensor loss;
  const int64_t before = meter.current_bytes();
  {
    std::optional<OffloadScope> scope;
    if (offload) scope.emplace(o.pool);
    const auto x = torch::mm(in, w0);
    loss = (torch::silu(torch::mm(x, w1)) * torch::mm(x, w3)).sum();
  }
  o.held = meter.current_bytes() - before;
  loss.backward();
  o.g0 = w0.grad(), o.g1 = w1.grad(), o.g3 = w3.grad();
  return o;
}

TEST(Offload, SavedActivationsLeaveTheMeteredMemoryAndComeBack) {
  const Outcome plain = swiglu(false), off = swiglu(true);
  EXPECT_TRUE(torch::equal(plain.g0, off.g0));
  EXPECT_TRUE(torch::equal(plain.g1, off.g1));
  EXPECT_TRUE(torch::equal(plain.g3, off.g3));
  // x [256,128] and the three [256,512] activations (x w1, its silu, x w3) are autograd's alone:
  // offloaded, the meter no longer holds them.
  const int64_t activations = (256 * 128 + 3 * 256 * 512) * 8;
  EXPECT_GE(plain.held - off.held, activations);
  EXPECT_GE(off.pool.peak, activations);
  EXPECT_EQ(off.pool.current, 0) << "backward released every host copy";
  EXPECT_EQ(off.pool.to_device, off.pool.to_host);
  EXPECT_EQ(plain.pool.tensors, 0);
}

}  // namespace
}  // namespace memfine
