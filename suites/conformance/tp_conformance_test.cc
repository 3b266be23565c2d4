// Tensor parallel on a device: train.device = cuda on stand-in devices
// (reference/device_testing.h: host memory handed out as a device's, the CPU's
// kernels behind the seam), so every op of the tensor-parallel rank (the
// vocabulary shard's lookup and cross-entropy, the biases, the position rows)
// and every collective on its buffers takes the device path, composed with the
// data-parallel family, sequence parallel, recompute and pipeline stages. Its
// arithmetic is the CPU's, so it must train bit for bit as the CPU run; a
// guarded single rank proves nothing on the host reads or writes device
// memory outside the seam; a device holds none of the CPU kernels' workspace.
#include <gtest/gtest.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "harness/comm/runner.h"
#include "harness/status.h"
#include "impl/tensor_parallel/runner.h"
#include "impl/tensor_parallel/strategy.h"
#include "impl/tensor_parallel/tp_rank.h"
#include "reference/device_testing.h"
#include "suites/conformance/engine.h"
#include "suites/conformance/stand_in_runs.h"

namespace pb {
namespace {

StrategyRun run_of(MeshShape mesh, bool sp, Recompute r, dp::Shard shard, Precision p) {
  StrategyRun s = testing::small_run(mesh, "tiny-tp", p, shard);  // V = 67: tp2 and tp3 pad the vocabulary
  s.spec.tensor.sp = sp;
  s.spec.tensor.recompute = r;
  return s;
}

TEST(TpConformance, OnADeviceEachRankTrainsAsOnTheCpu) {
  struct Case {
    MeshShape mesh;
    bool sp;
    Recompute r;
    dp::Shard shard;
    Precision p;
  };
  const Case cases[] = {
      {MeshShape{1, 2, 1, 1}, false, Recompute::none, dp::Shard::none, Precision::fp32},
      {MeshShape{1, 2, 1, 1}, true, Recompute::selective, dp::Shard::none, Precision::bf16_mixed},
      {MeshShape{1, 3, 1, 1}, true, Recompute::full, dp::Shard::none, Precision::fp32},  // padded vocabulary
      {MeshShape{2, 2, 1, 1}, true, Recompute::none, dp::Shard::zero3, Precision::bf16_mixed},
      {MeshShape{2, 2, 1, 1}, false, Recompute::full, dp::Shard::zero1, Precision::fp32},
      {MeshShape{1, 1, 1, 1}, false, Recompute::selective, dp::Shard::none, Precision::fp32},  // tp1: recompute alone
  };
  for (const Case& c : cases) {
    const StrategyRun s = run_of(c.mesh, c.sp, c.r, c.shard, c.p);
    const std::string what = mesh_text(c.mesh) + (c.sp ? " sp" : "") + " recompute=" + std::string(recompute_name(c.r)) + " " +
                             std::string(dp::shard_name(c.shard)) + " " + precision_name(c.p);
    const testing::StandInRuns runs = testing::expect_stand_ins_train_as_the_cpu(s, what);
    const ConformanceResult &cpu = runs.cpu, &r = runs.device;
    EXPECT_EQ(r.exact_of("mem.activations").measured, cpu.exact_of("mem.activations").measured) << what;
  }
}

// ZeRO-Offload over the tensor-parallel shards on stand-ins: the host steps
// each rank's shard of its tp shard.
TEST(TpConformance, OnADeviceTheOffloadedOptimizerStepsOnTheHost) {
  StrategyRun s = run_of(MeshShape{2, 2, 1, 1}, true, Recompute::none, dp::Shard::zero2, Precision::bf16_mixed);
  s.spec.data.offload = dp::Offload::optimizer;
  const testing::StandInRuns runs = testing::expect_stand_ins_train_as_the_cpu(s, "dp2.tp2.sp zero2 + offload bf16");
  EXPECT_EQ(runs.device.exact_of("mem.optimizer").measured, 0);
  EXPECT_GT(runs.device.exact_of("mem.optimizer.host").measured, runs.cpu.exact_of("mem.optimizer.host").measured);
}

// Tensor parallel inside pipeline stages on stand-ins: the stage's TpModel
// runs on the device's ops too.
TEST(TpConformance, OnADevicePipelineStagesWithTensorParallelTrainAsOnTheCpu) {
  StrategyRun s = run_of(MeshShape{1, 2, 1, 2}, true, Recompute::none, dp::Shard::none, Precision::fp32);
  s.spec.train.model.L = 4;
  s.spec.train.batch = 2;
  s.spec.train.microbatches = 2;
  s.spec.pipe.schedule = pipeline::ScheduleKind::one_f_one_b;
  testing::expect_stand_ins_train_as_the_cpu(s, "tp2.pp2.sp 1f1b");
}

// One rank on a guarded stand-in (its memory opens only inside the device's
// ops): the tensor-parallel runner's lookup, positions, biases, cross-entropy
// and token staging touch device memory only through the seam.
TEST(TpConformance, OnADeviceTheRunnerTouchesDeviceMemoryOnlyThroughItsOps) {
  for (Recompute rc : {Recompute::selective, Recompute::full}) {
    StrategyRun s = run_of(MeshShape{1, 1, 1, 1}, false, rc, dp::Shard::none, Precision::fp32);
    s.spec.train.device = Device::cuda;
    testing::StandInDevices devices(/*guarded=*/true);
    s.open_device = [&] { return devices.open(); };
    const ConformanceResult r = run_conformance(s);
    EXPECT_TRUE(r.pass()) << r.strategy << ":" << describe_failures(r);
  }
}

// A device's kernels keep their own workspaces: a tensor-parallel rank on one
// holds what runner_workspace_bytes declares without the CPU kernels' (the
// planner's figure on a GPU profile), less than on the CPU.
TEST(TpConformance, OnADeviceTheRankHoldsNoCpuKernelWorkspace) {
  const RunSpec s = run_of(MeshShape{1, 2, 1, 1}, true, Recompute::selective, dp::Shard::none, Precision::fp32).spec;
  std::mutex mu;
  std::vector<int64_t> on_device, on_cpu;
  run_local(s.world(), [&](Communicator& c) {
    auto memory = std::make_shared<testing::CountingMemory>();
    tp::TpRank<float> d(s, c, std::make_shared<testing::StandInOps<float>>(), memory);
    d.step();
    tp::TpRank<float> h(s, c);
    h.step();
    std::lock_guard lk(mu);
    on_device.push_back(int64_t(d.memory().peak(MemTag::workspace)));
    on_cpu.push_back(int64_t(h.memory().peak(MemTag::workspace)));
  });
  const tp::TpOptions o = tp::options_of(s);
  const int64_t gpu = tp::runner_workspace_bytes(s.train.model, o, 2, 12, Precision::fp32, 0, 1, /*kernel_ws=*/false);
  const int64_t cpu = tp::runner_workspace_bytes(s.train.model, o, 2, 12, Precision::fp32);
  EXPECT_LT(gpu, cpu);
  for (int64_t m : on_device) EXPECT_EQ(m, gpu);
  for (int64_t m : on_cpu) EXPECT_EQ(m, cpu);
}

// Context parallel on stand-ins, ring and Ulysses: the packing as row
// copies, every attention block, merge and row sum the device's, the ring's
// accumulators moved and added through the seam, the whole sequences' tokens
// drawn in host memory; with tensor, sequence and data parallel, and inside
// pipeline stages.
TEST(TpConformance, OnADeviceContextParallelTrainsAsOnTheCpu) {
  struct Case {
    MeshShape mesh;
    CpAlgo algo;
    bool sp, zigzag;
    dp::Shard shard;
    Precision p;
  };
  const Case cases[] = {
      {MeshShape{1, 1, 2, 1}, CpAlgo::ulysses, false, true, dp::Shard::none, Precision::fp32},
      {MeshShape{1, 1, 2, 1}, CpAlgo::ulysses, false, false, dp::Shard::none, Precision::bf16_mixed},
      {MeshShape{1, 2, 2, 1}, CpAlgo::ulysses, true, true, dp::Shard::none, Precision::fp32},
      {MeshShape{2, 1, 2, 1}, CpAlgo::ulysses, false, true, dp::Shard::zero1, Precision::bf16_mixed},
      {MeshShape{1, 1, 2, 1}, CpAlgo::ring, false, true, dp::Shard::none, Precision::fp32},
      {MeshShape{1, 1, 3, 1}, CpAlgo::ring, false, false, dp::Shard::none, Precision::bf16_mixed},  // accumulators travel
      {MeshShape{1, 2, 2, 1}, CpAlgo::ring, true, true, dp::Shard::zero3, Precision::fp32},
      {MeshShape{1, 1, 2, 2}, CpAlgo::ring, false, true, dp::Shard::none, Precision::fp32},  // in pipeline stages
  };
  for (const Case& c : cases) {
    StrategyRun s = run_of(c.mesh, c.sp, Recompute::none, c.shard, c.p);
    s.spec.context.algo = c.algo;
    s.spec.context.zigzag = c.zigzag;
    if (c.mesh.pp > 1) {
      s.spec.train.model.L = 4;
      s.spec.train.batch = 2;
      s.spec.train.microbatches = 2;
      s.spec.pipe.schedule = pipeline::ScheduleKind::one_f_one_b;
    }
    testing::expect_stand_ins_train_as_the_cpu(s, mesh_text(c.mesh) + " " + std::string(cp_algo_name(c.algo)) +
                                                      (c.zigzag ? " zigzag" : "") + (c.sp ? " sp" : "") + " " +
                                                      precision_name(c.p));
  }
}

// The ring's messages, matched by order alone as nccl matches them (the
// local backend's match_by_order): each step's accumulator and K/V hop posted
// as one group in the same order on both sides, so the run is the same bits
// as with tags. cp 3 and 4: accumulators travel more than one hop.
TEST(TpConformance, RingMessagesMatchedByOrderAloneAsOnNccl) {
  for (int cp : {2, 3, 4}) {
    StrategyRun s = run_of(MeshShape{1, 1, cp, 1}, false, Recompute::none, dp::Shard::none, Precision::fp32);
    s.spec.context.algo = CpAlgo::ring;
    s.spec.context.zigzag = false;
    const ConformanceResult tagged = run_conformance(s);
    s.world.match_by_order = true;
    const ConformanceResult ordered = run_conformance(s);
    EXPECT_TRUE(ordered.pass()) << "cp" << cp << ":" << describe_failures(ordered);
    EXPECT_EQ(ordered.trace.loss, tagged.trace.loss) << "cp" << cp;
    EXPECT_EQ(ordered.trace.grads1, tagged.trace.grads1) << "cp" << cp;
    EXPECT_EQ(ordered.trace.params, tagged.trace.params) << "cp" << cp;
  }
}

}  // namespace
}  // namespace pb
