// The planner rows of a sweep: one valid plan row per ok point, keyed like its
// sweep row (what the report pairs), timed with the machine's measured figures
// at the rank's core share; and memory peaks that cover the measured steps only.
#include "suites/sweep/sweep_plan.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <thread>
#include <map>

#include "harness/io/csv_schema.h"
#include "harness/status.h"
#include "kernels/cpu/peak.h"
#include "suites/calibrate/kernel_rates.h"
#include "suites/planner/machine.h"

namespace pb::sweep {

using namespace calibrate;  // the measured figures these plan rows are timed with

namespace {

namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("pb_sweep_plan_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

SweepConfig tiny(std::vector<std::string> strategies, std::vector<int64_t> worlds, int warmup = 1) {
  SweepConfig c;
  c.strategies = std::move(strategies);
  c.worlds = std::move(worlds);
  c.models = {"tiny"};
  c.steps = 2;
  c.warmup = warmup;
  c.batch_per_rank = 2;
  c.peak_gflops = 10.0;
  return c;
}

TEST(SweepPlan, InputDescribesThePointAsRun) {
  SweepConfig c = tiny({"shard=none"}, {4});
  SweepPoint p = make_point("shard=none", "dp4", "tiny", "fp32", "weak", 2);
  PointResult r;
  r.global_batch = 16;
  r.seq = 16;
  LocalHardware h{10e9, 5, 20, 2, {}, {}};
  const planner::PlanInput in = plan_input(c, p, r, h);
  EXPECT_EQ(in.dp, 4);
  EXPECT_EQ(in.shard, dp::Shard::none);
  EXPECT_FALSE(in.overlap);  // 4 ranks on 2 cores: the backend reduces the buckets at the wait (deferred progress)
  EXPECT_EQ(in.microbatch_size, 2);      // 16 sequences / (4 ranks x 2 microbatches)
  EXPECT_EQ(in.global_batch, 16);
  ASSERT_TRUE(in.shape.has_value());
  EXPECT_EQ(in.shape->name, "tiny");
  h.cores = 8;
  EXPECT_TRUE(plan_input(c, p, r, h).overlap);  // DDP's default bucket overlap, on progress threads
  p.spec.data.shard = dp::Shard::zero3;
  EXPECT_FALSE(plan_input(c, p, r, h).overlap);
  h.cores = 2;
  // A pipeline point: the planner sees its stages, schedule and per-replica microbatch.
  p = make_point("shard=zero1,schedule=interleaved,virtual_stages=2", "dp2.pp2", "tiny", "fp32", "weak", 4);
  const planner::PlanInput pi = plan_input(c, p, r, h);
  EXPECT_EQ(pi.dp, 2);
  EXPECT_EQ(pi.pp, 2);
  EXPECT_EQ(pi.schedule, pipeline::ScheduleKind::interleaved);
  EXPECT_EQ(pi.virtual_stages, 2);
  EXPECT_EQ(pi.shard, dp::Shard::zero1);
  EXPECT_EQ(pi.microbatch_size, 2);  // 16 sequences / (2 replicas x 4 microbatches)
  EXPECT_FALSE(pi.overlap);          // stages sync after the flush
}

TEST(SweepPlan, GemmEfficiencyIsMeasuredAtTheModelsShapes) {
  const double peak = kernels::measure_sgemm_gflops(512, 0.05) * 1e9;
  const double tiny = measure_gemm_efficiency(named_model("tiny"), 8, 16, peak, 0.01);
  const double medium = measure_gemm_efficiency(named_model("medium"), 8, 64, peak, 0.01);
  EXPECT_GT(tiny, 0);
  EXPECT_LE(medium, 1);
  EXPECT_LT(tiny, medium);  // C = 32 GEMMs are far from peak; C = 256 ones much nearer
  EXPECT_THROW(measure_gemm_efficiency(named_model("tiny"), 0, 16, peak, 0.005), InputError);
  SweepConfig c;
  SweepPoint p = make_point("shard=none", "dp1", "tiny", "fp32", "weak", 1);
  PointResult r;
  r.global_batch = 8;
  r.seq = 16;
  const LocalHardware h{10e9, 5, 20, 2, {}, {}};
  const planner::PlanResult full = planner::plan(plan_input(c, p, r, h));
  const planner::PlanResult quarter = planner::plan(plan_input(c, p, r, h, ShapeRates{0.25, {}}));
  const double gemm_s = full.compute_s - full.memory_s;  // the memory-bound part does not scale
  EXPECT_GT(full.memory_s, 0);
  EXPECT_NEAR(quarter.compute_s - quarter.memory_s, 4 * gemm_s, 1e-12 * gemm_s);
}

// A tensor- or context-parallel rank multiplies smaller matrices (the linear
// layers' outputs split over tp, the tokens over cp) at lower rates: the
// split's efficiency is measured at its own shapes, once, and its points'
// plans use it; other points keep the unsplit figure.
TEST(SweepPlan, SplitGemmEfficiencyIsMeasuredAtTheRanksShapes) {
  const ModelConfig& m = named_model("tiny");
  const double peak = kernels::measure_sgemm_gflops(512, 0.05) * 1e9;
  ShapeRates rates = measure_shape_rates(m, 4, 16, peak, 3);
  measure_split_gemm_efficiency(rates, m, 4, 16, peak, 1, 4, 3);
  measure_split_gemm_efficiency(rates, m, 4, 16, peak, 2, 1, 3);
  measure_split_gemm_efficiency(rates, m, 4, 16, peak, 1, 1, 3);  // unsplit: nothing to add
  ASSERT_EQ(rates.split_gemm_efficiency.size(), 2u);
  const double cp4 = rates.gemm_efficiency_at(1, 4);
  EXPECT_GT(cp4, 0);
  // 16 rows per GEMM instead of 64 (this machine: 0.27 against 0.59).
  EXPECT_LT(cp4, 0.8 * rates.gemm_efficiency);
  EXPECT_GT(rates.gemm_efficiency_at(2, 1), 0);
  EXPECT_LE(rates.gemm_efficiency_at(2, 1), 1);
  EXPECT_EQ(rates.gemm_efficiency_at(1, 1), rates.gemm_efficiency);
  EXPECT_EQ(rates.gemm_efficiency_at(2, 2), rates.gemm_efficiency);  // not measured
  // Without the attention core's per-head GEMMs (8 x 16 x 16 here), measured
  // from the same timings for a cp split only: what the rates time when the
  // core is measured (this machine, tiny at cp2: 0.64 against 0.38).
  ASSERT_EQ(rates.split_linear_efficiency.size(), 1u);
  EXPECT_GT(rates.linear_efficiency_at(1, 4), cp4);
  EXPECT_LE(rates.linear_efficiency_at(1, 4), 1);
  EXPECT_EQ(rates.linear_efficiency_at(2, 1), rates.gemm_efficiency_at(2, 1));  // no cp: not measured
  EXPECT_GT(measure_gemm_efficiency(m, 4, 16, peak, 0.005, 1, 2, false),
            measure_gemm_efficiency(m, 4, 16, peak, 0.005, 1, 2, true));
  rates.split_gemm_efficiency[{1, 4}] = 0.123;  // measured once: a second call keeps it
  measure_split_gemm_efficiency(rates, m, 4, 16, peak, 1, 4, 3);
  EXPECT_EQ(rates.gemm_efficiency_at(1, 4), 0.123);
  EXPECT_THROW(measure_gemm_efficiency(m, 4, 16, peak, 0.005, 1, 3), InputError);  // cp3 does not divide 16
  EXPECT_THROW(measure_gemm_efficiency(m, 4, 16, peak, 0.005, 3, 1), InputError);  // nor tp3 the 2 heads

  SweepConfig c;
  PointResult r;
  r.global_batch = 4;
  r.seq = 16;
  const LocalHardware h{10e9, 5, 20, 4, {}, {}};
  SweepPoint cp = make_point("shard=none", "cp4", "tiny", "fp32", "weak", 1);
  SweepPoint dp = make_point("shard=none", "dp1", "tiny", "fp32", "weak", 1);
  EXPECT_EQ(plan_input(c, cp, r, h, rates).hw.gemm_efficiency, 0.123);
  EXPECT_EQ(plan_input(c, dp, r, h, rates).hw.gemm_efficiency, rates.gemm_efficiency);
}

// A context-parallel rank's attention core is timed as that rank runs it (its
// algorithm on cp local ranks), once per split, and a plan row of the split
// gets it at the point's core share; splits that do not fit are refused.
TEST(SweepPlan, CpAttentionIsMeasuredAsTheRanksRunIt) {
  const ModelConfig& m = named_model("tiny");  // 2 heads of 16
  const CpAttentionTime ring = measure_cp_attention(m, Precision::fp32, 4, 16, 1, 2, CpAlgo::ring, true, 0.01, 1);
  EXPECT_GT(ring.fwd_s, 0);
  EXPECT_GT(ring.bwd_s, 0);
  EXPECT_LT(ring.fwd_s + ring.bwd_s, 0.05);  // one layer of 4 sequences of 16 tokens
  EXPECT_EQ(ring.threads, 2);
  const CpAttentionTime uly =
      measure_cp_attention(m, Precision::bf16_mixed, 4, 16, 1, 2, CpAlgo::ulysses, true, 0.01, 1);
  EXPECT_GT(uly.fwd_s, 0);
  EXPECT_GT(uly.bwd_s, 0);
  EXPECT_THROW(measure_cp_attention(m, Precision::fp32, 4, 16, 1, 3, CpAlgo::ring, true, 0.01, 1), InputError);
  EXPECT_THROW(measure_cp_attention(m, Precision::fp32, 4, 16, 2, 2, CpAlgo::ulysses, true, 0.01, 1), InputError);
  EXPECT_THROW(measure_cp_attention(m, Precision::fp32, 4, 16, 3, 2, CpAlgo::ring, true, 0.01, 1), InputError);
  EXPECT_THROW(measure_cp_attention(m, Precision::fp32, 4, 16, 1, 1, CpAlgo::ring, true, 0.01, 1), InputError);

  ShapeRates rates;
  add_cp_attention(rates, m, Precision::fp32, 4, 16, 1, 2, CpAlgo::ring, false);
  add_cp_attention(rates, m, Precision::fp32, 4, 16, 1, 1, CpAlgo::ring, true);  // no cp: nothing to add
  ASSERT_EQ(rates.cp_attention.size(), 1u);
  const auto key = std::make_tuple(1, 2, CpAlgo::ring, false);
  EXPECT_GT(rates.cp_attention.at(key).fwd_s, 0);
  rates.cp_attention[key] = {2e-5, 3e-5, 2};  // measured once: a second call keeps it
  add_cp_attention(rates, m, Precision::fp32, 4, 16, 1, 2, CpAlgo::ring, false);
  EXPECT_EQ(rates.cp_attention.at(key).fwd_s, 2e-5);
  {  // tp2.cp2: two rings of 2 side by side, on 4 threads as its world
    ShapeRates split;
    add_cp_attention(split, m, Precision::fp32, 4, 16, 2, 2, CpAlgo::ring, true);
    const CpAttentionTime t = split.cp_attention.at(std::make_tuple(2, 2, CpAlgo::ring, true));
    EXPECT_EQ(t.threads, 4);
    EXPECT_GT(t.fwd_s, 0);
    EXPECT_GT(t.bwd_s, 0);
  }
  rates.cp_attention[std::make_tuple(2, 2, CpAlgo::ring, true)] = {1e-5, 4e-5, 2};

  SweepConfig c;
  PointResult r;
  r.global_batch = 4;
  r.seq = 16;
  const LocalHardware h{10e9, 5, 20, 2, {}, {}};  // 2 cores
  const SweepPoint contiguous = make_point("shard=none,cp_algo=ring,zigzag=off", "cp2", "tiny", "fp32", "weak", 1);
  rates.split_gemm_efficiency[{1, 2}] = 0.3;
  rates.split_linear_efficiency[{1, 2}] = 0.6;
  planner::PlanInput in = plan_input(c, contiguous, r, h, rates);
  EXPECT_EQ(in.hw.attention_fwd_s, 2e-5);
  EXPECT_EQ(in.hw.attention_bwd_s, 3e-5);
  EXPECT_EQ(in.hw.gemm_efficiency, 0.6);  // the core's GEMMs are in its time
  // zigzag was not measured at cp2: the FLOPs at the GEMM rate, every GEMM's.
  const planner::PlanInput zigzag = plan_input(c, make_point("shard=none", "cp2", "tiny", "fp32", "weak", 1), r, h, rates);
  EXPECT_EQ(zigzag.hw.attention_fwd_s, 0);
  EXPECT_EQ(zigzag.hw.gemm_efficiency, 0.3);
  // tp2.cp2 is 4 ranks on 2 cores: had the core been measured on 2 threads
  // (a core each), it would run at half their speed.
  in = plan_input(c, make_point("shard=none", "tp2.cp2", "tiny", "fp32", "weak", 1), r, h, rates);
  EXPECT_DOUBLE_EQ(in.hw.attention_fwd_s, 2e-5);
  EXPECT_DOUBLE_EQ(in.hw.attention_bwd_s, 8e-5);
  const PlanRow row = plan_row(c, contiguous, r, h, RunMeta{}, rates);
  EXPECT_NE(row.meta.reason.find("attention core measured (ring contiguous"), std::string::npos) << row.meta.reason;
  EXPECT_NE(row.meta.reason.find("GEMMs at 0.6 of it (at a tp1 cp2 rank's shapes, the attention core's left out)"),
            std::string::npos)
      << row.meta.reason;
}

// The memory-bound side: the bytes are the planner's own counts for the same
// microbatch and optimizer step, the times are measured, and the plan's
// memory-bound time is those bytes at the mixed rate, scaled by the core share.
TEST(SweepPlan, MemoryBoundRatesAreMeasuredAtTheModelsShapes) {
  const ModelConfig& m = named_model("tiny");
  const MemoryBoundRates mb = measure_memory_bound(m, 4, 16, 0.01);
  EXPECT_GT(mb.micro_s, 0);
  EXPECT_GT(mb.step_s, 0);
  const planner::ActivationShape x{4, 16, m.C, m.NH, 1, 1, false, false, 4};
  EXPECT_DOUBLE_EQ(mb.micro_bytes, double(m.L * planner::layer_traffic_bytes(x) + planner::embedding_traffic_bytes(x) +
                                          planner::head_traffic_bytes(x, m.V)));
  EXPECT_DOUBLE_EQ(mb.step_bytes, double(m.num_params()) * 28);
  // The LayerNorms and residual adds apart, at their own rate.
  EXPECT_DOUBLE_EQ(mb.shared_bytes, double(m.L * planner::layer_shared_traffic_bytes(x)));
  EXPECT_GT(mb.shared_s, 0);
  EXPECT_LT(mb.shared_s, mb.micro_s);
  EXPECT_NEAR(mb.shared_GBps(), mb.shared_bytes / mb.shared_s / 1e9, 1e-12 * mb.shared_GBps());
  // The optimizer step apart too: the rest's rate is the microbatches' alone.
  EXPECT_NEAR(mb.optimizer_GBps(), mb.step_bytes / mb.step_s / 1e9, 1e-12 * mb.optimizer_GBps());
  // The data-parallel buffers: 1 + 2 + 3 passes over every parameter's 4 bytes.
  EXPECT_GT(mb.buffer_s, 0);
  EXPECT_DOUBLE_EQ(mb.buffer_bytes, double(m.num_params()) * 24);
  EXPECT_NEAR(mb.buffer_GBps(), mb.buffer_bytes / mb.buffer_s / 1e9, 1e-12 * mb.buffer_GBps());
  EXPECT_NEAR(mb.GBps(3), (mb.micro_bytes - mb.shared_bytes) / (mb.micro_s - mb.shared_s) / 1e9, 1e-12 * mb.GBps(3));
  MemoryBoundRates whole = mb;
  whole.shared_s = whole.shared_bytes = 0;  // not measured apart: the microbatches' kernels at one rate
  EXPECT_NEAR(whole.GBps(3), mb.micro_bytes / mb.micro_s / 1e9, 1e-12 * whole.GBps(3));
  EXPECT_EQ(whole.shared_GBps(), 0);
  whole.step_s = 0;
  EXPECT_EQ(whole.optimizer_GBps(), 0);
  EXPECT_EQ(MemoryBoundRates{}.GBps(2), 0);  // nothing measured
  EXPECT_THROW(measure_memory_bound(m, 4, 0, 0.01), InputError);

  SweepConfig c;
  SweepPoint p = make_point("shard=none", "dp2", "tiny", "fp32", "weak", 1);
  PointResult r;
  r.global_batch = 8;
  r.seq = 16;
  const LocalHardware h{10e9, 5, 20, 1, {}, {}};  // one core: two ranks share it
  const planner::PlanInput measured = plan_input(c, p, r, h, ShapeRates{1, mb});
  EXPECT_NEAR(measured.hw.mem_bw_GBps, mb.GBps(1) / 2, 1e-12 * mb.GBps(1));
  EXPECT_NEAR(measured.hw.shared_mem_bw_GBps, mb.shared_GBps() / 2, 1e-12 * mb.shared_GBps());
  EXPECT_NEAR(measured.hw.optimizer_mem_bw_GBps, mb.optimizer_GBps() / 2, 1e-12 * mb.optimizer_GBps());
  EXPECT_NEAR(measured.hw.buffer_mem_bw_GBps, mb.buffer_GBps() / 2, 1e-12 * mb.buffer_GBps());
  EXPECT_DOUBLE_EQ(plan_input(c, p, r, h).hw.mem_bw_GBps, 2 * 5 / 2.0);  // without: 2 x memcpy, shared
}

// The shape's figures are the best of the repeats: the byte counts of one
// measurement, an efficiency in (0, 1], times > 0; no repeats is an error.

// compute_scale divides a measured single-rank step by this estimate: the
// plan of the dp1 point of the shape (no sharding), its own scale ignored;
// the plan input carries the scale, which scales the plan's compute.
TEST(SweepPlan, ComputeScaleIsAStepOverItsEstimate) {
  const LocalHardware h{20e9, 5, 20, 2, {}, {}};
  ShapeRates rates{0.8, {}, 1.3};
  const ShapeKey k{named_model("tiny"), Precision::fp32, 4, 2};
  SweepConfig c;
  SweepPoint one = make_point("shard=none", "dp1", "tiny", "fp32", "weak", 2);
  PointResult r;
  r.global_batch = 8;
  r.seq = 16;
  EXPECT_EQ(shape_key(one, r), k);
  EXPECT_EQ(single_rank_point(k).key(), one.key());  // the point behind the scale
  SweepPoint dp2 = one;
  dp2.spec.mesh.dp = 2;
  PointResult r2 = r;
  r2.global_batch = 16;
  EXPECT_EQ(shape_key(dp2, r2), k);  // weak scaling: the same microbatch
  ShapeRates unscaled = rates;
  unscaled.compute_scale = 1;
  const double est = planner::plan(plan_input(c, one, r, h, unscaled)).step_s;
  EXPECT_DOUBLE_EQ(single_rank_compute_scale(k, 16, h, rates, 1.3 * est), 1.3);  // no buffer rate: a plain ratio
  const planner::PlanInput in = plan_input(c, one, r, h, rates);
  EXPECT_DOUBLE_EQ(in.hw.compute_scale, 1.3);
  EXPECT_NEAR(planner::plan(in).step_s, 1.3 * est, 1e-12 * est);  // one rank: the step is its compute
  // With the data-parallel buffers at their own rate, their time stays out of
  // the ratio, and the scaled plan of that step is the measured time.
  rates.memory.micro_s = 1e-4, rates.memory.micro_bytes = 1e6;
  rates.memory.buffer_s = 1e-5, rates.memory.buffer_bytes = 1e6;
  unscaled = rates;
  unscaled.compute_scale = 1;
  const planner::PlanResult plain = planner::plan(plan_input(c, one, r, h, unscaled));
  EXPECT_GT(plain.buffer_s, 0);
  const double measured = 1.3 * plain.step_s;
  rates.compute_scale = single_rank_compute_scale(k, 16, h, rates, measured);
  EXPECT_NEAR(rates.compute_scale, (measured - plain.buffer_s) / (plain.step_s - plain.buffer_s), 1e-12);
  EXPECT_NEAR(planner::plan(plan_input(c, one, r, h, rates)).step_s, measured, 1e-12 * measured);
}

// Ranks computing side by side: the factor is 1 for one copy of the
// weights, the measured one at k copies, linear between and clamped;
// plan_input applies it at the point's ranks computing at once and the
// copies they hold: a data-parallel replica (DDP or ZeRO) pays all of it, a
// tensor- or pipeline-parallel half none.
TEST(SweepPlan, RanksComputingSideBySideCostWhatTheirWeightsShare) {
  ShapeRates rates{0.8, {}, 1.3};
  EXPECT_EQ(rates.corun_at(2, 2), 1.0);  // not measured
  rates.corun_scale[2] = 1.1;
  EXPECT_DOUBLE_EQ(rates.corun_at(2, 1), 1.0);
  EXPECT_DOUBLE_EQ(rates.corun_at(2, 1.5), 1.05);
  EXPECT_DOUBLE_EQ(rates.corun_at(2, 2), 1.1);
  EXPECT_DOUBLE_EQ(rates.corun_at(2, 9), 1.1);
  EXPECT_DOUBLE_EQ(rates.corun_at(2, 0.5), 1.0);
  EXPECT_EQ(rates.corun_at(1, 1), 1.0);
  EXPECT_EQ(rates.corun_at(4, 4), 1.0);  // 4 at once: not measured

  const LocalHardware h{20e9, 5, 20, 2, {}, {}};
  SweepConfig c;
  PointResult r;
  r.global_batch = 8;
  r.seq = 16;
  const SweepPoint one = make_point("shard=none", "dp1", "tiny", "fp32", "weak", 2);
  EXPECT_DOUBLE_EQ(plan_input(c, one, r, h, rates).hw.compute_scale, 1.3);  // alone
  PointResult r2 = r;
  r2.global_batch = 16;
  for (const char* s : {"shard=none", "shard=zero3"}) {
    const SweepPoint dp2 = make_point(s, "dp2", "tiny", "fp32", "weak", 2);
    EXPECT_NEAR(plan_input(c, dp2, r2, h, rates).hw.compute_scale, 1.3 * 1.1, 1e-12) << s;  // two replicas
  }
  PointResult r4 = r;
  r4.global_batch = 32;
  const SweepPoint dp4 = make_point("shard=none", "dp4", "tiny", "fp32", "weak", 2);
  EXPECT_NEAR(plan_input(c, dp4, r4, h, rates).hw.compute_scale, 1.3 * 1.1, 1e-12);  // 2 cores: 2 at once
  for (const char* mesh : {"tp2", "pp2"}) {
    const SweepPoint half = make_point("shard=none", mesh, "tiny", "fp32", "weak", 2);
    EXPECT_DOUBLE_EQ(plan_input(c, half, r, h, rates).hw.compute_scale, 1.3) << mesh;  // halves: one copy
  }
  const SweepPoint cp2 = make_point("shard=none", "cp2", "tiny", "fp32", "weak", 2);
  EXPECT_NEAR(plan_input(c, cp2, r, h, rates).hw.compute_scale, 1.3 * 1.1, 1e-12);  // whole weights each
}

// The corun factor from its windows (corun_scale): the windows already
// taken are used as they are, their median; a window of 0 (a step that
// failed or did not fit) gives 1; windows missing are taken, and copies that
// do not fit the limits give 0 windows (so 1). single_rank_step names a step
// that does not fit as skipped, without running it.
TEST(SweepPlan, CorunScaleFromItsWindows) {
  SweepConfig c = tiny({"shard=none"}, {1});
  c.rounds = 3;
  const ShapeKey key{named_model("tiny"), Precision::fp32, 2, 1};
  const Limits roomy;
  std::vector<double> w = {1.1, 1.3, 1.2};
  EXPECT_DOUBLE_EQ(corun_scale(c, key, 2, roomy, w), 1.2);
  EXPECT_EQ(w.size(), 3u);
  w = {1.1, 0, 1.2};
  EXPECT_DOUBLE_EQ(corun_scale(c, key, 2, roomy, w), 1);
  Limits tight;
  tight.memory_bytes = 1024;  // no step fits
  w = {1.05};
  EXPECT_DOUBLE_EQ(corun_scale(c, key, 2, tight, w), 1);
  EXPECT_EQ(w, (std::vector<double>{1.05, 0, 0}));
  const PointResult step = single_rank_step(c, key, 1e10, tight);
  EXPECT_EQ(step.status, "skipped");
  EXPECT_NE(step.reason.find("calibration step: needs"), std::string::npos) << step.reason;
  const PointResult ran = single_rank_step(c, key, 1e10, roomy);
  EXPECT_EQ(ran.status, "ok") << ran.reason;
  EXPECT_GT(ran.step_time_s, 0);
}

// plan --machine FILE --against: a profile plans each measured point as the
// plan command would (one rank per core: worlds above its node are listed,
// not compared); calibrating its compute_scale on the single-rank point makes
// that point's plan its measured step; a CSV that is not a sweep's is refused.
TEST(SweepPlan, AProfileAgainstMeasuredPoints) {
  const fs::path d = fresh_dir("against");
  SweepRun run;
  run.csv_path = (d / "sweep.csv").string();
  run.meta.run_id = "test-run";
  run.meta.backend = "local";
  ASSERT_EQ(run_sweep(tiny({"shard=none"}, {1, 2, 4}), run).ok, 3);
  planner::MachineProfile m;
  m.hw.machine = "cpu";
  m.source = "test";
  m.peak_tflops_bf16 = m.peak_tflops_fp32 = m.peak_tflops_fp64 = 0.05;
  m.hw.mem_bw_GBps = 8;
  m.hw.bw_intra_GBps = m.hw.bw_inter_GBps = 10;
  m.ranks_per_node = 2;
  std::vector<ProfilePoint> pts = plan_against(m, run.csv_path);
  ASSERT_EQ(pts.size(), 3u);
  const CsvTable s = read_csv(run.csv_path);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_DOUBLE_EQ(pts[i].measured_s, std::stod(s.rows[i][s.column("step_time_s")]));
    EXPECT_EQ(pts[i].mesh.dp, std::stoi(s.rows[i][s.column("world")]));
  }
  EXPECT_TRUE(pts[0].compared && pts[1].compared) << pts[0].why << pts[1].why;
  EXPECT_GT(pts[0].planned_s, 0);
  EXPECT_FALSE(pts[2].compared);
  EXPECT_NE(pts[2].why.find("4 ranks on a node of 2 cores"), std::string::npos) << pts[2].why;
  // dp1 DDP holds no data-parallel buffers: its whole plan scales.
  m.shapes = {planner::ShapeFigures{"tiny", 1, 0, 0, 0, 0, pts[0].measured_s / pts[0].planned_s, 1}};
  pts = plan_against(m, run.csv_path);
  EXPECT_NEAR(pts[0].planned_s, pts[0].measured_s, 1e-9 * pts[0].measured_s);
  EXPECT_NEAR(pts[0].error(), 0, 1e-9);
  // Not a sweep CSV; no ok rows.
  const std::string other = (d / "other.csv").string();
  std::ofstream(other) << "a,b\n1,2\n";
  EXPECT_THROW(plan_against(m, other), InputError);
  const std::string empty = (d / "empty.csv").string();
  {
    std::ifstream in(run.csv_path);
    std::string header;
    std::getline(in, header);
    std::ofstream(empty) << header << "\n";
  }
  try {
    plan_against(m, empty);
    ADD_FAILURE() << "a sweep CSV without ok rows was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("no ok sweep rows"), std::string::npos) << e.what();
  }
}

TEST(SweepPlan, EveryOkPointGetsAMatchingValidPlanRow) {
  const fs::path d = fresh_dir("rows");
  SweepRun run;
  run.csv_path = (d / "sweep.csv").string();
  run.plan_csv_path = (d / "plan.csv").string();
  run.meta.run_id = "test-run";
  run.meta.backend = "local";
  ASSERT_EQ(run_sweep(tiny({"shard=none", "shard=zero2"}, {1, 2}), run).ok, 4);
  EXPECT_EQ(validate_csv_against_schema(run.plan_csv_path, ResultsSchema::builtin()), std::vector<std::string>{});
  const CsvTable s = read_csv(run.csv_path), p = read_csv(run.plan_csv_path);
  ASSERT_EQ(p.rows.size(), 4u);
  const std::vector<std::string> key = {"strategy", "model", "precision", "mesh", "global_batch", "seq_len"};
  auto key_of = [&](const CsvTable& t, size_t i) {
    std::string k;
    for (const auto& col : key) k += t.rows[i][t.column(col)] + "|";
    return k;
  };
  std::map<std::string, size_t> plans;
  for (size_t i = 0; i < p.rows.size(); ++i) {
    plans[key_of(p, i)] = i;
    EXPECT_EQ(p.rows[i][p.column("backend")], "analytic");
    EXPECT_GT(std::stod(p.rows[i][p.column("est_tokens_per_s")]), 0);
    EXPECT_GT(std::stoll(p.rows[i][p.column("mem_total")]), 0);
    // The shape's single-rank step was measured and scales compute.
    const std::string why = p.rows[i][p.column("reason")];
    EXPECT_NE(why.find("a measured single-rank step of the shape"), std::string::npos) << why;
    // Two ranks on two cores or more: the step was also measured as two
    // copies side by side, and the replicas pay it.
    if (p.rows[i][p.column("world")] == "2" && std::thread::hardware_concurrency() >= 2) {
      EXPECT_NE(why.find("for 2 ranks computing at once (the single-rank step ran x "), std::string::npos) << why;
    }
    EXPECT_NE(why.find("its LayerNorms and residual adds at "), std::string::npos) << why;
  }
  for (size_t i = 0; i < s.rows.size(); ++i) {
    auto it = plans.find(key_of(s, i));
    ASSERT_NE(it, plans.end()) << key_of(s, i);
    EXPECT_EQ(p.rows[it->second][p.column("config_hash")], s.rows[i][s.column("config_hash")]);
  }
}

// A sweep that measures the shape's single-rank point itself (dp1, no
// sharding, in its rounds) calibrates compute_scale with that row, so the
// point's own plan row is its measured step time; shard=zero2 at dp1 is
// another point (and its row says so only through the plan's own figures).
TEST(SweepPlan, TheSweepsOwnSingleRankPointIsTheCalibrationStep) {
  const fs::path d = fresh_dir("own_step");
  SweepRun run;
  run.csv_path = (d / "sweep.csv").string();
  run.plan_csv_path = (d / "plan.csv").string();
  run.meta.run_id = "test-run";
  run.meta.backend = "local";
  SweepConfig c = tiny({"shard=none", "shard=zero2"}, {1});
  c.steps = 4;
  c.rounds = 2;
  ASSERT_EQ(run_sweep(c, run).ok, 2);
  const CsvTable s = read_csv(run.csv_path), p = read_csv(run.plan_csv_path);
  ASSERT_EQ(s.rows[0][s.column("strategy")], "shard=none");
  ASSERT_EQ(p.rows[0][p.column("strategy")], "shard=none");
  EXPECT_NEAR(std::stod(p.rows[0][p.column("est_step_time_s")]), std::stod(s.rows[0][s.column("step_time_s")]),
              1e-9 * std::stod(s.rows[0][s.column("step_time_s")]));
  // The zero2 row's plan uses the same scale: at one rank it plans the same
  // step plus its buffers (dp::local_traffic_bytes) at their own rate.
  const double z2 = std::stod(p.rows[1][p.column("est_step_time_s")]),
               ddp = std::stod(p.rows[0][p.column("est_step_time_s")]);
  EXPECT_GT(z2, ddp);
  EXPECT_NEAR(z2 - ddp,
              std::stod(p.rows[1][p.column("est_memory_s")]) - std::stod(p.rows[0][p.column("est_memory_s")]),
              1e-9 * ddp);
  EXPECT_NE(p.rows[1][p.column("reason")].find("the data-parallel buffers at "), std::string::npos);
}

// Peaks restart after warm-up; what a step holds is still counted, so the
// measured peaks do not depend on how many warm-up steps ran.
TEST(SweepPlan, MemoryPeaksCoverTheMeasuredStepsOnly) {
  SweepPoint p = make_point("shard=zero2", "dp2", "tiny", "fp32", "weak", 1);
  const PointResult none = run_point(tiny({"shard=zero2"}, {2}, 0), p, 1e9);
  const PointResult two = run_point(tiny({"shard=zero2"}, {2}, 2), p, 1e9);
  ASSERT_EQ(none.status, "ok") << none.reason;
  ASSERT_EQ(two.status, "ok") << two.reason;
  EXPECT_EQ(none.mem_total, two.mem_total);
  for (int t = 0; t < 6; ++t) EXPECT_EQ(none.mem[t], two.mem[t]) << "tag " << t;
}

// The vendor's figure: each measured series re-planned beyond the measured worlds.
TEST(SweepPlan, ExtrapolatedRowsContinueEachSeries) {
  const fs::path d = fresh_dir("extrapolate");
  SweepRun run;
  run.csv_path = (d / "sweep.csv").string();
  run.plan_csv_path = (d / "plan.csv").string();
  run.meta.run_id = "test-run";
  run.meta.backend = "local";
  SweepConfig c = tiny({"shard=none", "shard=zero3"}, {1, 2});
  c.extrapolate = {2, 64};  // 2 is measured: nothing to extrapolate there
  ASSERT_EQ(run_sweep(c, run).ok, 4);
  EXPECT_EQ(validate_csv_against_schema(run.plan_csv_path, ResultsSchema::builtin()), std::vector<std::string>{});
  const CsvTable p = read_csv(run.plan_csv_path);
  ASSERT_EQ(p.rows.size(), 6u);  // 4 measured points + 2 series at 64 ranks
  std::map<std::string, double> at64;
  for (const auto& row : p.rows) {
    if (row[p.column("world")] != "64") continue;
    EXPECT_EQ(row[p.column("status")], "ok");
    EXPECT_EQ(row[p.column("mesh")], "dp64");
    EXPECT_EQ(row[p.column("global_batch")], "128");  // weak: 2 sequences per replica
    EXPECT_NE(row[p.column("reason")].find("extrapolated from 2 measured ranks"), std::string::npos);
    EXPECT_GT(std::stod(row[p.column("est_tokens_per_s")]), 0);
    at64[row[p.column("strategy")]] = std::stod(row[p.column("comm_dp_bytes")]);
  }
  ASSERT_EQ(at64.size(), 2u);
  // ZeRO-3 gathers parameters every step: at 64 ranks it plans more
  // data-parallel traffic than DDP's all-reduce (here 2.9x). Not its throughput:
  // each series is scaled by its own measured step, and on this machine
  // the two 64-rank figures lie within the measurements' noise (seen 3%
  // apart either way).
  EXPECT_GT(at64["shard=zero3"], 1.4 * at64["shard=none"]);
}

TEST(SweepPlan, ExtrapolationRejectsWhatCannotScaleAndUsesAProfile) {
  SweepConfig c = tiny({"shard=none"}, {1});
  MeasuredPoint m{make_point("shard=none,schedule=1f1b", "dp2.pp2", "tiny", "fp32", "weak", 2), PointResult{}, RunMeta{}};
  m.result.global_batch = 8;
  m.result.seq = 16;
  LocalHardware h;
  h.peak_flops_per_rank = 20e9;
  h.copy_GBps = 5;
  h.latency_us = 30;
  h.cores = 2;
  c.extrapolate = {5, 16};
  std::vector<PlanRow> rows = extrapolated_plan_rows(c, {m}, h, {});
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].meta.status, "rejected");  // 5 ranks: pp2 does not divide it
  EXPECT_NE(rows[0].meta.reason.find("not a multiple of the 2 ranks"), std::string::npos) << rows[0].meta.reason;
  EXPECT_EQ(rows[1].meta.status, "ok");
  EXPECT_EQ(rows[1].meta.mesh, "dp8.pp2");
  EXPECT_NE(rows[1].meta.reason.find("one rank per core, 2 per node"), std::string::npos) << rows[1].meta.reason;
  // This machine's figures: no profile named; the sweep plans no planner-only option.
  EXPECT_EQ(*rows[1].values.find("machine"), "");
  EXPECT_EQ(*rows[1].values.find("plan_options"), "");
  // A machine profile: its hardware, its name in the reason; an A100 plans
  // faster than this machine's cores at the same 16 ranks (not by its FLOP/s:
  // tiny's kernels are shorter than the host's 4 us to issue each, and its
  // collectives pay NCCL's per-step latency, so the A100's step is host- and
  // latency-bound).
  auto tokens = [](const PlanRow& r) { return std::stod(*r.values.find("est_tokens_per_s")); };
  const double local16 = tokens(rows[1]);
  c.machine = "a100";
  c.extrapolate = {16};
  rows = extrapolated_plan_rows(c, {m}, h, {});
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].meta.status, "ok");
  EXPECT_NE(rows[0].meta.reason.find("machine profile a100"), std::string::npos) << rows[0].meta.reason;
  EXPECT_EQ(*rows[0].values.find("machine"), "a100");  // sweep.machine as given
  EXPECT_GT(tokens(rows[0]), local16);
}

}  // namespace
}  // namespace pb::sweep
