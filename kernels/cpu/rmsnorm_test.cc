// Tests of RMSNorm: finite differences for input and weight (fp64), the
// textbook formula x / sqrt(mean(x^2) + eps) * w, dtype agreement, null outputs.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/test_util.h"

namespace pb::kernels {
namespace {

using namespace testing;

constexpr int N = 6, C = 16;
constexpr double kEps = 1e-5;

struct Inputs {
  std::vector<double> x = bf16_exact(size_t(N) * C, 1, -2, 2), w = bf16_exact(C, 2, 0.5, 1.5),
                      R = bf16_exact(size_t(N) * C, 4), dx0 = bf16_exact(size_t(N) * C, 5),
                      dw0 = bf16_exact(C, 6);
};

template <class T>
std::vector<double> forward(const Inputs& in, std::vector<acc_t<T>>* rstd = nullptr) {
  auto x = to<T>(in.x), w = to<T>(in.w);
  std::vector<T> out(x.size());
  std::vector<acc_t<T>> rs(N);
  rmsnorm_forward(out.data(), rs.data(), x.data(), w.data(), N, C, kEps);
  if (rstd) *rstd = rs;
  return to_double(out);
}

struct Grads {
  std::vector<double> dx, dw;
};

template <class T>
Grads backward(const Inputs& in, bool want_x = true, bool want_w = true) {
  std::vector<acc_t<T>> rs;
  forward<T>(in, &rs);
  auto x = to<T>(in.x), w = to<T>(in.w), dy = to<T>(in.R), dx = to<T>(in.dx0), dw = to<T>(in.dw0);
  rmsnorm_backward(want_x ? dx.data() : nullptr, want_w ? dw.data() : nullptr, dy.data(), x.data(), w.data(),
                   rs.data(), N, C);
  return {to_double(dx), to_double(dw)};
}

TEST(RmsNorm, BackwardMatchesFiniteDifferences) {
  Inputs in;
  const Grads g = backward<double>(in);
  auto loss = [&] { return dot(forward<double>(in), in.R); };
  expect_gradient(in.x, minus(g.dx, in.dx0), loss, "dinp");
  expect_gradient(in.w, minus(g.dw, in.dw0), loss, "dweight");
}

TEST(RmsNorm, ForwardIsTheTextbookFormula) {
  Inputs in;
  const auto y = forward<double>(in);
  for (int n = 0; n < N; ++n) {
    double ms = 0;
    for (int c = 0; c < C; ++c) ms += in.x[size_t(n) * C + c] * in.x[size_t(n) * C + c];
    const double r = 1.0 / std::sqrt(ms / C + kEps);
    for (int c = 0; c < C; ++c)
      EXPECT_NEAR(y[size_t(n) * C + c], in.x[size_t(n) * C + c] * r * in.w[size_t(c)], 1e-14);
  }
}

TEST(RmsNorm, Fp32AndBf16AgreeWithFp64) {
  Inputs in;
  const auto y = forward<double>(in);
  EXPECT_LE(rel_err(forward<float>(in), y), kF32Tol);
  EXPECT_LE(rel_err(forward<bf16>(in), y), kBf16Tol);
  const Grads g = backward<double>(in), g32 = backward<float>(in), g16 = backward<bf16>(in);
  EXPECT_LE(rel_err(g32.dx, g.dx), kF32Tol);
  EXPECT_LE(rel_err(g32.dw, g.dw), kF32Tol);
  EXPECT_LE(rel_err(g16.dx, g.dx), kBf16Tol);
  EXPECT_LE(rel_err(g16.dw, g.dw), kBf16Tol);
}

TEST(RmsNorm, NullOutputsAreSkipped) {
  Inputs in;
  const Grads full = backward<float>(in);
  const Grads x_only = backward<float>(in, true, false);
  const Grads w_only = backward<float>(in, false, true);
  EXPECT_EQ(x_only.dx, full.dx);
  EXPECT_EQ(x_only.dw, to_double(to<float>(in.dw0)));
  EXPECT_EQ(w_only.dw, full.dw);
  EXPECT_EQ(w_only.dx, to_double(to<float>(in.dx0)));
}

}  // namespace
}  // namespace pb::kernels
