// The data-parallel family and the pipeline schedules on GPUs (train.device =
// cuda) under mpirun, one rank per GPU over the nccl backend: DDP and
// ZeRO-1/2/3 at fp32 and bf16-mixed over every rank, ZeRO-2/3 with the
// optimizer offloaded, expert parallel over every rank, tensor parallel and
// context parallel (ring, Ulysses) over every rank, and each schedule over
// the ranks as pipeline stages (messages matched by order, runs of them posted
// as NCCL groups), judged by the engine (the fp64 truth on the CPU, the same
// reference on the GPU as a floor, the fp64 rerun on the CPU, memory and
// bytes exact). Without a GPU per rank it exits 77 with the
// reason, which ctest reports as skipped; it has never run here (no GPU).
#include <gtest/gtest.h>

#include <memory>
#include <utility>

#include "harness/comm/testing_world.h"
#include "kernels/cuda/gpu.h"
#include "suites/conformance/engine.h"

namespace pb {
namespace {

using WorldEnv = testing::WorldEnv;

StrategyRun run_of(dp::Shard shard, Precision p) {
  const int dp = WorldEnv::world().size();
  StrategyRun s;
  s.spec.train.model = named_model("tiny");
  s.spec.train.precision = p;
  s.spec.train.device = Device::cuda;
  s.spec.train.steps = 3;
  s.spec.train.batch = 2 * dp;
  s.spec.train.seq = 16;
  s.spec.train.optim.lr = 3e-3;
  s.spec.mesh.dp = dp;
  s.spec.data.shard = shard;
  s.spec.data.bucket_bytes = 4096;  // several buckets, reduced under backward
  s.world.backend = BackendKind::nccl;
  s.open_device = [] {
    const kernels::cuda::Gpu g = kernels::cuda::open_gpu(kernels::cuda::current_device());
    return std::make_shared<TrainDevice>(TrainDevice{g.name, g.f32, g.bf16_ops, g.memory, g.stream});
  };
  return s;
}

void expect_pass(const ConformanceResult& r, Precision p) {
  if (!r.hosts_rank0) return;  // rank 0 holds the verdict
  EXPECT_TRUE(r.pass()) << r.strategy << " " << precision_name(p) << ":" << describe_failures(r);
  EXPECT_EQ(r.backend, "nccl");
  EXPECT_EQ(r.device.rfind("cuda:", 0), 0u) << r.device;
  EXPECT_FALSE(r.fp64.empty()) << "the fp64 rerun on the CPU";
  EXPECT_FALSE(r.exact.empty());
}

TEST(DpGpuConformance, DdpAndZeroPassOnOneGpuPerRank) {
  for (Precision p : {Precision::fp32, Precision::bf16_mixed})
    for (dp::Shard sh : {dp::Shard::none, dp::Shard::zero1, dp::Shard::zero2, dp::Shard::zero3})
      expect_pass(run_conformance(run_of(sh, p), WorldEnv::world()), p);
}

// ZeRO-Offload: the optimizer steps host copies on the CPU between the
// gradients' copy down and the parameters' copy up.
TEST(DpGpuConformance, OffloadedOptimizerPassesOnOneGpuPerRank) {
  for (Precision p : {Precision::fp32, Precision::bf16_mixed})
    for (dp::Shard sh : {dp::Shard::zero2, dp::Shard::zero3}) {
      StrategyRun s = run_of(sh, p);
      s.spec.data.offload = dp::Offload::optimizer;
      expect_pass(run_conformance(s, WorldEnv::world()), p);
    }
}

// Mixture of experts with the experts over the GPUs (dispatch and combine
// by NCCL all-to-all, the routing on the host between the device's row ops).
TEST(DpGpuConformance, ExpertParallelPassesWithExpertsPerGpu) {
  const int n = WorldEnv::world().size();
  for (Precision p : {Precision::fp32, Precision::bf16_mixed}) {
    StrategyRun s = run_of(dp::Shard::none, p);
    s.spec.train.model = named_model("tiny-moe");  // 4 experts: ep 2 and 4
    if (s.spec.train.model.moe.experts % n != 0) GTEST_SKIP() << "ep" << n << " does not divide the experts";
    s.spec.mesh.ep = n;
    expect_pass(run_conformance(s, WorldEnv::world()), p);
  }
}

TEST(DpGpuConformance, PipelineSchedulesPassWithAStagePerGpu) {
  const int pp = WorldEnv::world().size();
  for (const auto& [kind, v] : {std::pair{pipeline::ScheduleKind::gpipe, 1}, std::pair{pipeline::ScheduleKind::one_f_one_b, 1},
                                std::pair{pipeline::ScheduleKind::interleaved, 2}, std::pair{pipeline::ScheduleKind::zb_h1, 1},
                                std::pair{pipeline::ScheduleKind::pipedream_2bw, 1}}) {
    StrategyRun s = run_of(dp::Shard::none, Precision::fp32);
    const int m = 2 * pp;  // interleaved: posted with one exchange around each F-backward pair
    s.spec.train.model.L = 8;  // room for pp x v stages
    s.spec.mesh.dp = 1;
    s.spec.mesh.pp = pp;
    s.spec.pipe.schedule = kind;
    s.spec.pipe.virtual_stages = v;
    s.spec.train.batch = m;
    s.spec.train.microbatches = m;
    expect_pass(run_conformance(s, WorldEnv::world()), Precision::fp32);
  }
}

// Tensor parallel with a shard per GPU: the vocabulary-parallel embedding
// and cross-entropy, the row-parallel biases and the tp collectives on device
// buffers, plain and with sequence parallel and selective recompute (whose
// bitwise twin, recompute none, runs on the GPUs too).
TEST(DpGpuConformance, TensorParallelPassesWithAShardPerGpu) {
  for (Precision p : {Precision::fp32, Precision::bf16_mixed})
    for (bool sp : {false, true}) {
      StrategyRun s = run_of(dp::Shard::none, p);
      s.spec.train.model = named_model("tiny-tp");  // 12 heads: tp 2, 3, 4 and 6
      s.spec.mesh.dp = 1;
      s.spec.mesh.tp = WorldEnv::world().size();
      s.spec.tensor.sp = sp;
      s.spec.tensor.recompute = sp ? Recompute::selective : Recompute::none;
      s.spec.train.batch = 2;
      expect_pass(run_conformance(s, WorldEnv::world()), p);
    }
}

// Context parallel with a slice of every sequence per GPU: ring attention
// (K/V blocks and the travelling dK/dV accumulators as grouped NCCL
// send/recv in matching order) and Ulysses (all-to-alls of device buffers).
TEST(DpGpuConformance, ContextParallelPassesWithASlicePerGpu) {
  for (CpAlgo algo : {CpAlgo::ring, CpAlgo::ulysses})
    for (Precision p : {Precision::fp32, Precision::bf16_mixed}) {
      StrategyRun s = run_of(dp::Shard::none, p);
      s.spec.train.model = named_model("tiny-tp");  // 12 heads; 16 positions: two zigzag halves per rank at cp 2, 4
      s.spec.mesh.dp = 1;
      s.spec.mesh.cp = WorldEnv::world().size();
      s.spec.context.algo = algo;
      s.spec.train.batch = 2;
      expect_pass(run_conformance(s, WorldEnv::world()), p);
    }
}

}  // namespace
}  // namespace pb

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  return pb::testing::run_all_tests_on_gpus(
      "the data-parallel strategies, tensor and context parallel and pipeline schedules on GPUs");
}
