// Tests of tanh-GELU: finite differences (fp64), known values, and fp32/bf16
// agreement with fp64.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/test_util.h"

namespace pb::kernels {
namespace {

using namespace testing;

constexpr size_t N = 200;

template <class T>
std::vector<double> forward(const std::vector<double>& x) {
  auto in = to<T>(x);
  std::vector<T> out(in.size());
  gelu_forward(out.data(), in.data(), in.size());
  return to_double(out);
}

template <class T>
std::vector<double> backward(const std::vector<double>& x, const std::vector<double>& dy,
                             const std::vector<double>& d0) {
  auto in = to<T>(x), dout = to<T>(dy), d = to<T>(d0);
  gelu_backward(d.data(), in.data(), dout.data(), in.size());
  return to_double(d);
}

TEST(Gelu, BackwardMatchesFiniteDifferences) {
  auto x = bf16_exact(N, 1, -4, 4);
  const auto R = bf16_exact(N, 2), d0 = bf16_exact(N, 3);
  const auto g = minus(backward<double>(x, R, d0), d0);
  expect_gradient(x, g, [&] { return dot(forward<double>(x), R); }, "dinp", N);
}

// The tanh form of GPT-2: gelu(0) = 0, gelu(x) -> x for large x, -> 0 for very
// negative x; gelu(1) from the formula written out in long double.
TEST(Gelu, KnownValues) {
  const auto y = forward<double>({0.0, 1.0, 10.0, -10.0});
  const long double u = std::sqrt(2.0L / 3.14159265358979323846264338327950288L) * (1 + 0.044715L);
  EXPECT_EQ(y[0], 0.0);
  EXPECT_NEAR(y[1], double(0.5L * (1 + std::tanh(u))), 1e-15);
  EXPECT_NEAR(y[2], 10.0, 1e-12);
  EXPECT_NEAR(y[3], 0.0, 1e-12);
}

TEST(Gelu, Fp32AndBf16AgreeWithFp64) {
  const auto x = bf16_exact(N, 4, -4, 4), R = bf16_exact(N, 5), d0 = bf16_exact(N, 6);
  const auto y = forward<double>(x), g = backward<double>(x, R, d0);
  EXPECT_LE(rel_err(forward<float>(x), y), kF32Tol);
  EXPECT_LE(rel_err(forward<bf16>(x), y), kBf16Tol);
  EXPECT_LE(rel_err(backward<float>(x, R, d0), g), kF32Tol);
  EXPECT_LE(rel_err(backward<bf16>(x, R, d0), g), kBf16Tol);
}

}  // namespace
}  // namespace pb::kernels
