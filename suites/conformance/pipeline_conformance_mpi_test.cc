// Pipeline conformance under mpirun (one process per rank, the mpi backend):
// 1F1B over all np ranks, and when np >= 4 pp 2 x ZeRO-1 dp np/2, pass the
// rule and the exact byte checks. Bit equality is not declared off the local
// backend (MPI picks its own reduction order). Its own main: MPI lives as long
// as the process.
#include <gtest/gtest.h>

#include "harness/comm/testing_world.h"
#include "suites/conformance/pipeline_engine.h"

namespace pb {
namespace {

using MpiEnv = testing::WorldEnv;

PipelineRun run_of(int pp, int dp) {
  PipelineRun r;
  r.cfg.model = named_model("tiny");
  r.cfg.model.L = 4;
  r.cfg.steps = 2;
  r.cfg.microbatches = 2 * pp;
  r.cfg.batch = dp * r.cfg.microbatches;
  r.cfg.seq = 8;
  r.pipe.kind = pipeline::ScheduleKind::one_f_one_b;
  r.pipe.pp = pp;
  r.pipe.dp = dp;
  r.pipe.dp_mode = pipeline::DpMode::zero1;
  r.world.backend = BackendKind::mpi;
  return r;
}

void expect_pass(const PipelineRun& run) {
  auto r = run_pipeline_conformance(run, MpiEnv::world());
  if (!r.hosts_rank0) return;  // rank 0 holds the verdict
  EXPECT_TRUE(r.pass()) << r.strategy;
  EXPECT_FALSE(r.bitwise_declared);
  EXPECT_EQ(r.backend, "mpi");
  EXPECT_EQ(r.exact.size(), 3u);
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
