// The one run spec -> planner input conversion: every mesh axis and option
// reaches the plan as the spec means it (zigzag and prefetch as given;
// overlap only where the run's DDP overlaps its buckets: shard=none, overlap
// on, no pipeline), and the sweep, plan and preflight share it.
#include "suites/planner/plan_input.h"

#include <gtest/gtest.h>

#include "harness/status.h"
#include "reference/model_config.h"

namespace pb::planner {
namespace {

RunSpec spec_of(const std::string& mesh, const std::string& strategy) {
  RunSpec s;
  s.mesh = parse_mesh(mesh, "mesh");
  apply_strategy_text(s, strategy, FaultCatalogue{}, "strategy");  // no faults in a plan
  return s;
}

TEST(PlanInputOf, EveryAxisAndOptionAsTheSpecSays) {
  RunSpec s = spec_of("dp4.tp2.cp2.pp2.rpn8", "shard=zero3,prefetch=2,cp_algo=ulysses,zigzag=off,sp=on,"
                                              "recompute=full,schedule=interleaved,virtual_stages=2");
  s.train.model = named_model("small");
  s.train.seq = 64;
  s.train.batch = 16;
  s.train.microbatches = 2;
  const PlanInput in = plan_input_of(s);
  EXPECT_EQ(in.dp, 4);
  EXPECT_EQ(in.tp, 2);
  EXPECT_EQ(in.cp, 2);
  EXPECT_EQ(in.pp, 2);
  EXPECT_EQ(in.ranks_per_node, 8);
  EXPECT_EQ(in.shard, dp::Shard::zero3);
  EXPECT_EQ(in.prefetch, 2);
  EXPECT_EQ(in.cp_algo, CpAlgo::ulysses);
  EXPECT_FALSE(in.zigzag);
  EXPECT_TRUE(in.sp);
  EXPECT_EQ(in.recompute, Recompute::full);
  EXPECT_EQ(in.schedule, pipeline::ScheduleKind::interleaved);
  EXPECT_EQ(in.virtual_stages, 2);
  EXPECT_FALSE(in.overlap);
  EXPECT_EQ(in.seq, 64);
  EXPECT_EQ(in.global_batch, 16);
  EXPECT_EQ(in.microbatch_size, 2);  // 16 sequences over dp 4 x 2 microbatches
  ASSERT_TRUE(in.shape.has_value());
  EXPECT_EQ(in.shape->name, "small");
}

// Overlap is DDP's bucket overlap with backward, as the ranks run it: on by
// default, off when the spec says so, never for a sharded data axis or inside
// a pipeline (the executor's stages sync after the flush).
TEST(PlanInputOf, OverlapIsWhereTheRunsDdpOverlaps) {
  auto overlap = [](const std::string& mesh, const std::string& strategy) {
    PlanInput in;
    set_parallelism(in, spec_of(mesh, strategy));
    return in.overlap;
  };
  EXPECT_TRUE(overlap("dp8", "shard=none"));
  EXPECT_TRUE(overlap("dp2.cp2", "shard=none"));
  EXPECT_FALSE(overlap("dp8", "shard=none,overlap=off"));
  EXPECT_FALSE(overlap("dp8", "shard=zero2"));
  EXPECT_FALSE(overlap("dp8", "shard=zero3"));
  EXPECT_FALSE(overlap("dp4.pp2", "shard=none"));
  EXPECT_FALSE(overlap("dp4", "shard=none,schedule=gpipe"));  // the pipeline executor at pp 1
  EXPECT_EQ(ddp_overlaps(spec_of("dp4.pp2", "shard=none")), false);
}

// Defaults: what a spec that names nothing plans (zigzag on, one unit
// prefetched, ring attention).
TEST(PlanInputOf, DefaultsAreTheSpecsDefaults) {
  PlanInput in;
  in.zigzag = false;
  in.prefetch = 0;
  set_parallelism(in, RunSpec{});
  EXPECT_TRUE(in.zigzag);
  EXPECT_EQ(in.prefetch, 1);
  EXPECT_EQ(in.cp_algo, CpAlgo::ring);
  EXPECT_EQ(in.shard, dp::Shard::none);
  EXPECT_TRUE(in.overlap);
}

}  // namespace
}  // namespace pb::planner
