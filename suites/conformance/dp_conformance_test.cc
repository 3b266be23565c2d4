// The data-parallel family under the conformance engine: every option at
// several world sizes and both precisions passes, with bitwise equality where
// declared; faults a strategy does not have are refused; chaos delays change
// nothing. The teeth (every fault caught at every precision) and the seed
// sweep (no false alarm) are in teeth_test.cc.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "impl/registry.h"
#include "harness/status.h"
#include "impl/data_parallel/options.h"
#include "impl/data_parallel/strategy.h"
#include "reference/trainer.h"
#include "suites/conformance/engine.h"
#include "suites/conformance/stand_in_runs.h"

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

// The global gradient norm is a judged quantity of its own: one rule row
// per step; a sharded norm never all-reduced (torchtitan #766) fails there at
// every step, and the HSDP norm counted over replicas (VeOmni #184) too.
TEST(DpConformance, GradNormJudgedEveryStep) {
  auto norm_rows = [](const ConformanceResult& r, bool pass) {
    int n = 0;
    for (const auto& c : r.rule) n += c.quantity == "grad_norm" && c.pass == pass;
    return n;
  };
  for (Precision p : {Precision::fp32, Precision::bf16_mixed}) {
    auto s = run_of(dp::Shard::hsdp, 4, p);
    s.spec.data.shard_group = 2;
    const ConformanceResult ok = run_conformance(s);
    EXPECT_TRUE(ok.pass()) << explain(ok);
    EXPECT_EQ(norm_rows(ok, true), s.spec.train.steps);
    for (dp::Fault f : {dp::Fault::norm_not_all_reduced, dp::Fault::norm_over_replicas}) {
      auto bad = s;
      for (const FaultDecl& d : dp::fault_decls())
        if (d.axis == FaultAxis::data && dp::Fault(d.value) == f) bad.spec.faults = {&d};
      ASSERT_EQ(bad.spec.faults.size(), 1u);
      const ConformanceResult r = run_conformance(bad);
      EXPECT_EQ(norm_rows(r, false), s.spec.train.steps) << dp::fault_name(f) << " " << explain(r);
    }
  }
}

TEST(DpConformance, AccumulationOverlapAndOffloadPass) {
  for (Precision p : {Precision::fp32, Precision::bf16_mixed}) {
    for (dp::Shard sh : {dp::Shard::none, dp::Shard::zero1, dp::Shard::zero2, dp::Shard::zero3}) {
      auto s = run_of(sh, 2, p, /*micro=*/2);
      auto r = run_conformance(s);
      EXPECT_TRUE(r.pass()) << explain(r);
      // Reduced per microbatch or once per step, the replay does the same sums.
      EXPECT_TRUE(r.bitwise_declared) << r.strategy;
      EXPECT_FALSE(r.bits.empty()) << r.strategy;
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

// Two-level reductions replay exactly (impl/data_parallel/replay.h): bit-equal
// at one microbatch for every shard-group / node size, including the
// degenerate ones (F = 1: flat over replicas; one rank per node); with
// accumulation they reduce every microbatch and are held to the rule.
TEST(DpConformance, HsdpAndHierarchicalZeroPass) {
  for (Precision p : {Precision::fp32, Precision::bf16_mixed})
    for (int dp : {2, 3, 4, 8}) {
      auto h = run_of(dp::Shard::hsdp, dp, p);
      h.spec.data.shard_group = dp % 2 ? 1 : 2;
      auto r = run_conformance(h);
      EXPECT_TRUE(r.pass()) << explain(r);
      EXPECT_TRUE(r.bitwise_declared && !r.bits.empty()) << r.strategy;
      auto z = run_of(dp::Shard::hzero, dp, p);
      z.spec.mesh.ranks_per_node = dp % 2 ? 1 : dp / 2;
      auto q = run_conformance(z);
      EXPECT_TRUE(q.pass()) << explain(q);
      EXPECT_TRUE(q.bitwise_declared && !q.bits.empty()) << q.strategy;
    }
  for (dp::Shard sh : {dp::Shard::hsdp, dp::Shard::hzero}) {
    auto s = run_of(sh, 4, Precision::bf16_mixed, /*micro=*/2);
    s.spec.data.shard_group = 2;
    s.spec.mesh.ranks_per_node = sh == dp::Shard::hzero ? 2 : 0;
    auto r = run_conformance(s);
    EXPECT_TRUE(r.pass()) << explain(r);  // with accumulation: per-microbatch two-level sums, replayed
    EXPECT_TRUE(r.bitwise_declared && !r.bits.empty()) << r.strategy;
  }
}

// The two-level replay is not the flat one: at bf16 the inner rounding
// changes bits, so a flat replay (the old plan) could not match HSDP.
TEST(DpConformance, TwoLevelReplayDiffersFromTheFlatOne) {
  auto s = run_of(dp::Shard::hsdp, 4, Precision::bf16_mixed);
  s.spec.data.shard_group = 2;
  SplitPlan two = replay_of(s).plan, flat = two;
  ASSERT_EQ(two.block, 2);
  flat.block = 0;
  auto a = make_reference_trainer(s.spec.train, two), b = make_reference_trainer(s.spec.train, flat);
  a->step();
  b->step();
  EXPECT_NE(a->grads_f64(), b->grads_f64());
}

// A fault the strategy does not have is bad input naming where it applies,
// not a PASS row under the fault's name (the teeth are in teeth_test.cc).
TEST(DpConformance, FaultsThatDoNotApplyAreRefused) {
  auto refused = [](StrategyRun s, dp::Fault f, const std::string& says) {
    s.spec.faults = parse_faults(fault_catalogue(), dp::fault_name(f), "strategy.faults");
    try {
      run_conformance(s);
      ADD_FAILURE() << "accepted: " << spec_label(s.spec);
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  refused(run_of(dp::Shard::zero3, 4, Precision::fp32), dp::Fault::skip_bucket,
          "strategy.faults: skip_bucket does not apply to zero3 (applies to: none)");
  refused(run_of(dp::Shard::zero2, 4, Precision::fp32), dp::Fault::skip_replica_reduce,
          "skip_replica_reduce does not apply to zero2 (applies to: hsdp, hzero)");
  refused(run_of(dp::Shard::hsdp, 4, Precision::fp32), dp::Fault::stale_params,
          "stale_params does not apply to hsdp (applies to: zero1, zero2, zero3)");
  refused(run_of(dp::Shard::zero2, 4, Precision::fp32), dp::Fault::no_copy_back,
          "no_copy_back does not apply to zero2 (applies to: offload = optimizer)");
  refused(run_of(dp::Shard::none, 4, Precision::fp32), dp::Fault::sync_wrong_microbatch,
          "sync_wrong_microbatch needs train.microbatches >= 2");
  refused(run_of(dp::Shard::none, 1, Precision::fp32), dp::Fault::skip_bucket, "needs strategy.dp >= 2");
  auto one_replica = run_of(dp::Shard::hsdp, 4, Precision::fp32);
  one_replica.spec.data.shard_group = 4;
  refused(one_replica, dp::Fault::skip_replica_reduce, "more than one hsdp replica");
  for (dp::Shard sh : {dp::Shard::none, dp::Shard::zero1, dp::Shard::zero2, dp::Shard::zero3,
                       dp::Shard::hsdp, dp::Shard::hzero}) {  // every listed fault is accepted
    auto s = run_of(sh, 4, Precision::fp32, /*micro=*/2);
    s.spec.data.shard_group = 2;
    s.spec.mesh.ranks_per_node = 2;
    s.spec.data.offload = dp::Offload::optimizer;
    for (const FaultDecl& f : dp::fault_decls()) {
      if (!f.applies(s.spec)) continue;
      s.spec.faults = {&f};
      EXPECT_NO_THROW(dp::validate(dp::options_of(s.spec), s.spec.train)) << spec_label(s.spec);
    }
  }
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
    const auto& c = r.exact_of("mem.comm");
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
      EXPECT_GT(r.exact_of("mem.comm").declared, 0) << r.strategy;
    }
  EXPECT_EQ(run_conformance(run_of(dp::Shard::none, 2, Precision::fp32)).exact_of("mem.comm").declared, 0);
}

// A strategy that trains exactly like one device and moves exactly the
// declared bytes, but leaks each gathered block until the end of the
// microbatch, fails on the comm-memory check alone.
TEST(DpConformance, LeakingGatheredBlocksFailsOnMemoryAlone) {
  auto s = deep_run_of(dp::Shard::zero3, 4, Precision::fp32);
  s.spec.faults = parse_faults(fault_catalogue(), "keep_gathered", "strategy.faults");
  auto r = run_conformance(s);
  EXPECT_FALSE(r.pass());
  for (const auto& c : r.rule) EXPECT_TRUE(c.pass) << c.quantity << " step " << c.step;
  for (const auto& c : r.bits) EXPECT_TRUE(c.pass) << c.quantity << " step " << c.step;
  for (const auto& e : r.exact) EXPECT_EQ(e.pass, e.what != "mem.comm") << e.what;
  const auto& c = r.exact_of("mem.comm");
  EXPECT_GT(c.measured, c.declared);
  // Without resharding every block is held into backward anyway: the fault
  // could not raise the peak, so asking for it is bad input.
  s.spec.data.reshard_after_forward = false;
  EXPECT_THROW(run_conformance(s), InputError);
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
    // A step's time is its slowest rank's (a data-parallel rank's wall is its last step).
    ASSERT_EQ(chaos.times.size(), 4u);
    double slowest = 0;
    for (const RankTimes& t : chaos.times) slowest = std::max(slowest, t.wall_s);
    EXPECT_EQ(chaos.steps.back().seconds, slowest);
  }
}

// train.device = cuda on a stand-in device per rank (reference/device_testing.h:
// host memory handed out as the device's, the CPU's kernels behind the seam):
// every rank's states, buffers and optimizer go through the device path
// (opened per rank by the engine, passed to make_rank), and the run is judged
// as on a GPU: no bitwise claim against the host replay, the fp64 rerun on
// the CPU, the device's own reference as a floor. Its arithmetic is the
// CPU's, so it must train bit for bit as the CPU run of the same spec.
TEST(DpConformance, OnADeviceEachRankTrainsAsOnTheCpu) {
  struct Case {
    dp::Shard shard;
    int dp, ranks_per_node;
  };
  for (Precision p : {Precision::fp32, Precision::bf16_mixed})
    for (Case c : {Case{dp::Shard::none, 2, 0}, Case{dp::Shard::zero1, 2, 0}, Case{dp::Shard::zero2, 2, 0},
                   Case{dp::Shard::zero3, 2, 0}, Case{dp::Shard::hsdp, 4, 2}, Case{dp::Shard::hzero, 4, 2}}) {
      StrategyRun s = run_of(c.shard, c.dp, p);
      s.spec.mesh.ranks_per_node = c.ranks_per_node;
      testing::expect_stand_ins_train_as_the_cpu(s, mesh_text(s.spec.mesh) + " " + std::string(shard_name(c.shard)) + " " + precision_name(p));
    }
}

// ZeRO-Offload on a device: the optimizer's state and its copies of the owned
// gradients and parameters on the host, the CPU stepping them, the
// gradients moved down and the parameters up each step. Trains bit for bit
// as the CPU run (which steps the same state in place); the host memory is
// the state plus the two copies, exactly as declared; the parameters not
// moved back (no_copy_back) are caught.
TEST(DpConformance, OnADeviceTheOffloadedOptimizerStepsOnTheHost) {
  struct Case {
    dp::Shard shard;
    Precision p;
  };
  for (const Case c : {Case{dp::Shard::none, Precision::fp32}, Case{dp::Shard::zero1, Precision::bf16_mixed},
                       Case{dp::Shard::zero2, Precision::fp32}, Case{dp::Shard::zero3, Precision::bf16_mixed}}) {
    StrategyRun s = run_of(c.shard, 2, c.p);
    s.spec.data.offload = dp::Offload::optimizer;
    const std::string what = std::string(shard_name(c.shard)) + " + offload " + precision_name(c.p);
    const testing::StandInRuns runs = testing::expect_stand_ins_train_as_the_cpu(s, what);
    const ConformanceResult &cpu = runs.cpu, &dev = runs.device;
    EXPECT_EQ(dev.exact_of("mem.optimizer").measured, 0) << what;
    // The host copies: a gradient and a parameter per owned element, in the storage type.
    const dp::BytesPerParam b = dp::bytes_per_param(c.p);
    const int64_t owned = cpu.exact_of("mem.optimizer.host").measured / b.optimizer;
    EXPECT_EQ(dev.exact_of("mem.optimizer.host").measured,
              cpu.exact_of("mem.optimizer.host").measured + owned * (b.param + b.grad))
        << what;
  }
  StrategyRun s = run_of(dp::Shard::zero2, 2, Precision::fp32);
  s.spec.data.offload = dp::Offload::optimizer;
  s.spec.faults = parse_faults(fault_catalogue(), "no_copy_back", "strategy.faults");
  s.spec.train.device = Device::cuda;
  testing::StandInDevices devices;
  s.open_device = [&] { return devices.open(); };
  const ConformanceResult r = run_conformance(s);
  EXPECT_FALSE(r.pass()) << "no_copy_back on a device went unnoticed";
  // One rank on a guarded stand-in: the host step reaches device memory only through the copies.
  StrategyRun one = run_of(dp::Shard::zero2, 1, Precision::bf16_mixed);
  one.spec.data.offload = dp::Offload::optimizer;
  one.spec.train.device = Device::cuda;
  testing::StandInDevices guarded(/*guarded=*/true);
  one.open_device = [&] { return guarded.open(); };
  const ConformanceResult g = run_conformance(one);
  EXPECT_TRUE(g.pass()) << explain(g);
}

TEST(DpConformance, OnADeviceTheRunSaysWhatItCannotDo) {
  StrategyRun s = run_of(dp::Shard::zero2, 2, Precision::fp32);
  s.spec.train.device = Device::cuda;
  try {
    run_conformance(s);
    ADD_FAILURE() << "ran on a device without opening one";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("no way to open a device"), std::string::npos) << e.what();
  }
  s.spec.data.offload = dp::Offload::optimizer;
  EXPECT_NO_THROW(validate(s.spec)) << "offload runs on a device";
  s.spec.data.offload = dp::Offload::none;
  s.spec.train.precision = Precision::fp64;
  EXPECT_THROW(validate(s.spec), InputError);
}

}  // namespace
}  // namespace pb
