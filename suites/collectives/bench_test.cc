// run_benchmark over a local world: the sink sees every case of the plan in
// order and every size once, rank 0 gets every rank's counters, and a failing
// rank comes back as an error naming it, with the case rank 0 was measuring.
#include "suites/collectives/bench.h"

#include <gtest/gtest.h>

#include <set>

#include "harness/comm/comm_log.h"

namespace pb::coll {
namespace {

BenchPlan small_plan() {
  BenchPlan p;
  p.ops = {&kAllReduce, &kBroadcast};
  p.dtypes = {DType::f32};
  p.redops = {ReduceOp::sum, ReduceOp::max};
  p.roots = {0, 2};
  p.bench.min_bytes = 64;
  p.bench.max_bytes = 1024;
  p.bench.step_factor = 4;  // 64, 256, 1024
  p.bench.iters = 2;
  p.bench.warmup = 1;
  return p;
}

TEST(CollectivesBench, RunsEveryCaseOnEveryRankAndGathersCounters) {
  WorldOptions wo;
  wo.size = 3;
  auto world = make_local_world(wo);
  std::vector<std::string> cases;
  int lines = 0;
  BenchSink sink;
  sink.on_case = [&](const BenchCase& c) {
    cases.push_back(std::string(c.op->name) + "/" + c.redop + "/" + std::to_string(c.root));
  };
  sink.on_line = [&](const BenchCase&, const BenchPoint& oop, const BenchPoint& ip) {
    ++lines;
    EXPECT_FALSE(oop.in_place);
    EXPECT_TRUE(ip.in_place);
    EXPECT_EQ(oop.wrong, 0);
  };
  const BenchResult r = run_benchmark(*world, small_plan(), sink);
  EXPECT_EQ(r.error, "");
  EXPECT_EQ(r.failed_at.op, nullptr);
  EXPECT_EQ(cases, (std::vector<std::string>{"all_reduce/sum/-1", "all_reduce/max/-1", "broadcast/none/0",
                                             "broadcast/none/2"}));
  EXPECT_EQ(lines, 4 * 3);  // 4 cases x 3 sizes
  EXPECT_EQ(r.wrong, 0);
  EXPECT_GT(r.mean_busbw_gbps, 0);
  std::set<std::string> ranks;
  for (const auto& row : r.counters) {
    ASSERT_EQ(row.size(), CommLog::csv_header().size());
    ranks.insert(row[0]);
  }
  EXPECT_EQ(ranks, (std::set<std::string>{"0", "1", "2"}));
}

TEST(CollectivesBench, AFailingRankIsReturnedWithTheCaseRankZeroWasIn) {
  WorldOptions wo;
  wo.size = 3;
  auto world = make_local_world(wo);
  BenchPlan p = small_plan();
  p.bench.fail_rank = 1;
  p.bench.fail_kind = FailureKind::raise;
  const BenchResult r = run_benchmark(*world, p);
  EXPECT_NE(r.error.find("rank 1: injected failure"), std::string::npos) << r.error;
  ASSERT_NE(r.failed_at.op, nullptr);
  EXPECT_EQ(r.failed_at.op, &kAllReduce);
  EXPECT_EQ(r.failed_at.redop, "sum");
  EXPECT_EQ(r.failed_bytes, 64u);
  EXPECT_TRUE(r.counters.empty());
}

}  // namespace
}  // namespace pb::coll
