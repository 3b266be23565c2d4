// Tests of fused softmax cross-entropy: finite differences (fp64), values
// against a long-double logsumexp, probs aliasing logits, huge logits, a bad
// target, and fp32/bf16 agreement with fp64.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/test_util.h"

namespace pb::kernels {
namespace {

using namespace testing;

constexpr int N = 6, V = 9;

struct Inputs {
  std::vector<double> logits = bf16_exact(size_t(N) * V, 1, -3, 3), d0 = bf16_exact(size_t(N) * V, 2);
  std::vector<int32_t> tgt = random_ints(N, V, 3);
  double dloss = 0.37;  // as for a mean loss: d mean / d token-loss
};

template <class T>
std::vector<double> forward(const Inputs& in, std::vector<double>* probs_out = nullptr) {
  auto x = to<T>(in.logits);
  std::vector<T> probs(x.size());
  std::vector<acc_t<T>> losses(N);
  crossentropy_forward(losses.data(), probs.data(), x.data(), in.tgt.data(), N, V);
  if (probs_out) *probs_out = to_double(probs);
  return to_double(losses);
}

template <class T>
std::vector<double> backward(const Inputs& in) {
  auto x = to<T>(in.logits), d = to<T>(in.d0);
  std::vector<acc_t<T>> losses(N);
  crossentropy_forward(losses.data(), x.data(), x.data(), in.tgt.data(), N, V);  // in place
  crossentropy_backward(d.data(), x.data(), in.tgt.data(), in.dloss, N, V);
  return to_double(d);
}

TEST(CrossEntropy, BackwardMatchesFiniteDifferences) {
  Inputs in;
  const auto g = minus(backward<double>(in), in.d0);
  auto loss = [&] {
    double s = 0;
    for (double l : forward<double>(in)) s += l;
    return s * in.dloss;
  };
  expect_gradient(in.logits, g, loss, "dlogits", size_t(N) * V);
}

TEST(CrossEntropy, MatchesLongDoubleLogSumExpAndAliasingIsSafe) {
  Inputs in;
  std::vector<double> probs;
  const auto losses = forward<double>(in, &probs);
  for (int n = 0; n < N; ++n) {
    long double s = 0;
    for (int i = 0; i < V; ++i) s += std::exp((long double)in.logits[n * V + i]);
    EXPECT_NEAR(losses[n], double(std::log(s) - in.logits[n * V + in.tgt[n]]), 1e-14);
    double psum = 0;
    for (int i = 0; i < V; ++i) psum += probs[n * V + i];
    EXPECT_NEAR(psum, 1.0, 1e-14);
  }
  auto x = in.logits;
  std::vector<double> l2(N);
  crossentropy_forward(l2.data(), x.data(), x.data(), in.tgt.data(), N, V);
  EXPECT_EQ(l2, losses);
  EXPECT_EQ(x, probs);
}

// exp(1000) overflows every float type; max subtraction keeps it finite.
TEST(CrossEntropy, HugeLogitsStayFinite) {
  std::vector<float> x{1000.0f, 999.0f, 0.0f}, p(3);
  const int32_t t = 1;
  float loss = 0;
  crossentropy_forward(&loss, p.data(), x.data(), &t, 1, 3);
  EXPECT_NEAR(loss, std::log(1.0 + std::exp(1.0)), 1e-5);
  EXPECT_NEAR(p[0] + p[1] + p[2], 1.0f, 1e-6);
}

TEST(CrossEntropy, TargetOutOfRangeThrows) {
  std::vector<double> x(3, 0.0), p(3);
  double loss = 0;
  const int32_t bad = 3;
  EXPECT_THROW(crossentropy_forward(&loss, p.data(), x.data(), &bad, 1, 3), std::out_of_range);
  EXPECT_THROW(crossentropy_backward(x.data(), p.data(), &bad, 1.0, 1, 3), std::out_of_range);
}

TEST(CrossEntropy, Fp32AndBf16AgreeWithFp64) {
  Inputs in;
  const auto l = forward<double>(in), g = backward<double>(in);
  // Losses are returned in A (fp32 for bf16 storage) from bf16-exact logits,
  // so bf16 storage costs nothing here: both held to the fp32 bound.
  EXPECT_LE(rel_err(forward<float>(in), l), kF32Tol);
  EXPECT_LE(rel_err(forward<bf16>(in), l), kF32Tol);
  EXPECT_LE(rel_err(backward<float>(in), g), kF32Tol);
  EXPECT_LE(rel_err(backward<bf16>(in), g), kBf16Tol);
}

}  // namespace
}  // namespace pb::kernels
