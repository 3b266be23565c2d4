#include "harness/memory.h"

#include <gtest/gtest.h>

#include "harness/dtype.h"
#include "harness/tensor.h"

namespace pb {
namespace {

TEST(MemoryTracker, CountsCurrentAndPeakPerTagAndPlace) {
  MemoryTracker t;
  {
    Buffer<float> p(&t, MemTag::params, 100);
    Buffer<double> o(&t, MemTag::optimizer, 10, Place::host);
    EXPECT_EQ(t.current(MemTag::params), 400u);
    EXPECT_EQ(t.current(MemTag::optimizer, Place::host), 80u);
    EXPECT_EQ(t.current(MemTag::optimizer, Place::device), 0u);
    {
      Buffer<float> a(&t, MemTag::activations, 50);
      EXPECT_EQ(t.current_total(), 600u);
    }
    EXPECT_EQ(t.current(MemTag::activations), 0u);
    EXPECT_EQ(t.peak(MemTag::activations), 200u);
    EXPECT_EQ(t.peak_total(), 600u);
  }
  EXPECT_EQ(t.current_total(), 0u);
  EXPECT_EQ(t.peak(MemTag::params), 400u);
  t.reset_peaks();
  EXPECT_EQ(t.peak(MemTag::params), 0u);
}

TEST(MemoryTracker, MoveTransfersOwnershipWithoutDoubleCount) {
  MemoryTracker t;
  Buffer<float> a(&t, MemTag::grads, 8);
  Buffer<float> b = std::move(a);
  EXPECT_EQ(t.current(MemTag::grads), 32u);
  b.reset();
  EXPECT_EQ(t.current(MemTag::grads), 0u);
}

TEST(Tensor, TypedAccessChecksDtype) {
  MemoryTracker t;
  Tensor x(&t, MemTag::workspace, DType::bf16, {2, 3});
  EXPECT_EQ(x.bytes(), 12u);
  EXPECT_NO_THROW(x.data<bf16>());
  EXPECT_THROW(x.data<float>(), std::logic_error);
}

TEST(Bf16, RoundsToNearestEven) {
  EXPECT_EQ(float(bf16(1.0f)), 1.0f);
  // 1 + 2^-8 is exactly half-way between 1 and 1 + 2^-7: ties to even (1).
  EXPECT_EQ(float(bf16(1.0f + 0.00390625f)), 1.0f);
  // 1 + 3*2^-8 is half-way between 1+2^-7 and 1+2^-6: ties to even (1+2^-6).
  EXPECT_EQ(float(bf16(1.0f + 3 * 0.00390625f)), 1.015625f);
  EXPECT_EQ(float(bf16(-2.5f)), -2.5f);
}

}  // namespace
}  // namespace pb
