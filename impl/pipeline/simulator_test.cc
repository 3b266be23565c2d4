// Simulator: with equal costs every generator's simulated bubble equals its
// declared formula (to 1e-12: the costs are sums of thirds, not exact in
// binary) and its peak in-flight counts equal the declared peaks.
#include "impl/pipeline/simulator.h"

#include <gtest/gtest.h>

#include "harness/status.h"
#include "impl/pipeline/cost.h"
#include "impl/pipeline/test_util.h"
#include "impl/pipeline/validate.h"

namespace pb::pipeline {
namespace {

constexpr double kTol = 1e-12;

std::string label(ScheduleKind k, const ScheduleConfig& c) {
  return std::string(schedule_name(k)) + " pp=" + std::to_string(c.pp) +
         " m=" + std::to_string(c.microbatches) + " v=" + std::to_string(c.virtual_stages) +
         " steps=" + std::to_string(c.steps);
}

TEST(Simulator, EqualCostsGiveTheDeclaredBubbleAndPeaks) {
  const Costs equal{1, 1, 1, 0};
  for (const auto& [kind, cfg] : testing::sweep()) {
    SCOPED_TRACE(label(kind, cfg));
    const Schedule s = make_schedule(kind, cfg);
    const SimResult r = simulate(s, equal);
    const DeclaredBubble d = declared_bubble(kind, cfg, equal);
    ASSERT_TRUE(d.over_ideal.has_value());
    EXPECT_NEAR(r.bubble_over_ideal, *d.over_ideal, kTol);
    EXPECT_NEAR(r.bubble_fraction, *d.fraction, kTol);
    EXPECT_EQ(r.peak_in_flight, declared_peak_in_flight(kind, cfg));
    EXPECT_EQ(r.peak_until_b, declared_peak_until_b(kind, cfg));
    // Every rank does the same work: m * steps * (F + B + W).
    for (double busy : r.busy) EXPECT_NEAR(busy, 3.0 * cfg.microbatches * cfg.steps, kTol);
  }
}

TEST(Simulator, DeclaredBubbleHoldsForUnequalCosts) {
  for (const Costs c : {Costs{2, 3, 1, 0}, Costs{1, 2, 0.5, 0}, Costs{3, 1, 1, 0}}) {
    for (const auto& [kind, cfg] : testing::sweep()) {
      SCOPED_TRACE(label(kind, cfg) + " F=" + std::to_string(c.f) + " B=" + std::to_string(c.b));
      const DeclaredBubble d = declared_bubble(kind, cfg, c);
      ASSERT_TRUE(d.over_ideal.has_value());  // W <= min(F, B) for all three
      EXPECT_NEAR(simulate(make_schedule(kind, cfg), c).bubble_over_ideal, *d.over_ideal, kTol);
    }
  }
}

TEST(Simulator, ZBH1ThirdOf1F1BWithEqualCosts) {
  const Costs equal{1, 1, 1, 0};
  const double zb = simulate(make_zb_h1({4, 8}), equal).bubble_over_ideal;
  const double ofob = simulate(make_1f1b({4, 8}), equal).bubble_over_ideal;
  EXPECT_NEAR(zb, 3.0 / 24.0, kTol);
  EXPECT_NEAR(ofob, 3.0 / 8.0, kTol);
  // Outside W <= min(F, B) the paper's formula is not declared.
  EXPECT_FALSE(declared_bubble(ScheduleKind::zb_h1, {4, 8}, Costs{1, 1, 2, 0}).over_ideal.has_value());
}

TEST(Simulator, P2PLatencyDelaysReceives) {
  // pp=2, m=1: F on rank 0 [0,1], message lands at 1.5, F on rank 1 [1.5,2.5],
  // BW [2.5,4.5], gradient lands at 5, BW on rank 0 [5,7].
  const SimResult r = simulate(make_1f1b({2, 1}), Costs{1, 1, 1, 0.5});
  EXPECT_DOUBLE_EQ(r.makespan, 7.0);
  ASSERT_EQ(r.timeline[1].size(), 2u);
  EXPECT_DOUBLE_EQ(r.timeline[1][0].start, 1.5);
  EXPECT_DOUBLE_EQ(r.timeline[0][1].start, 5.0);
  EXPECT_DOUBLE_EQ(r.ideal, 3.0);
  EXPECT_DOUBLE_EQ(r.bubble_over_ideal, 4.0 / 3.0);
  EXPECT_DOUBLE_EQ(r.bubble_fraction, 4.0 / 7.0);
}

TEST(Simulator, TimelinesDoNotOverlapAndCoverEveryComputeAction) {
  const Schedule s = make_interleaved({4, 8, 3});
  const SimResult r = simulate(s, Costs{1, 2, 1, 0.1});
  for (int rank = 0; rank < s.pp; ++rank) {
    size_t computes = 0;
    for (const Action& a : s.ranks[size_t(rank)]) computes += is_compute(a.op);
    const auto& tl = r.timeline[size_t(rank)];
    ASSERT_EQ(tl.size(), computes);
    for (size_t i = 1; i < tl.size(); ++i) EXPECT_GE(tl[i].start, tl[i - 1].end);
    EXPECT_LE(tl.back().end, r.makespan);
  }
}

TEST(Simulator, SplitBackwardCostsBAndWSeparately) {
  const SimResult r = simulate(make_zb_h1({1, 2}), Costs{1, 2, 3, 0});
  ASSERT_EQ(r.timeline[0].size(), 6u);  // F0 B0 W0 F1 B1 W1
  EXPECT_EQ(r.timeline[0][2].op, Op::backward_weight);
  EXPECT_DOUBLE_EQ(r.timeline[0][2].end - r.timeline[0][2].start, 3.0);
  EXPECT_DOUBLE_EQ(r.makespan, 12.0);
  EXPECT_DOUBLE_EQ(r.bubble_over_ideal, 0.0);
}

TEST(Simulator, RejectsBadCostsAndUnfinishableSchedules) {
  EXPECT_THROW(simulate(make_1f1b({2, 2}), Costs{-1, 1, 1, 0}), InputError);
  EXPECT_THROW(simulate(make_1f1b({2, 2}), Costs{0, 0, 0, 0}), InputError);
  EXPECT_THROW(simulate(make_1f1b({2, 2}), Costs{1, 1, 1, -0.5}), InputError);
  Schedule s = make_gpipe({2, 1});
  std::swap(s.ranks[0][1], s.ranks[0][2]);  // RECV_GRAD before SEND_ACT
  ASSERT_FALSE(find_issues(s).empty());
  EXPECT_THROW(simulate(s, Costs{}), InputError);
}

}  // namespace
}  // namespace pb::pipeline
