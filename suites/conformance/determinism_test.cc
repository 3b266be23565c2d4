// The determinism matrix's claims follow the strategies' declarations, and a
// pair claimed bit-identical fails when one bit differs
// (docs/numerics.md#determinism).
#include "suites/conformance/determinism.h"

#include <gtest/gtest.h>

#include <bit>
#include <cstdint>

#include "harness/mesh.h"
#include "impl/registry.h"

namespace pb {
namespace {

StrategyRun run(const char* mesh, const char* strategy, const char* model = "tiny") {
  StrategyRun s;
  s.spec.mesh = parse_mesh(mesh, "test");
  apply_strategy_text(s.spec, strategy, fault_catalogue(), "test");
  s.spec.train.model = named_model(model);
  s.spec.train.steps = 2;
  s.spec.train.batch = 8;
  s.spec.train.seq = 12;
  s.spec.train.microbatches = s.spec.mesh.pp > 1 ? 4 : 1;
  return s;
}

TEST(Determinism, ClaimsFollowTheDeclarations) {
  EXPECT_EQ(claim_for(run("dp2", ""), run("dp2", "")).claim, Claim::identical);
  StrategyRun chaos = run("tp2", "", "tiny-tp");
  chaos.world.chaos.enabled = true;
  EXPECT_EQ(claim_for(run("tp2", "", "tiny-tp"), chaos).claim, Claim::identical);  // timing does not enter
  EXPECT_EQ(claim_for(run("dp2", "shard=zero2"), run("dp2", "shard=zero3")).claim, Claim::identical);
  EXPECT_EQ(claim_for(run("pp2", "schedule=gpipe"), run("pp2", "schedule=1f1b")).claim, Claim::identical);
  EXPECT_EQ(claim_for(run("tp2", "", "tiny-tp"), run("tp2", "recompute=full", "tiny-tp")).claim, Claim::identical);
  EXPECT_EQ(claim_for(run("dp2", "", "tiny-tp"), run("tp2", "", "tiny-tp")).claim, Claim::bounded);
  EXPECT_EQ(claim_for(run("dp2", ""), run("dp4", "")).claim, Claim::bounded);  // another split of the batch
  EXPECT_EQ(claim_for(run("pp2", "schedule=1f1b"), run("pp2", "schedule=2bw")).claim, Claim::different);
  EXPECT_EQ(claim_for(run("dp2", ""), run("dp2", "", "tiny-tp")).claim, Claim::different);  // another model
  StrategyRun mpi = run("dp2", "");
  mpi.world.backend = BackendKind::mpi;
  const ClaimWhy on_mpi = claim_for(run("dp2", ""), mpi);
  EXPECT_EQ(on_mpi.claim, Claim::bounded);
  EXPECT_NE(on_mpi.why.find("local backend only"), std::string::npos) << on_mpi.why;
  StrategyRun gpu = run("dp2", "");
  gpu.spec.train.device = Device::cuda;
  EXPECT_EQ(claim_for(run("dp2", ""), gpu).claim, Claim::unvouched);
}

TEST(Determinism, OneFlippedBitFailsAnIdenticalClaim) {
  const StrategyRun s = run("dp2", "shard=zero3");
  const ConformanceResult a = run_conformance(s), b = run_conformance(s);
  PairOutcome same = judge_pair(Claim::identical, a, b);
  EXPECT_TRUE(same.identical);
  EXPECT_TRUE(same.pass) << same.note;
  ConformanceResult flipped = b;
  ASSERT_FALSE(flipped.trace.params.empty());
  double& p = flipped.trace.params.back();
  p = std::bit_cast<double>(std::bit_cast<uint64_t>(p) ^ 1u);  // one ulp
  const PairOutcome o = judge_pair(Claim::identical, a, flipped);
  EXPECT_FALSE(o.identical);
  EXPECT_FALSE(o.pass);
  EXPECT_NE(o.note.find("differs first in params"), std::string::npos) << o.note;
  EXPECT_GT(o.param_difference, 0);
  // Bounded by the rule: the same bit is within it, and both runs pass.
  EXPECT_TRUE(judge_pair(Claim::bounded, a, flipped).pass);
  // A run that compared nothing proves nothing.
  ConformanceResult empty = b;
  empty.rule.clear();
  EXPECT_FALSE(judge_pair(Claim::bounded, a, empty).pass);
  EXPECT_THROW(judge_pair(Claim::unvouched, a, b), InputError);
}

}  // namespace
}  // namespace pb
