#include "core/meter/host_work.h"
#include "core/meter/memory_meter.h"
#include "core/util/host_sync.h"

#include <ATen/ATen.h>
#include <c10/core/CPUAllocator.h>
#include <gtest/gtest.h>

using memfine::HostWork;
using memfine::HostWorkCounter;
using memfine::MemoryMeter;
using memfine::to_host;

TEST(Meter, CountsAllocationToTheByteAndResetsPeak) {
  MemoryMeter& m = MemoryMeter::get("cpu");
  const int64_t before = m.current_bytes();
  {
    at::Tensor t = at::empty({1000}, at::kFloat);  // 4000 bytes
    EXPECT_EQ(m.current_bytes() - before, 4000);
    m.reset_peak();
    EXPECT_EQ(m.peak_bytes(), m.current_bytes());
    {
      at::Tensor u = at::empty({250, 4}, at::kDouble);  // 8000 bytes
      EXPECT_EQ(m.current_bytes() - before, 12000);
    }
    EXPECT_EQ(m.current_bytes() - before, 4000);
    EXPECT_EQ(m.peak_bytes() - before, 12000);
  }
  EXPECT_EQ(m.current_bytes(), before);
  m.reset_peak();
  EXPECT_EQ(m.peak_bytes(), before);
}

TEST(Meter, BudgetThrowsOutOfMemoryAndTheProcessKeepsWorking) {
  MemoryMeter& m = MemoryMeter::get("cpu");
  const int64_t before = m.current_bytes();
  {
    memfine::MemoryLimitGuard guard(m, before + (1 << 20));  // 1 MiB of headroom
    at::Tensor small = at::zeros({1024}, at::kFloat);
    EXPECT_THROW(at::empty({1 << 20}, at::kFloat), memfine::OutOfMemory);
    // Inside an ATen op the error may arrive wrapped; it is still recognised as out of memory.
    try {
      at::Tensor a = at::ones({512, 512}, at::kFloat);
      at::Tensor b = at::matmul(a, a);
      FAIL() << "expected out of memory";
    } catch (const std::exception& e) {
      EXPECT_TRUE(memfine::is_out_of_memory(e)) << e.what();
    }
    EXPECT_EQ(small.sum().item<float>(), 0.0f);
  }
  EXPECT_EQ(m.current_bytes(), before);
  at::Tensor big = at::ones({1 << 20}, at::kFloat);  // limit restored: allowed again
  EXPECT_EQ(big.sum().item<float>(), float(1 << 20));
}

// Some ATen kernels (bf16 matmul through oneDNN) allocate through raw_allocate, which needs the
// allocation's context to be its data pointer.
TEST(Meter, RawAllocationsAreCountedToo) {
  MemoryMeter& m = MemoryMeter::get("cpu");
  const int64_t before = m.current_bytes();
  c10::Allocator* a = c10::GetCPUAllocator();
  void* p = a->raw_allocate(1000);
  EXPECT_EQ(m.current_bytes() - before, 1000);
  a->raw_deallocate(p);
  EXPECT_EQ(m.current_bytes(), before);
  at::Tensor x = at::randn({64, 64}).to(at::kBFloat16);
  EXPECT_EQ(at::matmul(x, x).sizes(), x.sizes());
}

// The host's work a step: operators at the top level (the ones an operator calls inside are its
// own), autograd's derivatives counted as the operators they dispatch, reads of values counted once.
TEST(HostWork, CountsTopLevelOperatorsAndReads) {
  at::Tensor a = at::ones({4, 4}).requires_grad_(true), b = at::ones({4, 4});
  HostWork w;
  {
    HostWorkCounter counter;
    at::Tensor c = at::matmul(a, b);  // one operator, whatever it calls inside
    at::Tensor s = (c * 2).sum();     // two
    EXPECT_EQ(counter.counted().ops, 3);
    EXPECT_EQ(counter.counted().host_syncs, 0);
    const double v = s.item<double>();  // a read, and an operator
    EXPECT_EQ(v, 128);
    EXPECT_EQ(counter.counted().host_syncs, 1);
    at::Tensor h = to_host(c);  // a copy to the host the code asks for: a read on every device
    EXPECT_EQ(counter.counted().host_syncs, 2);
    const int64_t before = counter.counted().ops;
    s.backward();  // the derivatives' operators, on whichever thread the engine runs them
    EXPECT_GT(counter.counted().ops, before + 2);
    w = counter.counted();
  }
  // Nothing is counted once the counter is gone, and a new one starts from zero.
  at::Tensor d = b + b;
  HostWorkCounter again;
  EXPECT_EQ(again.counted().ops, 0);
  at::Tensor e = b + b;
  EXPECT_EQ(again.counted().ops, 1);
  EXPECT_GT(w.ops, 6);
}
