// The data-parallel family under the conformance engine: every option at
// several world sizes and both precisions passes, with bitwise equality where
// declared; every injected fault is caught; chaos delays change nothing.
#include <gtest/gtest.h>

#include "harness/status.h"
#include "impl/data_parallel/options.h"
#include "suites/conformance/engine.h"

namespace pb {
namespace {

StrategyRun run_of(dp::Shard shard, int dp, Precision p, int micro = 1) {
  StrategyRun s;
  s.spec.train.model = named_model("tiny");
  s.spec.train.precision = p;
  s.spec.train.steps = 3;
  s.spec.train.batch = 2 * dp * micro;
  s.spec.train.seq = 16;
  s.spec.train.microbatches = micro;
  s.spec.train.optim.lr = 3e-3;
  s.spec.mesh.dp = dp;
  s.spec.data.shard = shard;
  s.spec.data.bucket_bytes = 4096;  // several buckets even for the tiny model
  s.world.timeout_s = 120;
  return s;
}

std::string explain(const ConformanceResult& r) {
  return r.strategy + " " + precision_name(r.precision) + ":" + describe_failures(r);
}

TEST(DpConformance, DdpAndZeroPassAtEveryWorldSizeBothPrecisions) {
  for (Precision p : {Precision::fp32, Precision::bf16_mixed})
    for (dp::Shard sh : {dp::Shard::none, dp::Shard::zero1, dp::Shard::zero2, dp::Shard::zero3})
      for (int dp : {1, 2, 3, 4, 8}) {
        auto r = run_conformance(run_of(sh, dp, p));
        EXPECT_TRUE(r.pass()) << explain(r);
        EXPECT_TRUE(r.bitwise_declared);
        EXPECT_FALSE(r.bits.empty());
      }
}

TEST(DpConformance, AccumulationOverlapAndOffloadPass) {
  for (Precision p : {Precision::fp32, Precision::bf16_mixed}) {
    for (dp::Shard sh : {dp::Shard::none, dp::Shard::zero1, dp::Shard::zero2, dp::Shard::zero3}) {
      auto s = run_of(sh, 2, p, /*micro=*/2);
      auto r = run_conformance(s);
      EXPECT_TRUE(r.pass()) << explain(r);
      EXPECT_EQ(r.bitwise_declared, sh == dp::Shard::none || sh == dp::Shard::zero1);
    }
    auto s = run_of(dp::Shard::none, 4, p);
    s.spec.data.overlap = false;
    EXPECT_TRUE(run_conformance(s).pass());
    for (dp::Shard sh : {dp::Shard::zero2, dp::Shard::zero3}) {
      auto o = run_of(sh, 4, p);
      o.spec.data.offload = dp::Offload::optimizer;
      auto r = run_conformance(o);
      EXPECT_TRUE(r.pass()) << explain(r);
      EXPECT_GT(r.exact[3].declared, 0);  // optimizer state on the host
      EXPECT_EQ(r.exact[2].declared, 0);  // none on the device
    }
  }
}

TEST(DpConformance, HsdpAndHierarchicalZeroPass) {
  for (Precision p : {Precision::fp32, Precision::bf16_mixed})
    for (int dp : {2, 3, 4, 8}) {
      auto h = run_of(dp::Shard::hsdp, dp, p);
      h.spec.data.shard_group = dp % 2 ? 1 : 2;
      auto r = run_conformance(h);
      EXPECT_TRUE(r.pass()) << explain(r);
      auto z = run_of(dp::Shard::hzero, dp, p);
      z.spec.mesh.ranks_per_node = dp % 2 ? 1 : dp / 2;
      auto q = run_conformance(z);
      EXPECT_TRUE(q.pass()) << explain(q);
    }
}

TEST(DpConformance, EveryInjectedFaultIsCaught) {
  struct Case { dp::Shard shard; int micro; };
  for (Case c : {Case{dp::Shard::none, 2}, Case{dp::Shard::zero1, 1}, Case{dp::Shard::zero2, 1},
                 Case{dp::Shard::zero3, 1}, Case{dp::Shard::hsdp, 1}, Case{dp::Shard::hzero, 1}}) {
    for (bool offload : {false, true}) {
      for (dp::Fault f : dp::faults_for(c.shard, offload ? dp::Offload::optimizer : dp::Offload::none)) {
        if (!offload && f == dp::Fault::no_copy_back) continue;
        if (offload && f != dp::Fault::no_copy_back) continue;
        // fp32: bf16's noise floor over three steps is as large as some faults'
        // effect (see the closing note); the teeth are tested where they bite.
        auto s = run_of(c.shard, 4, Precision::fp32, c.micro);
        s.spec.data.shard_group = 2;
        s.spec.mesh.ranks_per_node = c.shard == dp::Shard::hzero ? 2 : 0;
        if (offload) s.spec.data.offload = dp::Offload::optimizer;
        s.spec.faults = {dp::fault_name(f)};
        auto r = run_conformance(s);
        EXPECT_FALSE(r.pass()) << "fault not caught: " << r.strategy;
      }
    }
  }
}

const ExactCheck& exact_of(const ConformanceResult& r, const std::string& what) {
  for (const auto& e : r.exact)
    if (e.what == what) return e;
  throw std::out_of_range("no exact check " + what);
}

// tiny, six blocks deep: blocks outweigh the embeddings, so how many are
// gathered at once decides the comm-buffer peak.
StrategyRun deep_run_of(dp::Shard shard, int dp, Precision p, int micro = 1) {
  StrategyRun s = run_of(shard, dp, p, micro);
  s.spec.train.model.L = 6;
  s.spec.train.model.V = 32;
  return s;
}

// The comm buffers (gathered units, unit gradients, staging) peak exactly as
// dp::comm_buffer_peak_bytes replays the protocol, for every prefetch depth,
// with and without resharding, with accumulation and across nodes.
TEST(DpConformance, CommBufferPeakIsExact) {
  int64_t last = 0;
  for (int prefetch : {0, 1, 2, 3}) {
    auto s = deep_run_of(dp::Shard::zero3, 2, Precision::fp32);
    s.spec.data.prefetch = prefetch;
    auto r = run_conformance(s);
    EXPECT_TRUE(r.pass()) << explain(r);
    const auto& c = exact_of(r, "mem.comm");
    EXPECT_EQ(c.measured, c.declared);
    EXPECT_GT(c.measured, last) << "prefetch " << prefetch << " holds no more than " << prefetch - 1;
    last = c.measured;
  }
  struct Case { dp::Shard shard; int micro; bool reshard; int rpn; };
  for (Case c : {Case{dp::Shard::zero3, 2, false, 0}, Case{dp::Shard::zero1, 2, true, 0},
                 Case{dp::Shard::zero2, 2, true, 0}, Case{dp::Shard::hzero, 2, true, 2},
                 Case{dp::Shard::hsdp, 1, true, 0}})
    for (Precision p : {Precision::fp32, Precision::bf16_mixed}) {
      auto s = deep_run_of(c.shard, 4, p, c.micro);
      s.spec.data.reshard_after_forward = c.reshard;
      s.spec.mesh.ranks_per_node = c.rpn;
      s.spec.data.shard_group = 2;
      auto r = run_conformance(s);
      EXPECT_TRUE(r.pass()) << explain(r);
      EXPECT_GT(exact_of(r, "mem.comm").declared, 0) << r.strategy;
    }
  EXPECT_EQ(exact_of(run_conformance(run_of(dp::Shard::none, 2, Precision::fp32)), "mem.comm").declared, 0);
}

// A strategy that trains exactly like one device and moves exactly the
// declared bytes, but leaks each gathered block until the end of the
// microbatch, fails on the comm-memory check alone.
TEST(DpConformance, LeakingGatheredBlocksFailsOnMemoryAlone) {
  auto s = deep_run_of(dp::Shard::zero3, 4, Precision::fp32);
  s.spec.faults = {"keep_gathered"};
  auto r = run_conformance(s);
  EXPECT_FALSE(r.pass());
  for (const auto& c : r.rule) EXPECT_TRUE(c.pass) << c.quantity << " step " << c.step;
  for (const auto& c : r.bits) EXPECT_TRUE(c.pass) << c.quantity << " step " << c.step;
  for (const auto& e : r.exact) EXPECT_EQ(e.pass, e.what != "mem.comm") << e.what;
  const auto& c = exact_of(r, "mem.comm");
  EXPECT_GT(c.measured, c.declared);
  // Without resharding every block is held into backward anyway: the fault
  // could not raise the peak, so asking for it is bad input.
  s.spec.data.reshard_after_forward = false;
  EXPECT_THROW(run_conformance(s), InputError);
}

TEST(DpConformance, NoFalseAlarmsAcrossSeeds) {
  for (uint64_t seed = 1; seed <= 5; ++seed)
    for (dp::Shard sh : {dp::Shard::none, dp::Shard::zero2, dp::Shard::zero3, dp::Shard::hzero}) {
      auto s = run_of(sh, 4, Precision::fp32);
      s.spec.train.seed = seed;
      s.spec.train.data.seed = seed * 7;
      s.spec.mesh.ranks_per_node = sh == dp::Shard::hzero ? 2 : 0;
      auto r = run_conformance(s);
      EXPECT_TRUE(r.pass()) << "seed " << seed << " " << explain(r);
    }
}

TEST(DpConformance, ChaosDelaysChangeNoBits) {
  for (dp::Shard sh : {dp::Shard::none, dp::Shard::zero3}) {
    auto s = run_of(sh, 4, Precision::fp32);
    s.spec.data.prefetch = 2;
    auto calm = run_conformance(s);
    s.world.chaos.enabled = true;
    s.world.chaos.seed = 99;
    s.world.chaos.max_delay_us = 500;
    auto chaos = run_conformance(s);
    ASSERT_EQ(calm.steps.size(), chaos.steps.size());
    for (size_t i = 0; i < calm.steps.size(); ++i) EXPECT_EQ(calm.steps[i].loss, chaos.steps[i].loss);
    EXPECT_TRUE(chaos.pass()) << explain(chaos);
  }
}

}  // namespace
}  // namespace pb
