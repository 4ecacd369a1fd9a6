#include "core/meter/memory_meter.h"

#include <ATen/ATen.h>
#include <c10/core/CPUAllocator.h>
#include <gtest/gtest.h>

using memfine::MemoryMeter;

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
