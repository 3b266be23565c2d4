// Tests of residual_forward (backward = accumulate into both inputs, checked by
// finite differences), accumulate's single bf16 rounding, and scale.
#include <gtest/gtest.h>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/test_util.h"

namespace pb::kernels {
namespace {

using namespace testing;

constexpr size_t N = 64;

TEST(Residual, BackwardIsAccumulateIntoBothInputs) {
  auto a = random_vec(N, 1), b = random_vec(N, 2);
  const auto R = random_vec(N, 3), da0 = random_vec(N, 4), db0 = random_vec(N, 5);
  auto loss = [&] {
    std::vector<double> out(N);
    residual_forward(out.data(), a.data(), b.data(), N);
    return dot(out, R);
  };
  auto da = da0, db = db0;
  accumulate(da.data(), R.data(), N);
  accumulate(db.data(), R.data(), N);
  expect_gradient(a, minus(da, da0), loss, "da");
  expect_gradient(b, minus(db, db0), loss, "db");
}

TEST(Residual, RoundsSumOnceInEveryDtype) {
  const auto a = bf16_exact(N, 6), b = bf16_exact(N, 7);
  std::vector<bf16> a16 = to<bf16>(a), b16 = to<bf16>(b), o16(N);
  std::vector<float> a32 = to<float>(a), b32 = to<float>(b), o32(N);
  residual_forward(o16.data(), a16.data(), b16.data(), N);
  residual_forward(o32.data(), a32.data(), b32.data(), N);
  for (size_t i = 0; i < N; ++i) {
    EXPECT_EQ(o32[i], float(a[i] + b[i]));  // fp32 addition is correctly rounded
    EXPECT_EQ(o16[i], bf16(float(a[i] + b[i])));
  }
}

// 1.0 + 0.003 in bf16: a sum below half an ulp (2^-8) rounds back to 1.0, so
// two separate accumulations leave 1.0 while one of 0.006 moves it up.
TEST(Accumulate, Bf16RoundsOnce) {
  std::vector<bf16> d{bf16(1.0f)}, small{bf16(0.003f)}, twice{bf16(0.006f)};
  accumulate(d.data(), small.data(), 1);
  EXPECT_EQ(static_cast<float>(d[0]), 1.0f);
  accumulate(d.data(), twice.data(), 1);
  EXPECT_EQ(static_cast<float>(d[0]), static_cast<float>(bf16(1.0f + static_cast<float>(twice[0]))));
  EXPECT_GT(static_cast<float>(d[0]), 1.0f);
}

TEST(Scale, MultipliesInComputeType) {
  auto x = random_vec(N, 8);
  const auto x0 = x;
  scale(x.data(), 0.25, N);
  for (size_t i = 0; i < N; ++i) EXPECT_EQ(x[i], x0[i] * 0.25);  // power of two: exact
  std::vector<float> f = to<float>(x0);
  scale(f.data(), 1.0 / 3.0, N);
  for (size_t i = 0; i < N; ++i) EXPECT_EQ(f[i], float(x0[i]) * float(1.0 / 3.0));
  std::vector<bf16> h = to<bf16>(x0);
  scale(h.data(), 3.0, N);
  for (size_t i = 0; i < N; ++i) EXPECT_EQ(h[i], bf16(static_cast<float>(bf16(x0[i])) * 3.0f));
}

}  // namespace
}  // namespace pb::kernels
