// PlanInput::tp_overlap (plan --tp-overlap, the tp_overlap column): Megatron-
// LM's async column-parallel backward (2755bcb87b megatron/mpu/layers.py,
// LinearWithGradAccumulationAndAsyncCommunication.backward). Each column-
// parallel collective of the backward hides behind the GEMM it runs beside,
// up to that GEMM's time; the hidden part slows compute by the profile's
// overlap_compute_slowdown; everything else stays exposed. Held to hand
// figures on a small custom GPT on a hand-typed device.
#include "suites/planner/planner.h"
#include "suites/planner/planner_testing.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>

#include "harness/status.h"

namespace pb::planner {
namespace {

// GPT L2 C256 NH4 V4096, seq 128, microbatch 2, 2 microbatches, tp 2, bf16:
// N = 256 rows per microbatch, each column-parallel collective moves the
// input's N x C x 2 bytes = 131072. A device of 1 TFLOP/s, GEMMs at 50%,
// 1 GB/s and 10 us per ring step, overlap slowing compute 20%.
constexpr int64_t kL = 2, kC = 256, kV = 4096, kSeq = 128, kB = 2, kM = 2, kT = 2;

PlanInput small(bool sp) {
  PlanInput in;
  ModelConfig m;
  m.name = "custom";
  m.L = kL;
  m.C = kC;
  m.NH = 4;
  m.V = kV;
  m.maxT = kSeq;
  in.shape = m;
  in.seq = kSeq;
  in.tp = kT;
  in.sp = sp;
  in.microbatch_size = kB;
  in.global_batch = kB * kM;
  in.precision = Precision::bf16_mixed;
  in.hw = figures({.peak_tflops = 1, .bw_intra_GBps = 1, .latency_us = 10, .device = true});
  in.hw.gemm_efficiency = 0.5;
  in.hw.overlap_compute_slowdown = 0.2;
  return in;
}

constexpr double kRate = 1e12 * 0.5;  // FLOP/s: the peak x the GEMM efficiency
constexpr double kN = double(kB * kSeq), kBytes = kN * kC * 2;
// One GEMM of a column-parallel linear with `out` output columns on a tp rank:
// dW = dy^T x and dx = dy W both 2 N C out FLOPs.
double gemm_s(double out) { return 2.0 * kN * kC * out / kRate; }
// The hidden seconds of one step: per microbatch and block QKV (3C/t) and fc1
// (4C/t), per microbatch the LM head (V/t), each call min(call, its GEMM).
double hidden_s(double call) {
  return kM * kL * (std::min(call, gemm_s(3.0 * kC / kT)) + std::min(call, gemm_s(4.0 * kC / kT))) +
         kM * std::min(call, gemm_s(double(kV) / kT));
}

// Without sp: the backward's column-parallel all-reduces (2 per block and
// microbatch, the head's 1) of 131072 bytes over 2 ranks: 2 ring steps of
// 10 us and 131072 bus bytes at 1 GB/s, 151.072 us each. QKV's and fc1's
// weight-gradient GEMMs are shorter (100.7, 134.2 us: the GEMM bounds the
// hidden part), the head's longer (536.9 us: the whole call hides).
TEST(PlannerTpOverlap, EachColumnParallelCallHidesUpToItsGemm) {
  PlanInput in = small(false);
  const PlanResult none = plan(in);
  in.tp_overlap = TpOverlap::wgrad;
  const PlanResult r = plan(in);
  const double call = 2 * 10e-6 + kBytes / 1e9;
  ASSERT_LT(gemm_s(3.0 * kC / kT), call);  // both arms of the min are exercised
  ASSERT_LT(gemm_s(4.0 * kC / kT), call);
  ASSERT_GT(gemm_s(double(kV) / kT), call);
  const double hidden = hidden_s(call);
  EXPECT_NEAR(r.tp_overlap_comm_s, (2 * kM * kL + kM) * call, 1e-15);
  EXPECT_NEAR(r.tp_hidden_s, hidden, 1e-15);
  EXPECT_NEAR(r.tp_hidden_s, 4 * 100.663296e-6 + 4 * 134.217728e-6 + 2 * 151.072e-6, 1e-15);
  // Compute is unchanged; the step loses what is hidden and pays 20% of it.
  ASSERT_LT(hidden, r.compute_s * 2 / 3);
  EXPECT_EQ(r.compute_s, none.compute_s);
  EXPECT_NEAR(r.tp_overlap_slowdown_s, 0.2 * hidden, 1e-15);
  EXPECT_NEAR(r.overlap_slowdown_s, 0.2 * hidden, 1e-15);
  EXPECT_NEAR(none.exposed_comm_s - r.exposed_comm_s, hidden - 0.2 * hidden, 1e-15);
  EXPECT_NEAR(none.step_s - r.step_s, hidden - 0.2 * hidden, 1e-15);
  // The same rows either way: only what is hidden differs.
  ASSERT_EQ(r.comm.size(), none.comm.size());
  for (size_t i = 0; i < r.comm.size(); ++i) {
    EXPECT_EQ(r.comm[i].group, none.comm[i].group);
    EXPECT_EQ(r.comm[i].op, none.comm[i].op);
    EXPECT_EQ(r.comm[i].calls, none.comm[i].calls);
    EXPECT_EQ(r.comm[i].time_s, none.comm[i].time_s);
    EXPECT_EQ(r.comm[i].overlaps.empty(), !(r.comm[i].phase == "bwd" && r.comm[i].op == "all_reduce"))
        << r.comm[i].phase << " " << r.comm[i].op;
  }
  // none: no row carries overlaps, nothing is hidden, every collective waited for.
  for (const CommRow& c : none.comm) EXPECT_TRUE(c.overlaps.empty());
  EXPECT_EQ(none.tp_hidden_s, 0);
  EXPECT_EQ(none.tp_overlap_comm_s, 0);
  EXPECT_EQ(none.overlap_slowdown_s, 0);
  EXPECT_NEAR(none.exposed_comm_s, none.comm_s, 1e-15);
}

// Full recomputation reruns the forward's row-parallel all-reduces in the
// backward: the bwd row grows by them, and they stay exposed.
TEST(PlannerTpOverlap, RecomputedForwardCollectivesStayExposed) {
  PlanInput in = small(false);
  in.recompute = Recompute::full;
  in.tp_overlap = TpOverlap::wgrad;
  const PlanResult r = plan(in);
  const double call = 2 * 10e-6 + kBytes / 1e9;
  EXPECT_NEAR(r.tp_hidden_s, hidden_s(call), 1e-15);
  const auto bwd = std::find_if(r.comm.begin(), r.comm.end(), [](const CommRow& c) {
    return c.group == "tp" && c.phase == "bwd" && c.op == "all_reduce";
  });
  ASSERT_NE(bwd, r.comm.end());
  EXPECT_EQ(bwd->calls, 4 * kM * kL + kM);  // 2 column-parallel + 2 rerun per block, the head's
  EXPECT_NEAR(bwd->time_s - r.tp_overlap_comm_s, 2 * kM * kL * call, 1e-15);
}

// With sp: the input gradient's reduce-scatter beside dW and the saved
// input's re-gather beside dx, each (n-1)/n of 131072 bytes in 1 ring step:
// 75.536 us, shorter than every GEMM (the call hides whole). Kept gathers
// (sp_regather false) leave only the reduce-scatters.
TEST(PlannerTpOverlap, SequenceParallelHidesTheReduceScatterAndTheRegather) {
  PlanInput in = small(true);
  in.tp_overlap = TpOverlap::wgrad;
  const PlanResult r = plan(in);
  const double call = 10e-6 + kBytes / 2 / 1e9;
  ASSERT_LT(call, gemm_s(3.0 * kC / kT));
  EXPECT_NEAR(r.tp_hidden_s, 2 * hidden_s(call), 1e-15);
  EXPECT_NEAR(r.tp_hidden_s, 2 * (2 * kM * kL + kM) * call, 1e-15);
  in.sp_regather = false;
  const PlanResult kept = plan(in);
  EXPECT_NEAR(kept.tp_hidden_s, hidden_s(call), 1e-15);
  for (const CommRow& c : kept.comm) EXPECT_EQ(c.overlaps.empty(), !(c.phase == "bwd" && c.op == "reduce_scatter"));
}

// The hidden part of a call is at most its GEMM at the profile's own rate by
// shape (here a built-in GPU profile's tile model): never more than the
// column-parallel calls last, never negative, and the step no slower.
TEST(PlannerTpOverlap, OnABuiltInProfileTheStepIsNoSlower) {
  PlanInput in = small(true);
  in.hw = figures({.peak_tflops = 312, .bw_intra_GBps = 235, .latency_us = 3.4, .device = true});
  in.hw.gemm_achievable_tflops = 258;
  in.hw.gemm_units = 108, in.hw.gemm_tile_m = 256, in.hw.gemm_tile_n = 128;
  in.hw.overlap_compute_slowdown = 0.189;
  const PlanResult none = plan(in);
  in.tp_overlap = TpOverlap::wgrad;
  const PlanResult r = plan(in);
  EXPECT_GT(r.tp_hidden_s, 0);
  EXPECT_LE(r.tp_hidden_s, r.tp_overlap_comm_s);
  EXPECT_LT(r.step_s, none.step_s);
}

// Bad input: wgrad without tensor parallelism, or on the CPU's ranks (typed
// figures), is refused naming the flag.
TEST(PlannerTpOverlap, RefusedWhereItHidesNothing) {
  PlanInput in = small(false);
  in.tp_overlap = TpOverlap::wgrad;
  in.tp = 1;
  try {
    plan(in);
    FAIL() << "tp 1 planned";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--tp-overlap wgrad"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--tp > 1"), std::string::npos) << e.what();
  }
  in.tp = kT;
  in.hw.host_kernels = true;
  try {
    plan(in);
    FAIL() << "a CPU profile planned";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--tp-overlap wgrad: a GPU profile's"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace pb::planner
