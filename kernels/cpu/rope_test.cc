// Tests of the rotary embedding: finite differences (fp64), the textbook
// complex form (pair (x_i, x_{i+hs/2}) times e^{i pos theta^(-2i/hs)}), that
// positions are taken as given (not from the row index), that q.k after the
// rotation depends only on the positions' difference, in place, and dtype
// agreement.
#include <gtest/gtest.h>

#include <cmath>
#include <complex>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/test_util.h"

namespace pb::kernels {
namespace {

using namespace testing;

constexpr int B = 2, Tn = 5, heads = 3, hs = 8, stride = 40;  // a row holds more than the rotated heads
constexpr double kTheta = 10000.0;
const std::vector<int32_t> kPos = {7, 0, 3, 12, 4};  // true positions, deliberately not 0..Tn-1

struct Inputs {
  std::vector<double> x = bf16_exact(size_t(B) * Tn * stride, 1, -2, 2), R = bf16_exact(size_t(B) * Tn * stride, 2),
                      dx0 = bf16_exact(size_t(B) * Tn * stride, 3);
};

template <class T>
std::vector<double> forward(const Inputs& in, const std::vector<int32_t>& pos = kPos) {
  auto x = to<T>(in.x);
  std::vector<T> out = x;  // the columns past the heads stay as they are
  rope_forward(out.data(), x.data(), pos.data(), B, Tn, heads, hs, stride, kTheta);
  return to_double(out);
}

template <class T>
std::vector<double> backward(const Inputs& in) {
  auto dy = to<T>(in.R), dx = to<T>(in.dx0);
  rope_backward(dx.data(), dy.data(), kPos.data(), B, Tn, heads, hs, stride, kTheta);
  return to_double(dx);
}

TEST(Rope, BackwardMatchesFiniteDifferences) {
  Inputs in;
  const auto d = backward<double>(in);
  // Only the rotated columns have a gradient through rope (the others pass
  // through the copy the test made, which rope_backward does not see).
  std::vector<double> want = minus(d, in.dx0), fd_loss_mask(in.x.size(), 0.0);
  for (int r = 0; r < B * Tn; ++r)
    for (int c = 0; c < heads * hs; ++c) fd_loss_mask[size_t(r) * stride + c] = 1;
  auto loss = [&] {
    const auto y = forward<double>(in);
    double s = 0;
    for (size_t i = 0; i < y.size(); ++i) s += fd_loss_mask[i] * y[i] * in.R[i];
    return s;
  };
  expect_gradient(in.x, want, loss, "dinp", /*checks=*/200);
}

TEST(Rope, ForwardIsTheComplexRotation) {
  Inputs in;
  const auto y = forward<double>(in);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < Tn; ++t)
      for (int h = 0; h < heads; ++h)
        for (int i = 0; i < hs / 2; ++i) {
          const size_t at = (size_t(b) * Tn + t) * stride + size_t(h) * hs;
          const double angle = kPos[size_t(t)] * std::pow(kTheta, -2.0 * i / hs);
          const std::complex<double> z = std::complex<double>(in.x[at + i], in.x[at + i + hs / 2]) *
                                         std::polar(1.0, angle);
          EXPECT_NEAR(y[at + i], z.real(), 1e-14);
          EXPECT_NEAR(y[at + i + hs / 2], z.imag(), 1e-14);
        }
  // Columns past the rotated heads untouched.
  for (int r = 0; r < B * Tn; ++r)
    for (int c = heads * hs; c < stride; ++c) EXPECT_EQ(y[size_t(r) * stride + c], in.x[size_t(r) * stride + c]);
}

TEST(Rope, PositionsAreTakenAsGiven) {
  Inputs in;
  const std::vector<int32_t> shifted = {8, 1, 4, 13, 5};
  EXPECT_NE(forward<double>(in), forward<double>(in, shifted));
  // Rotating q and k by positions shifted alike leaves every q.k unchanged
  // (the relative-position property, Su et al. 2021, eq. 16).
  const auto a = forward<double>(in), b = forward<double>(in, shifted);
  for (int t1 = 0; t1 < Tn; ++t1)
    for (int t2 = 0; t2 < Tn; ++t2) {
      double da = 0, db = 0;
      for (int c = 0; c < hs; ++c) {
        da += a[size_t(t1) * stride + c] * a[size_t(t2) * stride + hs + c];
        db += b[size_t(t1) * stride + c] * b[size_t(t2) * stride + hs + c];
      }
      EXPECT_NEAR(da, db, 1e-13);
    }
}

TEST(Rope, InPlaceEqualsOutOfPlace) {
  Inputs in;
  auto x = to<double>(in.x);
  rope_forward(x.data(), x.data(), kPos.data(), B, Tn, heads, hs, stride, kTheta);
  EXPECT_EQ(to_double(x), forward<double>(in));
}

TEST(Rope, Fp32AndBf16AgreeWithFp64) {
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
