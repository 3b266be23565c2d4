// The stage hooks a pipeline stage meets its data-parallel components through
// (data_parallel/hooks.h StageHooks): where each family sums the tied rows
// (before its reduction with full gradients, on the reduced shard after it
// otherwise), PipeDream-2BW's two weight and gradient versions, and a
// sharded stage's per-(microbatch, unit) gradients.
#include <gtest/gtest.h>

#include <mutex>
#include <stdexcept>
#include <vector>

#include "harness/comm/runner.h"
#include "impl/data_parallel/hooks.h"

namespace pb::dp {
namespace {

struct Stage {
  Stage(Shard shard, Communicator& world, const StagePlan& plan = {})
      : layout(named_model("tiny")), o(options(shard, world.size())),
        comms(make_dp_comms(world, MeshShape{world.size(), 1, 1, 1, 0, 1}, o)),
        dp(o, model_units(layout), layout, /*seed=*/7, comms, mem), hooks(make_stage_hooks(dp, plan, mem)) {}
  static DpOptions options(Shard shard, int n) {
    DpOptions o;
    o.dp = n;
    o.shard = shard;
    return o;
  }
  ParamLayout layout;
  DpOptions o;
  MemoryTracker mem;
  DpComms comms;
  Component<double> dp;
  std::unique_ptr<StageHooks<double>> hooks;
};

// Full gradients: the tied rows are summed while they are still this rank's
// own (E + H before the reduction); sharded: on the reduced shard after it.
TEST(StageHooks, TiedRowsSummedWhereTheFamilyReduces) {
  for (Shard shard : {Shard::none, Shard::zero1, Shard::zero2}) {
    SCOPED_TRACE(shard_name(shard));
    std::mutex mu;
    std::vector<double> seen;  // the first tied element when the sum ran, per rank
    run_local(2, [&](Communicator& c) {
      Stage s(shard, c);
      s.hooks->start_step();
      double* g = s.hooks->grads(/*mb=*/0, /*u=*/0, /*version=*/0);
      g[0] = c.rank() + 1.0;  // rank 0: 1, rank 1: 2
      s.hooks->grads_ready(0, 0);
      EXPECT_TRUE(s.hooks->idle());
      TiedGrad<double> tied;
      tied.unit = 0;
      tied.rows = s.layout.wpe_offset();
      size_t n_seen = 0;
      tied.sum = [&](double* data, size_t n) {
        std::lock_guard lk(mu);
        seen.push_back(data[0]);
        n_seen = n;
      };
      s.hooks->finish(tied);
      const UnitShard& u = s.dp.shards().unit(0);
      EXPECT_EQ(n_seen, s.dp.grads_full() ? size_t(tied.rows) : size_t(u.slice));
    });
    ASSERT_EQ(seen.size(), 2u);
    if (shard == Shard::zero2) {  // rank 0's shard starts at element 0: reduced, 1 + 2
      EXPECT_TRUE(seen[0] == 3.0 || seen[1] == 3.0);
    } else {  // each rank's own, before the reduction
      EXPECT_EQ(seen[0] + seen[1], 3.0);
      EXPECT_NE(seen[0], seen[1]);
    }
  }
}

// 2BW: W(k-1) stays readable beside W(k); a gradient of the other parity
// lives apart until bring_grads puts it in the component; at pp = 1 the
// head's rows are added to the embedding's before the reduction.
TEST(StageHooks, TwoWeightAndGradientVersions) {
  run_local(1, [&](Communicator& c) {
    StagePlan plan;
    plan.two_versions = true;
    plan.head_rows = ParamLayout(named_model("tiny")).wpe_offset();
    Stage s(Shard::none, c, plan);
    StageHooks<double>& h = *s.hooks;
    EXPECT_EQ(h.params(1, 0, false), s.dp.unit_params(1));
    const double w0 = s.dp.unit_params(1)[0];
    h.keep_version(1);
    EXPECT_EQ(h.version(), 1);
    s.dp.unit_params(1)[0] = w0 + 1;  // the optimizer forms W(1)
    EXPECT_EQ(h.params(1, 1, false)[0], w0 + 1);
    EXPECT_EQ(h.params(1, 0, false)[0], w0);
    EXPECT_THROW(h.params(1, 3, false), std::logic_error);

    EXPECT_EQ(h.grads(0, 1, 0), s.dp.unit_grads(1));
    double* g1 = h.grads(0, 1, 1);  // g of version 1: apart
    EXPECT_NE(g1, s.dp.unit_grads(1));
    g1[0] = 5;
    h.head_grads(0, 0, 1)[0] = 2;
    h.grads(0, 0, 1)[0] = 1;
    h.bring_grads(3);  // g(1) into the component
    EXPECT_EQ(s.dp.unit_grads(1)[0], 5);
    TiedGrad<double> tied;
    tied.unit = 0;
    tied.rows = plan.head_rows;
    h.finish(tied);
    EXPECT_EQ(s.dp.unit_grads(0)[0], 3);  // the embedding's 1 + the head's 2
    h.start_step();                        // g(1)'s buffers zeroed
    EXPECT_EQ(s.dp.unit_grads(1)[0], 0);
    EXPECT_EQ(h.head_grads(0, 0, 1)[0], 0);
  });
}

// A sharded stage keeps each (microbatch, unit)'s gradient apart until it is
// reduced: the step's first reduction of a unit overwrites its shard, later
// ones (any microbatch order) add.
TEST(StageHooks, ShardedGradientsPerMicrobatch) {
  run_local(2, [&](Communicator& c) {
    Stage s(Shard::zero2, c);
    StageHooks<double>& h = *s.hooks;
    h.start_step();
    double* a = h.grads(/*mb=*/1, /*u=*/1, 0);
    double* b = h.grads(/*mb=*/0, /*u=*/1, 0);
    EXPECT_NE(a, b);
    const UnitShard& u = s.dp.shards().unit(1);
    for (int j = 0; j < 2; ++j) a[u.slice * j] = 1, b[u.slice * j] = 10;  // every shard's first element
    h.grads_ready(1, 1);
    EXPECT_FALSE(h.idle());
    h.grads_ready(0, 1);
    EXPECT_TRUE(h.idle());
    EXPECT_EQ(s.dp.grads_data()[u.shard_off], 2 * 11.0);  // both ranks' 1 + 10
  });
}

}  // namespace
}  // namespace pb::dp
