// Tests of SwiGLU: finite differences of [dgate | dup] (fp64), the textbook
// formula gate / (1 + exp(-gate)) * up, dtype agreement.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/test_util.h"

namespace pb::kernels {
namespace {

using namespace testing;

constexpr int N = 5, H = 12;

struct Inputs {
  std::vector<double> gu = bf16_exact(size_t(N) * 2 * H, 1, -4, 4), R = bf16_exact(size_t(N) * H, 2),
                      dgu0 = bf16_exact(size_t(N) * 2 * H, 3);
};

template <class T>
std::vector<double> forward(const Inputs& in) {
  auto gu = to<T>(in.gu);
  std::vector<T> out(size_t(N) * H);
  swiglu_forward(out.data(), gu.data(), N, H);
  return to_double(out);
}

template <class T>
std::vector<double> backward(const Inputs& in) {
  auto gu = to<T>(in.gu), dy = to<T>(in.R), dgu = to<T>(in.dgu0);
  swiglu_backward(dgu.data(), gu.data(), dy.data(), N, H);
  return to_double(dgu);
}

TEST(SwiGlu, BackwardMatchesFiniteDifferences) {
  Inputs in;
  const auto d = backward<double>(in);
  auto loss = [&] { return dot(forward<double>(in), in.R); };
  expect_gradient(in.gu, minus(d, in.dgu0), loss, "dgu", /*checks=*/200);
}

TEST(SwiGlu, ForwardIsTheTextbookFormula) {
  Inputs in;
  const auto y = forward<double>(in);
  for (int n = 0; n < N; ++n)
    for (int i = 0; i < H; ++i) {
      const double g = in.gu[size_t(n) * 2 * H + i], u = in.gu[size_t(n) * 2 * H + H + i];
      EXPECT_NEAR(y[size_t(n) * H + i], g / (1 + std::exp(-g)) * u, 1e-14);
    }
}

TEST(SwiGlu, Fp32AndBf16AgreeWithFp64) {
  Inputs in;
  const auto y = forward<double>(in);
  EXPECT_LE(rel_err(forward<float>(in), y), kF32Tol);
  EXPECT_LE(rel_err(forward<bf16>(in), y), kBf16Tol);
  const auto g = backward<double>(in);
  EXPECT_LE(rel_err(backward<float>(in), g), kF32Tol);
  EXPECT_LE(rel_err(backward<bf16>(in), g), kBf16Tol);
}

}  // namespace
}  // namespace pb::kernels
