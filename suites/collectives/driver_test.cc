// The collective benchmark driver: sizes, layouts and bus factors as
// nccl-tests defines them, every op validated with 0 wrong on the local
// backend, and the check catching broken collectives (teeth).
#include "suites/collectives/driver.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <mutex>

#include "harness/comm/runner.h"

namespace pb::coll {
namespace {

TEST(Collectives, SweepSizesFollowFactorOrStep) {
  BenchOptions o;
  o.min_bytes = 8;
  o.max_bytes = 128;
  o.step_factor = 2;
  EXPECT_EQ(sweep_sizes(o), (std::vector<size_t>{8, 16, 32, 64, 128}));
  o.step_factor = 0;
  o.step_bytes = 50;
  EXPECT_EQ(sweep_sizes(o), (std::vector<size_t>{8, 58, 108}));
}

TEST(Collectives, BusFactorsAndLayoutsAreNcclTests) {
  EXPECT_DOUBLE_EQ(kAllReduce.bus_factor(4), 1.5);
  EXPECT_DOUBLE_EQ(kReduceScatter.bus_factor(4), 0.75);
  EXPECT_DOUBLE_EQ(kAllGather.bus_factor(4), 0.75);
  EXPECT_DOUBLE_EQ(kAllToAll.bus_factor(4), 0.75);
  for (const CollDesc* d : {&kBroadcast, &kReduce, &kSendRecv}) EXPECT_DOUBLE_EQ(d->bus_factor(4), 1.0);
  Layout rs = kReduceScatter.layout(/*count=*/10, /*n=*/4, /*rank=*/3);  // rounded to 2 per rank
  EXPECT_EQ(rs.send, 8u);
  EXPECT_EQ(rs.recv, 2u);
  EXPECT_EQ(rs.recv_inplace, 6u);
  Layout ag = kAllGather.layout(10, 4, 1);
  EXPECT_EQ(ag.send, 2u);
  EXPECT_EQ(ag.recv, 8u);
  EXPECT_EQ(ag.send_inplace, 2u);
  EXPECT_EQ(find_coll("all_to_all"), &kAllToAll);
  EXPECT_EQ(find_coll("send_recv"), &kSendRecv);
  EXPECT_EQ(find_coll("gather"), nullptr);
  EXPECT_EQ(all_colls().size(), 7u);
}

// Runs op over a small sweep on a local world; returns rank 0's points.
std::vector<BenchPoint> bench(int n, const CollDesc& op, DType t, ReduceOp ro, int root) {
  BenchOptions o;
  o.min_bytes = 96;
  o.max_bytes = 6000;
  o.step_factor = 4;
  o.iters = 2;
  o.warmup = 1;
  o.check = 2;
  std::vector<BenchPoint> out;
  run_local(n, [&](Communicator& c) {
    run_collective(c, op, t, ro, root, o, [&](const BenchPoint& a, const BenchPoint& b) {
      if (c.rank() == 0) out.push_back(a), out.push_back(b);
    });
  });
  return out;
}

TEST(Collectives, EveryOpValidatesWithNothingWrong) {
  for (const CollDesc* op : all_colls())
    for (DType t : {DType::f64, DType::f32, DType::bf16})
      for (ReduceOp ro : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max}) {
        if (!op->reduces && ro != ReduceOp::sum) continue;
        auto points = bench(3, *op, t, ro, /*root=*/2);
        ASSERT_EQ(points.size(), 6u);  // 96, 384, 1536 (6000 stops the sweep) x {out, in} place
        for (const auto& p : points) {
          EXPECT_EQ(p.wrong, 0) << op->name << " " << dtype_name(t) << " " << p.redop << " in place " << p.in_place;
          EXPECT_EQ(p.bytes, p.count * dtype_size(t));
          EXPECT_NEAR(p.busbw_gbps, p.algbw_gbps * op->bus_factor(3), 1e-9);
          EXPECT_GT(p.time_us, 0);
          EXPECT_EQ(p.root, op->rooted ? 2 : -1);
        }
      }
}

TEST(Collectives, TheCheckCatchesBrokenCollectives) {
  CollDesc wrong_op = kAllReduce;  // reduces with max instead of the requested op
  wrong_op.run = [](Communicator& comm, const Ctx& c, const void* s, void* r) {
    comm.all_reduce(s, r, c.param, c.dtype, ReduceOp::max);
  };
  CollDesc skipped = kAllGather;  // never runs: the output keeps stale bytes
  skipped.run = [](Communicator&, const Ctx&, const void*, void*) {};
  CollDesc shifted = kSendRecv;  // receives from the wrong neighbour
  shifted.run = [](Communicator& comm, const Ctx& c, const void* s, void* r) {
    comm.sendrecv(s, (c.rank + c.n - 1) % c.n, r, (c.rank + 1) % c.n, c.param, c.dtype);
  };
  for (const CollDesc* op : {&wrong_op, &skipped, &shifted}) {
    auto points = bench(3, *op, DType::f32, ReduceOp::sum, 0);
    EXPECT_GT(points.at(0).wrong, 0) << op->name;
    EXPECT_GT(points.back().wrong, 0) << op->name;
  }
}

TEST(Collectives, TableLineHasNcclTestsColumns) {
  BenchPoint a;
  a.bytes = 1024;
  a.count = 256;
  a.redop = "sum";
  a.time_us = 12.5;
  a.algbw_gbps = 0.08;
  a.busbw_gbps = 0.12;
  a.wrong = 0;
  BenchPoint b = a;
  b.wrong = -1;
  char buf[512] = {};
  std::FILE* f = fmemopen(buf, sizeof buf, "w");
  print_line(f, a, b);
  std::fclose(f);
  EXPECT_STREQ(buf, "        1024           256     float     sum      -1    12.50    0.08    0.12       0    12.50"
                    "    0.08    0.12     N/A\n");
}

}  // namespace
}  // namespace pb::coll
