// Mixture of experts on a device: train.device = cuda on stand-in devices
// (reference/device_testing.h: host memory handed out as a device's, the
// CPU's kernels behind the seam), so the MoE MLP's device path runs on every
// rank kind that holds one: the router GEMM, the rows scattered to the
// experts and combined back, the experts' FFNs, the expert-parallel
// all-to-alls and the tensor-parallel partial sums on device buffers; the
// routing on the host between them (reference/moe.h). Its arithmetic is the
// CPU's, so it must train bit for bit as the CPU run; a guarded single rank
// proves the routing reads and writes device memory only through the seam,
// and an injected expert-parallel fault is still caught on a device.
// And on the CPU, the fp64 floor of a run whose experts see few tokens.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "impl/registry.h"
#include "harness/status.h"
#include "kernels/common/device_ops.h"
#include "reference/device_testing.h"
#include "suites/conformance/engine.h"
#include "suites/conformance/stand_in_runs.h"

namespace pb {
namespace {

StrategyRun run_of(MeshShape mesh, dp::Shard shard, Precision p, const std::string& model = "tiny-moe") {
  return testing::small_run(mesh, model, p, shard);
}

MeshShape mesh(int dp, int tp, int pp, int ep) {
  MeshShape m;
  m.dp = dp;
  m.tp = tp;
  m.pp = pp;
  m.ep = ep;
  return m;
}

TEST(MoeConformance, OnADeviceEachRankKindTrainsAsOnTheCpu) {
  struct Case {
    MeshShape mesh;
    dp::Shard shard;
    Precision p;
    const char* model;
  };
  const Case cases[] = {
      {mesh(2, 1, 1, 1), dp::Shard::none, Precision::fp32, "tiny-moe"},               // global capacity
      {mesh(2, 1, 1, 1), dp::Shard::zero3, Precision::bf16_mixed, "tiny-moe-local"},  // local capacity
      {mesh(2, 1, 1, 2), dp::Shard::none, Precision::fp32, "tiny-moe"},               // expert parallel
      {mesh(2, 1, 1, 2), dp::Shard::zero1, Precision::bf16_mixed, "tiny-moe-top1"},   // expert parallel, ZeRO-1
      {mesh(1, 2, 1, 1), dp::Shard::none, Precision::fp32, "tiny-moe"},               // experts split over tp
      {mesh(2, 2, 1, 2), dp::Shard::zero3, Precision::fp32, "tiny-moe"},              // ep on the tp shard
  };
  for (const Case& c : cases) {
    const StrategyRun s = run_of(c.mesh, c.shard, c.p, c.model);
    testing::expect_stand_ins_train_as_the_cpu(s, mesh_text(c.mesh) + " " + std::string(dp::shard_name(c.shard)) + " " +
                                                      precision_name(c.p) + " " + c.model);
  }
  // ZeRO-Offload of both components (dense over dp, experts over edp): the host steps them.
  StrategyRun s = run_of(mesh(2, 1, 1, 2), dp::Shard::zero2, Precision::bf16_mixed, "tiny-moe");
  s.spec.data.offload = dp::Offload::optimizer;
  const testing::StandInRuns runs = testing::expect_stand_ins_train_as_the_cpu(s, "dp2.ep2 zero2 + offload bf16");
  EXPECT_EQ(runs.device.exact_of("mem.optimizer").measured, 0);
  EXPECT_GT(runs.device.exact_of("mem.optimizer.host").measured, runs.cpu.exact_of("mem.optimizer.host").measured);
}

// MoE blocks inside pipeline stages (the stage's Gpt on the device's ops),
// with and without expert parallel.
TEST(MoeConformance, OnADevicePipelineStagesWithExpertsTrainAsOnTheCpu) {
  for (const MeshShape& m : {mesh(1, 1, 2, 1), mesh(2, 1, 2, 2)}) {
    StrategyRun s = run_of(m, dp::Shard::none, Precision::fp32);
    s.spec.train.model.L = 4;
    s.spec.train.batch = 2 * m.dp;
    s.spec.train.microbatches = 2;
    s.spec.pipe.schedule = pipeline::ScheduleKind::one_f_one_b;
    testing::expect_stand_ins_train_as_the_cpu(s, mesh_text(m) + " 1f1b tiny-moe");
  }
}

// One rank on a guarded stand-in (its memory opens only inside the device's
// ops; the guard is process-wide, so one rank): the routing on the host reads
// the logits and dw it read back and writes only host buffers.
TEST(MoeConformance, OnADeviceTheRoutingTouchesDeviceMemoryOnlyThroughTheOps) {
  for (const char* model : {"tiny-moe", "tiny-moe-e8-top1-cf2"}) {
    StrategyRun s = run_of(mesh(1, 1, 1, 1), dp::Shard::none, Precision::fp32, model);
    s.spec.train.microbatches = 2;
    s.spec.train.device = Device::cuda;
    testing::StandInDevices devices(/*guarded=*/true);
    s.open_device = [&] { return devices.open(); };
    const ConformanceResult res = run_conformance(s);
    EXPECT_TRUE(res.pass()) << model << " " << res.strategy << ":" << describe_failures(res);
    EXPECT_EQ(res.device, "stand-in device");
  }
}

// A device run keeps its teeth: expert rows combined onto the wrong tokens
// fail the check on stand-ins as on the CPU.
TEST(MoeConformance, OnADeviceAnExpertParallelFaultIsCaught) {
  StrategyRun s = run_of(mesh(2, 1, 1, 2), dp::Shard::none, Precision::fp32);
  s.spec.faults = parse_faults(fault_catalogue(), "ep_combine_permuted", "strategy.faults");
  s.spec.train.device = Device::cuda;
  testing::StandInDevices devices;
  s.open_device = [&] { return devices.open(); };
  const ConformanceResult r = run_conformance(s);
  EXPECT_FALSE(r.pass()) << "ep_combine_permuted passed on a device";
}

// At fp64 the truth is the reference, so the fp64 rerun's floor needs correct
// references that round differently. With local capacity some experts see few
// tokens, and the gradients of their weights sit near Adam's epsilon, where
// the update turns a gradient's rounding noise into a parameter change far
// above an fp64 ulp: the same network with its inner sums in other orders
// (what tensor parallel's split GEMMs do) lands that far from the truth. The
// floor holds those references, so the tp2 x ZeRO-1 x ep2 run of `parabench
// run` (whose error is of that size on some BLAS kernels) passes on its
// merits, and a fault still stands out at fp64 by orders of magnitude.
TEST(MoeConformance, TheFp64FloorHoldsTheNetworkInOtherOrdersOfItsInnerSums) {
  StrategyRun s = run_of(mesh(4, 2, 1, 2), dp::Shard::zero1, Precision::fp32, "tiny-moe-local");
  s.spec.train.steps = 3;  // parabench check's shapes
  s.spec.train.seq = 12;
  s.spec.train.batch = 16;
  s.spec.train.optim = OptimConfig{};
  const ConformanceResult r = run_conformance(s);
  EXPECT_TRUE(r.pass()) << describe_failures(r);
  const QuantityCheck& params = r.fp64.back();
  ASSERT_EQ(params.quantity, "params");

  const Replay replay = replay_of(s);
  Replay plain;
  plain.plan.groups = replay.plan.groups;
  plain.plan.micro = replay.plan.micro;
  TrainConfig f64 = s.spec.train;
  f64.precision = Precision::fp64;
  const Trace truth = reference_trace(f64, plain);
  double widest = 0;
  for (int parts : kFp64FloorSlices) {
    const Trace other = reference_trace(f64, plain, nullptr, kernels::cpu_ops_sliced<double>(parts));
    const double d = rel_l2(other.params, truth.params);
    EXPECT_GT(d, 0) << parts << " slices: another order rounds differently";
    EXPECT_LT(d, 1e-12) << parts << " slices: and is the same network";
    EXPECT_LT(rel_l2(other.grads1, truth.grads1), 1e-14) << parts << " slices: the gradients a few ulps apart";
    widest = std::max(widest, d);
  }
  EXPECT_GT(widest, 4 * dtype_eps(DType::f64)) << "the order's noise is above the four-ulp minimum here";
  EXPECT_GE(params.floor, widest);

  s.spec.faults = parse_faults(fault_catalogue(), "ep_combine_permuted", "strategy.faults");
  const ConformanceResult bad = run_conformance(s);
  ASSERT_FALSE(bad.fp64.empty());
  EXPECT_GT(bad.fp64.back().ratio, 1e6) << describe_failures(bad);
}

}  // namespace
}  // namespace pb
