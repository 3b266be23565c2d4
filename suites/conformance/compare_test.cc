#include "suites/conformance/compare.h"

#include <gtest/gtest.h>

#include <cmath>

namespace pb {
namespace {

Trace make(double loss_off, double grad_off, double param_off) {
  Trace t;
  for (int i = 0; i < 4; ++i) t.loss.push_back(4.0 - 0.1 * i + loss_off);
  t.grads1 = {1.0 + grad_off, -2.0, 3.0};
  t.params = {0.5, 0.25 + param_off, -1.0};
  return t;
}

TEST(Compare, RelativeErrors) {
  EXPECT_NEAR(rel_error(1.1, 1.0), 0.1, 1e-15);
  EXPECT_DOUBLE_EQ(rel_l2({3, 4}, {0, 0}), 5.0);
  EXPECT_DOUBLE_EQ(rel_l2({1, 1}, {1, 0}), 1.0);
  EXPECT_TRUE(std::isinf(rel_l2({NAN, 1}, {1, 1})));
  EXPECT_THROW(rel_l2({1}, {1, 2}), std::runtime_error);
}

TEST(Compare, RulePassesWithinCTimesFloorAndFailsBeyond) {
  Trace truth = make(0, 0, 0), ref = make(1e-6, 1e-6, 1e-6);
  Trace good = make(5e-6, 5e-6, 5e-6), bad = make(2e-5, 0, 0);
  auto ok = check_rule(good, {&ref}, truth, DType::f32);
  EXPECT_TRUE(all_pass(ok));
  for (const auto& c : ok) {
    EXPECT_FALSE(c.bitwise);
    EXPECT_LE(c.ratio, 8.0);
    EXPECT_GT(c.ratio, 1.0);  // 5x the reference's gap
  }
  auto fail = check_rule(bad, {&ref}, truth, DType::f32);
  EXPECT_FALSE(all_pass(fail));
  EXPECT_FALSE(fail[0].pass);  // step-1 loss 20x the floor
  EXPECT_TRUE(fail[4].pass);   // grads untouched
}

TEST(Compare, FloorIsRaisedToUlpsAndUsesTheWorstReference) {
  Trace truth = make(0, 0, 0);
  auto c = check_rule(truth, {&truth}, truth, DType::f32);
  for (const auto& q : c) {
    EXPECT_DOUBLE_EQ(q.floor, 4 * dtype_eps(DType::f32));
    EXPECT_EQ(q.ratio, 0.0);
  }
  Trace r1 = make(1e-7, 0, 0), r2 = make(1e-5, 0, 0);
  auto d = check_rule(make(4e-5, 0, 0), {&r1, &r2}, truth, DType::f32);
  EXPECT_TRUE(d[0].pass);  // against the worse reference: ratio 4
  auto e = check_rule(make(4e-5, 0, 0), {&r1}, truth, DType::f32);
  EXPECT_FALSE(e[0].pass);
}

TEST(Compare, LossFloorIsTheRunningMaximum) {
  Trace truth = make(0, 0, 0), ref = make(0, 0, 0), s = make(0, 0, 0);
  ref.loss[0] += 1e-5;  // the reference's gap at step 1 only
  s.loss[2] += 5e-5;    // the strategy's gap at step 3: within 8x of the running max
  auto c = check_rule(s, {&ref}, truth, DType::f32);
  EXPECT_TRUE(c[2].pass);
  EXPECT_NEAR(c[2].floor, 1e-5 / 4.0, 1e-12);
}

TEST(Compare, BitwiseDetectsOneUlp) {
  Trace a = make(0, 0, 0), b = a;
  EXPECT_TRUE(all_pass(check_bitwise(a, b)));
  b.params[1] = std::nextafter(b.params[1], 1.0);
  auto c = check_bitwise(a, b);
  EXPECT_FALSE(all_pass(c));
  EXPECT_TRUE(c.back().bitwise);
  EXPECT_FALSE(c.back().pass);
}

}  // namespace
}  // namespace pb
