// This machine's communication figures: measured, positive, and given to the
// planner at a world's core share (one fit per op and group size).
#include "suites/calibrate/local_hardware.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "harness/status.h"
#include "reference/model_config.h"
#include "suites/planner/machine.h"

namespace pb::calibrate {
namespace {

TEST(LocalHardware, HardwareIsTheRanksShareOfTheMachine) {
  LocalHardware h;
  h.peak_flops_per_rank = 40e9;
  h.copy_GBps = 8;
  h.latency_us = 50;
  h.cores = 2;
  const planner::Hardware one = planner_hardware(h, 1), four = planner_hardware(h, 4);
  EXPECT_DOUBLE_EQ(one.peak_tflops, 0.04);
  EXPECT_DOUBLE_EQ(one.bw_intra_GBps, 8);
  EXPECT_DOUBLE_EQ(four.peak_tflops, 0.02);  // 4 ranks on 2 cores: half a core each
  EXPECT_DOUBLE_EQ(four.bw_inter_GBps, 4);
  EXPECT_DOUBLE_EQ(four.latency_us, 50);
}

TEST(LocalHardware, MeasuredFiguresArePositive) {
  const LocalHardware h = measure_local_hardware(1e9, 2);
  EXPECT_GT(h.copy_GBps, 0.01);
  EXPECT_GT(h.latency_us, 0);
  EXPECT_LT(h.latency_us, 1e5);
  // The fixed-cost regime, not a 4-byte fast path: a ring step costs at
  // least a thread handoff (well above 0.1 us) at 2 and at 4 ranks.
  EXPECT_GT(h.latency_us, 0.1);
  EXPECT_GT(local_step_latency_us(4), 0.1);
  EXPECT_THROW(local_step_latency_us(1), InputError);
}

// Each op's bus bandwidth is measured at a step's sizes and reaches the plan
// as that op's fit: alpha the world's ring step per ring step of the group
// or the measured intercept where larger, both it and the bandwidth scaled
// from the group's own threads' core share to the world's; ops not measured
// keep the copy bandwidth.
TEST(LocalHardware, BusBandwidthPerOpBecomesThePlansFits) {
  std::map<std::string, double> alpha;
  const std::map<std::string, double> two = measure_bus_bandwidth(2, &alpha);
  EXPECT_GE(two.size(), 3u);  // an op whose times do not grow is left out: at most two, on a noisy machine
  EXPECT_EQ(alpha.size(), two.size());  // each fit's intercept beside its bandwidth
  for (const auto& [op, gbps] : two) {
    EXPECT_TRUE(std::find(planner::collective_ops().begin(), planner::collective_ops().end(), op) !=
                planner::collective_ops().end())
        << op;
    EXPECT_TRUE(std::isfinite(gbps) && gbps > 0.01 && gbps < 1e4) << op << " " << gbps;
    EXPECT_TRUE(std::isfinite(alpha[op]) && alpha[op] >= 0 && alpha[op] < 1e4) << op << " " << alpha[op];
  }
  EXPECT_THROW(measure_bus_bandwidth(1), InputError);
  const auto xt = measure_collective_times("all_gather", 2, {4096, 65536}, 0.001);
  ASSERT_EQ(xt.size(), 2u);
  EXPECT_EQ(xt[1].first, 65536);
  EXPECT_GT(xt[1].second, 0);

  LocalHardware h;
  h.peak_flops_per_rank = 1e10;
  h.copy_GBps = 5;
  h.latency_us = 2;
  h.latency_us_by_world[4] = 3;
  h.cores = 2;
  h.bus_GBps[2]["all_gather"] = 20;
  h.bus_GBps[4]["all_gather"] = 8;
  const planner::Hardware four = planner_hardware(h, 4), two_ranks = planner_hardware(h, 2);
  ASSERT_EQ(four.collectives.count("all_gather"), 1u);
  const std::vector<planner::CollectiveFit>& f = four.collectives.at("all_gather");
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[0].group_size, 2);
  EXPECT_DOUBLE_EQ(f[0].alpha_us, 3);    // one ring step of 2 ranks at world 4's latency
  EXPECT_DOUBLE_EQ(f[0].GBps, 10);       // 2 threads had the 2 cores; in a world of 4, half of them
  EXPECT_DOUBLE_EQ(f[1].alpha_us, 9);    // three ring steps of 4 ranks
  EXPECT_DOUBLE_EQ(f[1].GBps, 8);        // measured time-shared already
  EXPECT_DOUBLE_EQ(two_ranks.collectives.at("all_gather")[1].GBps, 16);
  EXPECT_EQ(four.collectives.count("send_recv"), 0u);
  EXPECT_DOUBLE_EQ(four.bw_intra_GBps, 2.5);  // the fallback for the ops without a fit
  // A measured intercept replaces the ring steps where it is larger, scaled
  // like the bandwidth from the group's own core share to the world's.
  h.bus_alpha_us[2]["all_gather"] = 7;
  h.bus_alpha_us[4]["all_gather"] = 1;
  EXPECT_DOUBLE_EQ(planner_hardware(h, 4).collectives.at("all_gather")[0].alpha_us, 14);
  EXPECT_DOUBLE_EQ(planner_hardware(h, 4).collectives.at("all_gather")[1].alpha_us, 9);  // the ring steps
  EXPECT_DOUBLE_EQ(planner_hardware(h, 2).collectives.at("all_gather")[0].alpha_us, 7);

  // measure_world measures every power-of-two group up to the world, once.
  LocalHardware w;
  w.cores = 2;
  measure_world(w, 2);
  EXPECT_EQ(w.bus_GBps.count(2), 1u);
  EXPECT_EQ(w.bus_alpha_us.count(2), 1u);
  EXPECT_EQ(w.bus_GBps.count(4), 0u);
  const auto before = w.bus_GBps;
  measure_world(w, 2);
  EXPECT_EQ(w.bus_GBps, before);
}

TEST(LocalHardware, LatencyPerWorldIsUsedForThatWorld) {
  LocalHardware h;
  h.peak_flops_per_rank = 1e10;
  h.copy_GBps = 5;
  h.latency_us = 50;
  h.latency_us_by_world[4] = 120;
  EXPECT_DOUBLE_EQ(planner_hardware(h, 4).latency_us, 120);
  EXPECT_DOUBLE_EQ(planner_hardware(h, 2).latency_us, 50);  // the fallback
}

// The cost of a collective issued without waiting is measured only where
// ranks time-share cores (here 2 ranks told they have one core) and run
// their collectives on progress threads, at four amounts of compute between
// calls, and reaches the plan of that world only. Where the backend defers
// them (the default there), they are blocking calls: nothing to measure.
TEST(LocalHardware, AsyncCallCostIsMeasuredForTimeSharedWorlds) {
  using P = WorldOptions::Progress;
  EXPECT_TRUE(measure_async_call_cost(2, 2, P::thread).empty());
  EXPECT_TRUE(measure_async_call_cost(4, 8, P::thread).empty());
  EXPECT_TRUE(measure_async_call_cost(2, 1).empty());  // automatic: deferred at 2 ranks on one core
  EXPECT_TRUE(measure_async_call_cost(2, 1, P::deferred).empty());
  const std::vector<planner::AsyncCallCost> t = measure_async_call_cost(2, 1, P::thread);
  ASSERT_EQ(t.size(), 4u);
  for (size_t i = 0; i < t.size(); ++i) {
    EXPECT_TRUE(std::isfinite(t[i].cost_us) && t[i].cost_us >= 0) << i;
    EXPECT_LT(t[i].cost_us, 1e6) << i;  // below a second per call
    if (i) {
      EXPECT_GT(t[i].compute_us, t[i - 1].compute_us);
    }
  }
  LocalHardware h;
  h.peak_flops_per_rank = 1e10;
  h.copy_GBps = 5;
  h.latency_us = 50;
  h.cores = 1;
  h.async_call_cost_by_world[2] = t;
  EXPECT_EQ(planner_hardware(h, 2).async_call_cost.size(), 4u);
  EXPECT_TRUE(planner_hardware(h, 4).async_call_cost.empty());
  // measure_world: the ring step always, the async cost only past the cores.
  LocalHardware w;
  w.cores = 4;
  measure_world(w, 2);
  EXPECT_EQ(w.latency_us_by_world.count(2), 1u);
  EXPECT_TRUE(w.async_call_cost_by_world.empty());
  measure_world(w, 1);
  EXPECT_EQ(w.latency_us_by_world.count(1), 0u);
}

// The GEMMs of a step reach a fraction of the large-square peak, smaller for
// narrower models; the planner's compute time divides by it.
}  // namespace
}  // namespace pb::calibrate
