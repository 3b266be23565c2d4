// Pipeline conformance under mpirun (one process per rank, the mpi backend):
// 1F1B over all np ranks, and when np >= 4 pp 2 x ZeRO-1 dp np/2, pass the
// rule and the exact byte checks. Bit equality is not declared off the local
// backend (MPI picks its own reduction order). Its own main: MPI lives as long
// as the process.
#include <gtest/gtest.h>

#include "harness/comm/testing_world.h"
#include "suites/conformance/engine.h"

namespace pb {
namespace {

using MpiEnv = testing::WorldEnv;

StrategyRun run_of(int pp, int dp) {
  StrategyRun r;
  TrainConfig& c = r.spec.train;
  c.model = named_model("tiny");
  c.model.L = 4;
  c.steps = 2;
  c.microbatches = 2 * pp;
  c.batch = dp * c.microbatches;
  c.seq = 8;
  r.spec.pipe.schedule = pipeline::ScheduleKind::one_f_one_b;
  r.spec.mesh.pp = pp;
  r.spec.mesh.dp = dp;
  r.spec.data.shard = dp::Shard::zero1;
  r.world.backend = BackendKind::mpi;
  return r;
}

void expect_pass(const StrategyRun& run) {
  auto r = run_conformance(run, MpiEnv::world());
  if (!r.hosts_rank0) return;  // rank 0 holds the verdict
  EXPECT_TRUE(r.pass()) << r.strategy;
  EXPECT_FALSE(r.bitwise_declared);
  EXPECT_EQ(r.backend, "mpi");
  EXPECT_GE(r.exact.size(), 6u);  // model states, activations, p2p, tied, scalars
  EXPECT_FALSE(r.rule.empty());
}

TEST(PipelineConformanceMpi, OneFOneBOverEveryRank) {
  const int np = MpiEnv::world().size();
  expect_pass(run_of(np, 1));
  if (np >= 4 && np % 2 == 0) expect_pass(run_of(2, np / 2));
}

}  // namespace
}  // namespace pb

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  pb::WorldOptions o;
  o.backend = pb::BackendKind::mpi;
  o.size = 0;
  return pb::testing::run_all_tests_in_world(o);
}
