// Tests of LayerNorm: finite differences for input, weight and bias (fp64),
// dtype agreement, null outputs, rounding-once of bf16 dweight, and the
// mean/variance accuracy on rows with a large common offset.
#include <gtest/gtest.h>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/test_util.h"

namespace pb::kernels {
namespace {

using namespace testing;

constexpr int N = 6, C = 16;

struct Inputs {
  std::vector<double> x = bf16_exact(size_t(N) * C, 1, -2, 2), w = bf16_exact(C, 2, 0.5, 1.5),
                      b = bf16_exact(C, 3), R = bf16_exact(size_t(N) * C, 4),
                      dx0 = bf16_exact(size_t(N) * C, 5), dw0 = bf16_exact(C, 6),
                      db0 = bf16_exact(C, 7);
};

template <class T>
std::vector<double> forward(const Inputs& in, std::vector<acc_t<T>>* mean = nullptr,
                            std::vector<acc_t<T>>* rstd = nullptr) {
  auto x = to<T>(in.x), w = to<T>(in.w), b = to<T>(in.b);
  std::vector<T> out(x.size());
  std::vector<acc_t<T>> mu(N), rs(N);
  layernorm_forward(out.data(), mu.data(), rs.data(), x.data(), w.data(), b.data(), N, C);
  if (mean) *mean = mu;
  if (rstd) *rstd = rs;
  return to_double(out);
}

struct Grads {
  std::vector<double> dx, dw, db;
};

template <class T>
Grads backward(const Inputs& in, bool want_x = true, bool want_w = true, bool want_b = true) {
  std::vector<acc_t<T>> mu, rs;
  forward<T>(in, &mu, &rs);
  auto x = to<T>(in.x), w = to<T>(in.w), dy = to<T>(in.R);
  auto dx = to<T>(in.dx0), dw = to<T>(in.dw0), db = to<T>(in.db0);
  layernorm_backward(want_x ? dx.data() : nullptr, want_w ? dw.data() : nullptr,
                     want_b ? db.data() : nullptr, dy.data(), x.data(), w.data(), mu.data(),
                     rs.data(), N, C);
  return {to_double(dx), to_double(dw), to_double(db)};
}

TEST(LayerNorm, BackwardMatchesFiniteDifferences) {
  Inputs in;
  const Grads g = backward<double>(in);
  auto loss = [&] { return dot(forward<double>(in), in.R); };
  expect_gradient(in.x, minus(g.dx, in.dx0), loss, "dinp");
  expect_gradient(in.w, minus(g.dw, in.dw0), loss, "dweight");
  expect_gradient(in.b, minus(g.db, in.db0), loss, "dbias");
}

TEST(LayerNorm, Fp32AndBf16AgreeWithFp64) {
  Inputs in;
  const auto y = forward<double>(in);
  EXPECT_LE(rel_err(forward<float>(in), y), kF32Tol);
  EXPECT_LE(rel_err(forward<bf16>(in), y), kBf16Tol);
  const Grads g = backward<double>(in), g32 = backward<float>(in), g16 = backward<bf16>(in);
  EXPECT_LE(rel_err(g32.dx, g.dx), kF32Tol);
  EXPECT_LE(rel_err(g32.dw, g.dw), kF32Tol);
  EXPECT_LE(rel_err(g32.db, g.db), kF32Tol);
  EXPECT_LE(rel_err(g16.dx, g.dx), kBf16Tol);
  EXPECT_LE(rel_err(g16.dw, g.dw), kBf16Tol);
  EXPECT_LE(rel_err(g16.db, g.db), kBf16Tol);
}

TEST(LayerNorm, NullOutputsAreSkipped) {
  Inputs in;
  const Grads full = backward<float>(in);
  const Grads x_only = backward<float>(in, true, false, false);
  const Grads w_only = backward<float>(in, false, true, false);
  const Grads b_only = backward<float>(in, false, false, true);
  const Grads untouched = backward<float>(in, false, false, false);
  EXPECT_EQ(x_only.dx, full.dx);
  EXPECT_EQ(w_only.dw, full.dw);
  EXPECT_EQ(b_only.db, full.db);
  EXPECT_EQ(x_only.dw, untouched.dw);
  EXPECT_EQ(w_only.dx, untouched.dx);
  EXPECT_EQ(b_only.dw, untouched.dw);
}

// Rows offset by 1000 with unit spread: the one-pass E[x^2]-E[x]^2 in fp32
// would lose ~all digits of the variance (1e6 vs 1); the two-pass form keeps
// fp32 close to fp64.
TEST(LayerNorm, LargeOffsetKeepsVarianceAccurate) {
  Inputs in;
  for (auto& x : in.x) x += 1000.0;  // 1000 + bf16 value is exact in fp32
  std::vector<float> mu32, rs32;
  std::vector<double> mu64, rs64;
  forward<float>(in, &mu32, &rs32);
  forward<double>(in, &mu64, &rs64);
  for (int n = 0; n < N; ++n) EXPECT_NEAR(rs32[n] / rs64[n], 1.0, 1e-3) << "row " << n;
}

// dbias of bf16 1.0 receives 0.003 from each of 4 rows: summed first it
// rounds to 1.0078125; row by row it would stay 1.0 (half ulp is 0.0039).
TEST(LayerNorm, Bf16ParameterGradsRoundedOnce) {
  const int n = 4, c = 2;
  std::vector<bf16> x{bf16(1.0f), bf16(-1.0f), bf16(1.0f), bf16(-1.0f),
                      bf16(1.0f), bf16(-1.0f), bf16(1.0f), bf16(-1.0f)};
  std::vector<bf16> w(c, bf16(1.0f)), dx(n * c, bf16(0.0f)), dw(c, bf16(0.0f)),
      db(c, bf16(1.0f)), dy(n * c, bf16(0.003f));
  std::vector<float> mu(n, 0.0f), rs(n, 1.0f);
  layernorm_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), mu.data(),
                     rs.data(), n, c);
  const float contrib = 4 * static_cast<float>(bf16(0.003f));
  EXPECT_EQ(static_cast<float>(db[0]), static_cast<float>(bf16(1.0f + contrib)));
  EXPECT_GT(static_cast<float>(db[0]), 1.0f);
}

}  // namespace
}  // namespace pb::kernels
