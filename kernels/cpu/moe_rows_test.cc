// Tests of the rows of a mixture-of-experts MLP (moe_rows.cc) against plain
// double loops over the same routing: admitted tokens land on their expert's
// row and nowhere else, the combine is the weighted sum over admitted choices
// best first, the accumulate form leaves a token with no admitted choice
// untouched bit for bit, and the backward's weight gradient is the dot
// product the forward's weight multiplied.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/test_util.h"

namespace pb::kernels {
namespace {

using namespace testing;

template <class T>
class MoeRows : public ::testing::Test {};
using Types = ::testing::Types<double, float, bf16>;
TYPED_TEST_SUITE(MoeRows, Types);

template <class T>
constexpr double tol_of() {
  return std::is_same_v<T, double> ? 1e-15 : std::is_same_v<T, bf16> ? 2 * kBf16Tol : kF32Tol;
}

// Six tokens, two choices each over three experts of four rows: token 2's
// second choice and token 4's both dropped, the rest in admission order.
struct Routing {
  static constexpr int N = 6, K = 2, E = 3, rows = 4, C = 5;
  std::vector<int32_t> choice{0, 1, 1, 2, 0, 2, 2, 0, 1, 0, 2, 1};
  std::vector<int32_t> slot{0, 0, 1, 0, 1, -1, 1, 2, -1, -1, 2, 2};
  int64_t row(int i) const { return slot[size_t(i)] < 0 ? -1 : int64_t(choice[size_t(i)]) * rows + slot[size_t(i)]; }
};

TYPED_TEST(MoeRows, ScatterPutsEachAdmittedTokenOnItsExpertsRowOnly) {
  using T = TypeParam;
  const Routing r;
  const std::vector<double> xd = bf16_exact(size_t(r.N) * r.C, 11);
  const std::vector<T> x = to<T>(xd);
  const T sentinel = T(7.0);
  std::vector<T> xe(size_t(r.E) * r.rows * r.C, sentinel);
  moe_scatter_rows(xe.data(), x.data(), r.choice.data(), r.slot.data(), r.N, r.K, r.C, r.rows);
  std::vector<int> owner(size_t(r.E) * r.rows, -1);
  for (int i = 0; i < r.N * r.K; ++i)
    if (r.row(i) >= 0) owner[size_t(r.row(i))] = i / r.K;
  for (size_t row = 0; row < owner.size(); ++row)
    for (int c = 0; c < r.C; ++c) {
      const double got = double(xe[row * r.C + size_t(c)]);
      const double want = owner[row] < 0 ? 7.0 : xd[size_t(owner[row]) * r.C + size_t(c)];
      EXPECT_EQ(got, want) << "row " << row << " column " << c;
    }
}

TYPED_TEST(MoeRows, CombineIsTheWeightedSumOverAdmittedChoices) {
  using T = TypeParam;
  using A = acc_t<T>;
  const Routing r;
  const std::vector<double> yd = bf16_exact(size_t(r.E) * r.rows * r.C, 12);
  const std::vector<double> wd = bf16_exact(size_t(r.N) * r.K, 13, 0, 1);
  const std::vector<T> y = to<T>(yd);
  std::vector<A> w(wd.begin(), wd.end());
  std::vector<T> out(size_t(r.N) * r.C, T(3.0));
  moe_combine(out.data(), y.data(), r.choice.data(), r.slot.data(), w.data(), r.N, r.K, r.C, r.rows, false);
  std::vector<double> want(size_t(r.N) * r.C, 0.0);
  for (int n = 0; n < r.N; ++n)
    for (int j = 0; j < r.K; ++j) {
      const int64_t row = r.row(n * r.K + j);
      if (row < 0) continue;
      for (int c = 0; c < r.C; ++c)
        want[size_t(n) * r.C + c] += wd[size_t(n) * r.K + j] * yd[size_t(row) * r.C + c];
    }
  EXPECT_LT(rel_err(to_double(out), want), tol_of<T>());
  for (int c = 0; c < r.C; ++c) EXPECT_EQ(double(out[size_t(4) * r.C + c]), 0.0) << "token 4 has no admitted choice";
}

TYPED_TEST(MoeRows, AccumulateAddsOnceAndLeavesATokenWithNoAdmittedChoiceUntouched) {
  using T = TypeParam;
  const Routing r;
  const std::vector<double> yd = bf16_exact(size_t(r.E) * r.rows * r.C, 14);
  const std::vector<double> od = bf16_exact(size_t(r.N) * r.C, 15);
  const std::vector<T> y = to<T>(yd);
  std::vector<T> out = to<T>(od);
  for (int c = 0; c < r.C; ++c) out[size_t(4) * r.C + c] = T(-0.0);  // -0 + 0 would be +0
  moe_combine(out.data(), y.data(), r.choice.data(), r.slot.data(), static_cast<const acc_t<T>*>(nullptr), r.N,
              r.K, r.C, r.rows, true);
  std::vector<double> want = od;
  for (int c = 0; c < r.C; ++c) want[size_t(4) * r.C + c] = 0.0;
  for (int n = 0; n < r.N; ++n)
    for (int j = 0; j < r.K; ++j) {
      const int64_t row = r.row(n * r.K + j);
      if (row < 0) continue;
      for (int c = 0; c < r.C; ++c) want[size_t(n) * r.C + c] += yd[size_t(row) * r.C + c];
    }
  EXPECT_LT(rel_err(to_double(out), want), tol_of<T>());
  for (int c = 0; c < r.C; ++c) EXPECT_TRUE(std::signbit(double(out[size_t(4) * r.C + c]))) << "column " << c;
}

TYPED_TEST(MoeRows, BackwardScalesTheOutputGradientAndDotsItWithTheExpertRow) {
  using T = TypeParam;
  using A = acc_t<T>;
  const Routing r;
  const std::vector<double> yd = bf16_exact(size_t(r.E) * r.rows * r.C, 16);
  const std::vector<double> dd = bf16_exact(size_t(r.N) * r.C, 17);
  const std::vector<double> wd = bf16_exact(size_t(r.N) * r.K, 18, 0, 1);
  const std::vector<T> y = to<T>(yd), dout = to<T>(dd);
  std::vector<A> w(wd.begin(), wd.end()), dw(size_t(r.N) * r.K, A(5));
  std::vector<T> dy(y.size(), T(9.0));
  moe_combine_backward(dy.data(), dw.data(), dout.data(), y.data(), r.choice.data(), r.slot.data(), w.data(), r.N,
                       r.K, r.C, r.rows);
  std::vector<double> want_dy(y.size(), 9.0), want_dw(dw.size(), 0.0);
  for (int n = 0; n < r.N; ++n)
    for (int j = 0; j < r.K; ++j) {
      const size_t i = size_t(n) * r.K + j;
      const int64_t row = r.row(int(i));
      if (row < 0) continue;
      for (int c = 0; c < r.C; ++c) {
        want_dy[size_t(row) * r.C + c] = wd[i] * dd[size_t(n) * r.C + c];
        want_dw[i] += dd[size_t(n) * r.C + c] * yd[size_t(row) * r.C + c];
      }
    }
  EXPECT_LT(rel_err(to_double(dy), want_dy), tol_of<T>());
  std::vector<double> got_dw(dw.begin(), dw.end());
  EXPECT_LT(rel_err(got_dw, want_dw), tol_of<T>());
  EXPECT_EQ(got_dw[5], 0.0) << "a dropped choice has no weight gradient";
  EXPECT_EQ(got_dw[8], 0.0);
}

}  // namespace
}  // namespace pb::kernels
