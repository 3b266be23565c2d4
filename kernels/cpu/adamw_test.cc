// Tests of the AdamW step against the PyTorch AdamW formula evaluated
// independently in long double over several steps (decay on and off, gradient
// scaling), the bf16-params / fp32-master variant, in-place aliasing, and
// sum_squares.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/test_util.h"

namespace pb::kernels {
namespace {

using namespace testing;

using LD = long double;

// torch.optim.AdamW, textbook form (Loshchilov & Hutter 2019, Alg. 2 with
// PyTorch's eps placement: eps added to sqrt(vhat)).
struct Expected {
  std::vector<LD> p, m, v;
  void step(const std::vector<double>& g, const AdamWHyper& h, bool decay) {
    const LD b1 = h.beta1, b2 = h.beta2, t = LD(h.step);
    for (size_t i = 0; i < p.size(); ++i) {
      const LD gi = LD(g[i]) * LD(h.grad_scale);
      if (decay) p[i] *= 1 - LD(h.lr) * LD(h.weight_decay);
      m[i] = b1 * m[i] + (1 - b1) * gi;
      v[i] = b2 * v[i] + (1 - b2) * gi * gi;
      const LD mhat = m[i] / (1 - std::pow(b1, t)), vhat = v[i] / (1 - std::pow(b2, t));
      p[i] -= LD(h.lr) * mhat / (std::sqrt(vhat) + LD(h.eps));
    }
  }
};

// Normwise: max|got - want| <= tol * max|want|. Master and moments pass
// through ~3 roundings per step; over 3 steps 16 eps of M covers them, while a
// wrong bias correction or decay moves the master by >= lr * 1e-2 = 1e-4.
template <class M>
void expect_close(const std::vector<M>& got, const std::vector<LD>& want, const char* what) {
  const double tol = 16 * (sizeof(M) == 8 ? 2.220446049250313e-16 : 1.1920928955078125e-07);
  LD err = 0, scale = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    err = std::max(err, std::abs(LD(got[i]) - want[i]));
    scale = std::max(scale, std::abs(want[i]));
  }
  EXPECT_LE(double(err), tol * double(scale)) << what;
}

template <class T, class M>
void check_three_steps(bool decay) {
  const size_t n = 50;
  const auto p0 = bf16_exact(n, 1, -2, 2);
  Expected ex{std::vector<LD>(p0.begin(), p0.end()), std::vector<LD>(n, 0), std::vector<LD>(n, 0)};
  std::vector<M> master = to<M>(p0), m(n, M(0)), v(n, M(0));
  std::vector<T> param(n);
  AdamWHyper h;
  h.lr = 1e-2;
  h.weight_decay = 0.1;
  h.grad_scale = 0.5;
  for (long s = 1; s <= 3; ++s) {
    const auto g = bf16_exact(n, 10 + s, -3, 3);
    const auto gT = to<T>(g);
    h.step = s;
    adamw_step<T, M>(master.data(), param.data(), gT.data(), m.data(), v.data(), n, h, decay);
    ex.step(g, h, decay);
    expect_close(master, ex.p, "master");
    expect_close(m, ex.m, "m");
    expect_close(v, ex.v, "v");
    for (size_t i = 0; i < n; ++i) EXPECT_EQ(param[i], cast<T>(master[i]));
  }
}

TEST(AdamW, MatchesFormulaFp64) {
  check_three_steps<double, double>(true);
  check_three_steps<double, double>(false);
}
TEST(AdamW, MatchesFormulaFp32) {
  check_three_steps<float, float>(true);
  check_three_steps<float, float>(false);
}
TEST(AdamW, MatchesFormulaBf16ParamsFp32Master) {
  check_three_steps<bf16, float>(true);
  check_three_steps<bf16, float>(false);
}

// First step from zero state, written out by hand: mhat = g, vhat = g^2, so
// p1 = p0 (1 - lr wd) - lr g / (|g| + eps).
TEST(AdamW, FirstStepByHand) {
  double master = 1.0, m = 0, v = 0;
  const double g = 0.5;
  AdamWHyper h;
  h.lr = 1e-3;
  h.weight_decay = 0.1;
  adamw_step<double, double>(&master, &master, &g, &m, &v, 1, h, /*decay=*/true);  // in place
  EXPECT_NEAR(master, 0.9999 - 1e-3 * 0.5 / (0.5 + 1e-8), 1e-15);
  EXPECT_NEAR(m, 0.05, 1e-16);  // 1 - 0.9 is not exact in binary: a few ulps
  EXPECT_NEAR(v, 0.05 * 0.25, 1e-16);
  h.step = 0;
  auto bad_step = [&] { adamw_step<double, double>(&master, &master, &g, &m, &v, 1, h, true); };
  EXPECT_THROW(bad_step(), std::invalid_argument);
}

TEST(SumSquares, ExactOnIntegersAndAccurateOnRandom) {
  std::vector<double> ints(1000);
  for (size_t i = 0; i < ints.size(); ++i) ints[i] = double(int(i % 21) - 10);
  LD want = 0;
  for (double x : ints) want += LD(x) * x;
  EXPECT_EQ(sum_squares(ints.data(), ints.size()), double(want));
  EXPECT_EQ(sum_squares(to<bf16>(ints).data(), ints.size()), double(want));
  EXPECT_EQ(sum_squares(to<float>(ints).data(), ints.size()), double(want));
  const auto r = random_vec(4096, 3);
  LD s = 0;
  for (double x : r) s += LD(x) * x;
  // 4096 non-negative terms summed in double: relative error <= 4096 u ~ 5e-13.
  EXPECT_NEAR(sum_squares(r.data(), r.size()) / double(s), 1.0, 1e-12);
  EXPECT_EQ(sum_squares<float>(nullptr, 0), 0.0);
}

}  // namespace
}  // namespace pb::kernels
