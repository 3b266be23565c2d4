// kernels/common/math.h on the CPU: the per-element and per-row math the CPU
// and CUDA kernels share, checked here against the textbook formulas in fp64
// and by finite differences, so what a GPU computes per element is tested on
// a machine without one. (The kernels built on it have their own tests.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "kernels/common/math.h"
#include "kernels/cpu/test_util.h"

namespace pb::kernels {
namespace {

using namespace testing;
namespace m = math;

// One LayerNorm row in fp64 built only from the shared functions.
std::vector<double> layernorm_row(const std::vector<double>& x, const std::vector<double>& w,
                                  const std::vector<double>& b, double* mean_out = nullptr,
                                  double* rstd_out = nullptr) {
  const double C = double(x.size());
  const double mu = std::accumulate(x.begin(), x.end(), 0.0) / C;
  double var = 0;
  for (double v : x) var += (v - mu) * (v - mu);
  const double rs = m::layernorm_rstd(var / C, 1e-5);
  std::vector<double> y(x.size());
  for (size_t c = 0; c < x.size(); ++c) y[c] = m::layernorm_out(x[c], mu, rs, w[c], b[c]);
  if (mean_out) *mean_out = mu;
  if (rstd_out) *rstd_out = rs;
  return y;
}

TEST(SharedMath, LayerNormForwardIsTheTextbookFormula) {
  const std::vector<double> x = random_vec(24, 1), w = random_vec(24, 2), b = random_vec(24, 3);
  double mu = 0, rs = 0;
  const std::vector<double> y = layernorm_row(x, w, b, &mu, &rs);
  double var = 0;
  for (double v : x) var += (v - mu) * (v - mu);
  var /= 24;
  EXPECT_DOUBLE_EQ(rs, 1 / std::sqrt(var + 1e-5));
  for (size_t c = 0; c < x.size(); ++c) EXPECT_NEAR(y[c], (x[c] - mu) / std::sqrt(var + 1e-5) * w[c] + b[c], 1e-14);
}

TEST(SharedMath, LayerNormBackwardMatchesFiniteDifferences) {
  const size_t C = 16;
  const std::vector<double> x = random_vec(C, 4), w = random_vec(C, 5), b = random_vec(C, 6), dy = random_vec(C, 7);
  double mu = 0, rs = 0;
  layernorm_row(x, w, b, &mu, &rs);
  // The backward from the shared pieces: the two row means, then dx per element.
  double g_mean = 0, gx_mean = 0;
  for (size_t c = 0; c < C; ++c) {
    const double g = w[c] * dy[c];
    g_mean += g;
    gx_mean += g * m::layernorm_xhat(x[c], mu, rs);
  }
  g_mean /= double(C);
  gx_mean /= double(C);
  std::vector<double> dx(C), dw(C);
  for (size_t c = 0; c < C; ++c) {
    dx[c] = m::layernorm_dx(w[c] * dy[c], m::layernorm_xhat(x[c], mu, rs), g_mean, gx_mean, rs);
    dw[c] = dy[c] * m::layernorm_xhat(x[c], mu, rs);
  }
  // L = sum dy . y: dL/dx and dL/dw by central differences.
  auto loss = [&](const std::vector<double>& xx, const std::vector<double>& ww) {
    const std::vector<double> y = layernorm_row(xx, ww, b);
    return std::inner_product(y.begin(), y.end(), dy.begin(), 0.0);
  };
  std::vector<double> xp = x, wp = w;
  expect_gradient(xp, dx, [&] { return loss(xp, w); }, "layernorm dx");
  expect_gradient(wp, dw, [&] { return loss(x, wp); }, "layernorm dw");
}

TEST(SharedMath, CrossEntropyLossAndGradient) {
  const int V = 11, target = 4;
  const std::vector<double> x = random_vec(V, 8, -5, 5);
  auto row_loss = [&](const std::vector<double>& xx) {
    double mx = -std::numeric_limits<double>::infinity(), sum = 0;
    for (double v : xx) mx = m::max_a(mx, v);
    for (double v : xx) sum += m::exp_a(v - mx);
    return m::crossentropy_loss(mx, xx[target], sum);
  };
  double mx = -std::numeric_limits<double>::infinity(), sum = 0;
  for (double v : x) mx = m::max_a(mx, v);
  for (double v : x) sum += m::exp_a(v - mx);
  std::vector<double> p(V), grad(V);
  for (int i = 0; i < V; ++i) p[size_t(i)] = m::softmax_prob(x[size_t(i)], mx, 1 / sum);
  EXPECT_NEAR(std::accumulate(p.begin(), p.end(), 0.0), 1.0, 1e-15);
  EXPECT_NEAR(row_loss(x), -std::log(p[target]), 1e-14);
  for (int i = 0; i < V; ++i) grad[size_t(i)] = m::crossentropy_grad(p[size_t(i)], i == target, 1.0);
  std::vector<double> xp = x;
  expect_gradient(xp, grad, [&] { return row_loss(xp); }, "crossentropy dlogits");
  // The loss is formed from the logits, not from a rounded probability: a
  // probability that underflows in fp32 still gives a finite, exact loss.
  const float far = m::crossentropy_loss(200.0f, 0.0f, 1.0f);
  EXPECT_EQ(far, 200.0f);
}

// A row of scores visited in blocks with the online state (o, m, l) against
// the direct softmax: same output and lse, in any block split, and an empty
// state merges as zero weight.
TEST(SharedMath, OnlineSoftmaxEqualsDirectSoftmax) {
  const int Tk = 13, hs = 3;
  const std::vector<double> s = random_vec(Tk, 9, -4, 4), v = random_vec(size_t(Tk) * hs, 10);
  double mx = -std::numeric_limits<double>::infinity(), sum = 0;
  for (double x : s) mx = std::max(mx, x);
  for (double x : s) sum += std::exp(x - mx);
  std::vector<double> direct(hs, 0.0);
  for (int j = 0; j < Tk; ++j)
    for (int c = 0; c < hs; ++c) direct[size_t(c)] += std::exp(s[size_t(j)] - mx) / sum * v[size_t(j) * hs + c];
  for (int block : {1, 4, 13}) {
    std::vector<double> o(hs, 0.0);
    double mm = m::neg_inf<double>(), l = 0;
    EXPECT_EQ(m::online_rescale(mm, 0.0), 0.0);
    for (int j0 = 0; j0 < Tk; j0 += block) {
      const int j1 = std::min(Tk, j0 + block);
      double bm = m::neg_inf<double>();
      for (int j = j0; j < j1; ++j) bm = m::max_a(bm, s[size_t(j)]);
      const double m_new = m::max_a(mm, bm), alpha = m::online_rescale(mm, m_new);
      for (double& x : o) x *= alpha;
      double bsum = 0;
      for (int j = j0; j < j1; ++j) {
        const double p = m::exp_a(s[size_t(j)] - m_new);
        bsum += p;
        for (int c = 0; c < hs; ++c) o[size_t(c)] += p * v[size_t(j) * hs + c];
      }
      l = alpha * l + bsum;
      mm = m_new;
    }
    for (int c = 0; c < hs; ++c) EXPECT_NEAR(o[size_t(c)] * m::online_inv_sum(l), direct[size_t(c)], 1e-14) << block;
    EXPECT_NEAR(m::online_lse(mm, l), mx + std::log(sum), 1e-14) << block;
  }
  EXPECT_EQ(m::online_inv_sum(0.0), 0.0);
  EXPECT_EQ(m::online_lse(m::neg_inf<double>(), 0.0), m::neg_inf<double>());
}

// The FlashAttention-2 backward pieces for one query row: dS from P, dP and D
// equals the softmax Jacobian applied to dP (finite differences of
// L = sum_j P_j dP_j over the raw scores).
TEST(SharedMath, AttentionBackwardIsTheSoftmaxJacobian) {
  const int Tk = 7, hs = 4;
  const double scale = m::attention_scale<double>(hs);
  EXPECT_DOUBLE_EQ(scale, 0.5);
  const std::vector<double> s = random_vec(Tk, 11, -3, 3), dp = random_vec(Tk, 12);
  auto probs = [&](const std::vector<double>& ss) {
    double mx = m::neg_inf<double>(), sum = 0;
    for (double x : ss) mx = m::max_a(mx, x * scale);
    for (double x : ss) sum += m::exp_a(x * scale - mx);
    std::vector<double> p(ss.size());
    for (size_t j = 0; j < ss.size(); ++j) p[j] = m::attention_prob(ss[j], scale, mx + std::log(sum));
    return p;
  };
  const std::vector<double> p = probs(s);
  double D = 0;  // rowsum(dO * O) = sum_j P_j dP_j
  for (int j = 0; j < Tk; ++j) D += p[size_t(j)] * dp[size_t(j)];
  std::vector<double> ds(Tk);
  for (int j = 0; j < Tk; ++j) ds[size_t(j)] = m::attention_dscore(p[size_t(j)], dp[size_t(j)], D, scale);
  auto loss = [&](const std::vector<double>& ss) {
    const std::vector<double> pp = probs(ss);
    return std::inner_product(pp.begin(), pp.end(), dp.begin(), 0.0);
  };
  std::vector<double> sp = s;
  expect_gradient(sp, ds, [&] { return loss(sp); }, "attention dscores");
}

TEST(SharedMath, VisibleKeysIsTheCausalMaskByAbsolutePosition) {
  EXPECT_EQ(m::visible_keys(8, 3, 0, true), 4);   // keys 0..3
  EXPECT_EQ(m::visible_keys(8, 3, 4, true), 0);   // block starts after the query
  EXPECT_EQ(m::visible_keys(8, 20, 4, true), 8);  // the whole block is in the past
  EXPECT_EQ(m::visible_keys(8, 3, 4, false), 8);  // not causal
}

// fp32 against fp64 through the same shared functions: each stays within a
// few ulps of its fp64 value at these magnitudes.
TEST(SharedMath, FloatFollowsDouble) {
  for (double x : random_vec(64, 13, -6, 6)) {
    const float xf = float(x);
    EXPECT_NEAR(m::exp_a(xf), m::exp_a(double(xf)), 4 * std::numeric_limits<float>::epsilon() * std::exp(double(xf)));
    EXPECT_NEAR(m::online_rescale(xf, 6.0f), std::exp(double(xf) - 6.0), 4e-7);
    EXPECT_NEAR(m::layernorm_out(xf, 0.25f, 2.0f, 0.5f, 0.125f), (double(xf) - 0.25) * 2 * 0.5 + 0.125,
                8 * std::numeric_limits<float>::epsilon() * 7);
  }
}

}  // namespace
}  // namespace pb::kernels
