// The planner against the papers it cites: Megatron-LM's FLOPs formula,
// ZeRO's model-state bytes, Korthikanti et al.'s activation bytes, and the
// pipeline bubble (p-1)/m; plus the 1T-parameter / thousands-of-ranks scale.
#include "suites/planner/planner.h"
#include "suites/planner/machine.h"
#include "suites/planner/plan_output.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include <mutex>

#include "harness/comm/runner.h"
#include "harness/status.h"
#include "impl/data_parallel/strategy.h"
#include "impl/expert_parallel/strategy.h"
#include "impl/pipeline/strategy.h"
#include "impl/tensor_parallel/runner.h"
#include "impl/tensor_parallel/strategy.h"
#include "impl/pipeline/simulator.h"
#include "reference/device_testing.h"
#include "reference/layout.h"
#include "reference/runner.h"

namespace pb::planner {
namespace {

// F = 96 B s l h^2 (1 + s/(6h) + V/(16 l h)) checked exactly in integers:
// F * 48 l h == 96 B s l h^2 (48 l h + 8 l s + 3 V).
TEST(Planner, FlopsEqualMegatronFormulaExactly) {
  for (const char* name : {"gpt2-124m", "gpt2-350m", "gpt-1.3b", "gpt-7b", "gpt3-175b", "megatron-1t"}) {
    const ModelConfig m = planner_model(name);
    for (int64_t B : {1, 8, 512, 3072}) {
      for (int64_t s : {int64_t(128), int64_t(m.maxT)}) {
        const u128 l = u128(m.L), h = u128(m.C), V = u128(m.V), b = u128(B), S = u128(s);
        const Flops f = iteration_flops(m, B, s, Recompute::full);
        EXPECT_TRUE(f.hardware * 48 * l * h == 96 * b * S * l * h * h * (48 * l * h + 8 * l * S + 3 * V))
            << name << " B=" << B << " s=" << s;
        // Without recomputation: 72 B s l h^2 (1 + s/(6h) + V/(12 l h)).
        EXPECT_TRUE(f.model * 12 * l * h == 72 * b * S * l * h * h * (12 * l * h + 2 * l * S + V)) << name;
        EXPECT_TRUE(iteration_flops(m, B, s, Recompute::none).hardware == f.model);
        EXPECT_TRUE(iteration_flops(m, B, s, Recompute::selective).hardware == f.model + 4 * b * S * S * l * h);
      }
    }
  }
}

TEST(Planner, ModelFlopsAgreeWithReference) {
  const ModelConfig m = planner_model("gpt2-124m");
  const double ref = model_flops_per_step(m, 16, 1024);
  EXPECT_NEAR(to_double(iteration_flops(m, 16, 1024, Recompute::none).model), ref, 1e-12 * ref);
}

TEST(Planner, NamedShapesAndParamCounts) {
  EXPECT_EQ(planner_model("gpt2-124m").num_params(), 124'439'808);
  const ModelConfig t = planner_model("1T");
  EXPECT_EQ(t.L, 128);
  EXPECT_EQ(t.C, 25600);
  EXPECT_EQ(t.NH, 160);
  EXPECT_NEAR(double(t.num_params()), 1.008e12, 0.002e12);  // Narayanan et al. Table 1: 1008B
  EXPECT_NEAR(double(planner_model("175b").num_params()), 174.6e9, 0.2e9);
  EXPECT_THROW(planner_model("gpt-5"), InputError);
}

TEST(Planner, RankUnitsPartitionTheModel) {
  const ModelConfig m = planner_model("gpt2-124m");
  for (auto [pp, v] : {std::pair{1, 1}, {2, 1}, {5, 1}, {12, 1}, {3, 2}, {2, 3}}) {
    const pipeline::Partition part = pipeline::partition_layers(m.L, pp, v);
    int64_t sum = 0;
    for (int r = 0; r < pp; ++r)
      for (int64_t u : rank_param_units(m, 1, part, r)) sum += u;
    EXPECT_EQ(sum, m.num_params() + (pp > 1 ? int64_t(m.V) * m.C : 0)) << "pp=" << pp << " v=" << v;
  }
  // Over the tp ranks the block's split parts add up; LN and row biases replicate.
  const int64_t C = m.C, t = 4;
  const pipeline::Partition one = pipeline::partition_layers(m.L, 1, 1);
  EXPECT_EQ(rank_param_units(m, 4, one, 0)[1] * t, 12 * C * C + 7 * C + 6 * C * t);
  EXPECT_THROW(rank_param_units(m, 5, one, 0), InputError);
}

// Without a pipeline the planner's comm buffers are the replay the conformance
// engine holds measured runs to, over the reference's own units.
TEST(Planner, CommBuffersAreTheDeclaredReplay) {
  for (auto shard : {dp::Shard::zero1, dp::Shard::zero2, dp::Shard::zero3}) {
    PlanInput in;
    in.shape = planner_model("small");
    in.dp = 4;
    in.shard = shard;
    in.precision = Precision::fp32;
    const PlanResult r = plan(in);
    const ParamLayout layout(*in.shape);
    std::vector<int64_t> units;
    for (int u = 0; u < layout.num_units(); ++u) units.push_back(layout.unit_size(u));
    dp::DataAxis a;
    a.dp = 4;
    a.shard = shard;
    a.precision = Precision::fp32;
    EXPECT_EQ(r.worst.comm, dp::comm_buffer_peak_bytes(units, a)) << dp::shard_name(shard);
    EXPECT_GT(r.worst.comm, 0);
    // The buffer traffic it times is the component's declared one.
    EXPECT_EQ(r.worst.local_traffic,
              dp::local_traffic_bytes(dp::unit_uses(units, a, dp::UnitRoles::model(int(units.size()))), a));
  }
}

// The memory-bound term: the stated per-token counts, split by tp as stated,
// and timed as bytes / bandwidth inside compute.
TEST(Planner, MemoryBoundWorkIsBytesOverBandwidth) {
  const ActivationShape x{2, 64, 128, 4, 1, 1, false, false, 4};
  EXPECT_EQ(layer_traffic_bytes(x), 3 * (10 * 128 + 8 * 128 + 2 * 4 * 64) * 2 * 64 * 4);
  ActivationShape t2 = x;
  t2.tp = 2;
  EXPECT_EQ(layer_traffic_bytes(t2), 3 * (10 * 128 + (8 * 128 + 2 * 4 * 64) / 2) * 2 * 64 * 4);
  EXPECT_EQ(head_traffic_bytes(x, 1000), (6 * 128 + 4 * 1000) * 2 * 64 * 4);
  EXPECT_EQ(embedding_traffic_bytes(x), 5 * 128 * 2 * 64 * 4);

  PlanInput in;
  in.shape = planner_model("small");
  in.precision = Precision::fp32;
  in.microbatch_size = 2;
  in.hw.peak_tflops = 1;
  const PlanResult no_bw = plan(in);
  EXPECT_EQ(no_bw.memory_s, 0);
  in.hw.mem_bw_GBps = 10;
  const PlanResult r = plan(in);
  const ModelConfig& m = *in.shape;
  const ActivationShape s{2, m.maxT, m.C, m.NH, 1, 1, false, false, 4};
  const double opt = double(m.num_params()) * (4 + 4 + 8 + 4 + 8);  // read p, g, m+v; write p, m+v
  const double zeroed = double(m.num_params()) * 4;  // DDP zeroes its gradient (dp::local_traffic_bytes)
  EXPECT_EQ(r.worst.local_traffic, int64_t(zeroed));
  const double bytes = m.L * double(layer_traffic_bytes(s)) + double(embedding_traffic_bytes(s)) +
                       double(head_traffic_bytes(s, m.V)) + opt + zeroed;
  EXPECT_DOUBLE_EQ(r.memory_bytes, bytes);
  EXPECT_DOUBLE_EQ(r.memory_s, bytes / 10e9);
  EXPECT_NEAR(r.compute_s, no_bw.compute_s + r.memory_s, 1e-12);
  // The LayerNorms' and residual adds' bytes at their own rate when given.
  const double shared = m.L * double(layer_shared_traffic_bytes(s));
  EXPECT_EQ(shared, m.L * 3.0 * 10 * m.C * 2 * m.maxT * 4);
  in.hw.shared_mem_bw_GBps = 40;
  const PlanResult split = plan(in);
  EXPECT_DOUBLE_EQ(split.memory_bytes, bytes);
  EXPECT_NEAR(split.memory_s, (bytes - shared) / 10e9 + shared / 40e9, 1e-15);
  // Sequence parallel shards only those: at tp2 it saves half of their time.
  in.hw.bw_intra_GBps = 10;
  in.tp = 2;
  const PlanResult tp = plan(in);
  in.sp = true;
  const PlanResult sp = plan(in);
  const ActivationShape no_sp{2, m.maxT, m.C, m.NH, 2, 1, false, false, 4},
      with_sp{2, m.maxT, m.C, m.NH, 2, 1, true, false, 4};
  const double ends = double(embedding_traffic_bytes(no_sp) - embedding_traffic_bytes(with_sp) +
                             head_traffic_bytes(no_sp, m.V) - head_traffic_bytes(with_sp, m.V));  // the embedding's and final LayerNorm's tokens too
  EXPECT_GT(ends, 0);
  EXPECT_NEAR(tp.memory_s - sp.memory_s, shared / 2 / 40e9 + ends / 10e9, 1e-15);
  in.tp = 1;
  in.sp = false;
  // The optimizer step's bytes at their own rate when given; ZeRO-2 at dp2
  // updates half the parameters, and saves half of that time, not of the
  // average rate's.
  in.hw.optimizer_mem_bw_GBps = 30;
  const PlanResult opt_split = plan(in);
  EXPECT_DOUBLE_EQ(opt_split.memory_bytes, bytes);
  EXPECT_NEAR(opt_split.memory_s, (bytes - shared - opt) / 10e9 + shared / 40e9 + opt / 30e9, 1e-15);
  in.dp = 2;
  in.shard = dp::Shard::zero2;
  const PlanResult z2 = plan(in);
  in.shard = dp::Shard::none;
  const PlanResult ddp = plan(in);
  const double more_buffers = double(z2.worst.local_traffic - ddp.worst.local_traffic);
  EXPECT_GT(more_buffers, 0);
  EXPECT_NEAR(ddp.memory_s - z2.memory_s, opt / 2 / 30e9 - more_buffers / 10e9, 1e-15);
  // The data-parallel buffers at their own rate when given, outside
  // compute_scale (measured as a step streams them).
  in.shard = dp::Shard::zero3;
  in.dp = 1;
  const PlanResult z3 = plan(in);
  in.hw.buffer_mem_bw_GBps = 25;
  in.hw.compute_scale = 1.5;
  const PlanResult z3_own = plan(in);
  const double buf = double(z3.worst.local_traffic);
  EXPECT_NEAR(z3_own.memory_s, z3.memory_s - buf / 10e9 + buf / 25e9, 1e-15);
  EXPECT_NEAR(z3_own.compute_s, (z3.compute_s - buf / 10e9) * 1.5 + buf / 25e9, 1e-12 * z3.compute_s);
  in.hw.compute_scale = 1;
  in.hw.buffer_mem_bw_GBps = -1;
  EXPECT_THROW(plan(in), InputError);
  in.hw.buffer_mem_bw_GBps = std::numeric_limits<double>::quiet_NaN();
  EXPECT_THROW(plan(in), InputError);
  in.hw.buffer_mem_bw_GBps = 0;
  in.shard = dp::Shard::none;
  in.hw.optimizer_mem_bw_GBps = -1;
  EXPECT_THROW(plan(in), InputError);
  in.hw.optimizer_mem_bw_GBps = std::numeric_limits<double>::infinity();
  EXPECT_THROW(plan(in), InputError);
  in.hw.optimizer_mem_bw_GBps = 0;
  in.hw.shared_mem_bw_GBps = -1;
  EXPECT_THROW(plan(in), InputError);
  in.hw.shared_mem_bw_GBps = 0;
  in.hw.mem_bw_GBps = -1;
  EXPECT_THROW(plan(in), InputError);
}

// Pipeline stages differ (the last holds the LM head; 5 blocks over 2 stages
// split 3 + 2): the slowest stage, its GEMMs and memory-bound work together,
// sets the pace. Its FLOPs (stage_flops, which add up to iteration_flops) at
// the per-rank rate plus its own bytes over the bandwidth is the compute; no
// pipeline is the whole model's over the ranks, as before.
TEST(Planner, TheSlowestPipelineStageSetsThePace) {
  ModelConfig m = planner_model("small");
  m.L = 5;
  for (Recompute rc : {Recompute::none, Recompute::selective, Recompute::full}) {
    const Flops all = iteration_flops(m, 8, 64, rc);
    const Flops first = stage_flops(m, 8, 64, rc, 3, false), last = stage_flops(m, 8, 64, rc, 2, true);
    EXPECT_TRUE(first.hardware + last.hardware == all.hardware);
    EXPECT_TRUE(first.model + last.model == all.model);
  }
  PlanInput in;
  in.shape = m;
  in.precision = Precision::fp32;
  in.microbatch_size = 2;
  in.global_batch = 8;
  in.pp = 2;
  in.hw.peak_tflops = 0.05;
  in.hw.mem_bw_GBps = 10;
  in.hw.bw_intra_GBps = in.hw.bw_inter_GBps = 5;
  const PlanResult r = plan(in);
  ASSERT_EQ(r.stages.size(), 2u);
  const double per_stage_rate = 0.05e12;  // gemm_efficiency 1, one rank per stage
  double slowest = 0;
  for (const auto& [blocks, head] : {std::pair<int64_t, bool>{3, false}, {2, true}}) {
    const double flops = to_double(stage_flops(m, 8, 64, Recompute::none, blocks, head).hardware);
    const ActivationShape x{2, 64, m.C, m.NH, 1, 1, false, false, 4};
    const double opt = double(r.stages[head ? 1 : 0].optimizer) / 8 * (4 + 4 + 8 + 4 + 8);
    const double zeroed = double(r.stages[head ? 1 : 0].grads);  // DDP zeroes its gradient once
    EXPECT_EQ(r.stages[head ? 1 : 0].local_traffic, r.stages[head ? 1 : 0].grads);
    const double bytes = 4 * (double(blocks) * double(layer_traffic_bytes(x)) +
                              (head ? double(head_traffic_bytes(x, m.V)) : double(embedding_traffic_bytes(x)))) +
                         opt + zeroed;
    slowest = std::max(slowest, flops / per_stage_rate + bytes / 10e9);
  }
  EXPECT_NEAR(r.compute_s, slowest, 1e-12 * slowest);
  EXPECT_GT(r.compute_s, r.hardware_flops / (2 * per_stage_rate) + r.memory_s * 0.999);  // not the average stage
  in.pp = 1;
  in.global_batch = 2;
  const PlanResult one = plan(in);
  EXPECT_NEAR(one.compute_s, one.hardware_flops / per_stage_rate + one.memory_s, 1e-12 * one.compute_s);
}

// A measured attention core takes the place of its FLOPs and softmax traffic:
// per block and microbatch its forward (again under recomputation) and its
// backward, scaled by compute_scale like the rest; the cp group's comm is
// inside its time. Without it, Ulysses' all-to-alls are exposed even with
// overlap on (each is waited for at once) while the ring's sends may hide.
TEST(Planner, AMeasuredAttentionCoreReplacesItsFlops) {
  const ModelConfig m = planner_model("small");  // L4 C128 NH4
  for (Recompute rc : {Recompute::none, Recompute::selective, Recompute::full}) {
    const Flops f = iteration_flops(m, 8, 64, rc);
    const double attn = to_double(attention_core_flops(m, 8, 64, rc, m.L));
    EXPECT_DOUBLE_EQ(attn, (rc == Recompute::none ? 12.0 : 16.0) * 8 * 64 * 64 * m.L * m.C);
    EXPECT_LT(attn, to_double(f.hardware));
  }
  PlanInput in;
  in.shape = m;
  in.precision = Precision::fp32;
  in.microbatch_size = 2;
  in.global_batch = 8;  // 2 microbatches per replica at dp2
  in.dp = 2;
  in.cp = 2;
  in.seq = 64;
  in.overlap = true;
  in.hw.peak_tflops = 0.05;
  in.hw.mem_bw_GBps = 10;
  in.hw.bw_intra_GBps = in.hw.bw_inter_GBps = 5;
  in.hw.latency_us = 2;
  in.hw.compute_scale = 1.25;
  for (Recompute rc : {Recompute::none, Recompute::selective, Recompute::full}) {
    in.recompute = rc;
    in.hw.attention_fwd_s = in.hw.attention_bwd_s = 0;
    const PlanResult flops = plan(in);
    in.hw.attention_fwd_s = 3e-4;
    in.hw.attention_bwd_s = 5e-4;
    const PlanResult timed = plan(in);
    const double rate = 0.05e12 * 4;  // the job's 4 ranks, gemm_efficiency 1
    const double attn_flops = to_double(attention_core_flops(m, 8, 64, rc, m.L));
    const ActivationShape x{2, 64, m.C, m.NH, 1, 2, false, false, 4};
    const double softmax = double(m.L) * 2 * double(layer_softmax_traffic_bytes(x)) *
                           (rc == Recompute::full ? 4.0 / 3 : 1);
    EXPECT_NEAR(timed.memory_bytes, flops.memory_bytes - softmax, 1e-9 * flops.memory_bytes);
    const double core = double(m.L) * 2 * ((rc == Recompute::none ? 1 : 2) * 3e-4 + 5e-4);
    const double expect = ((flops.hardware_flops - attn_flops) / rate + timed.memory_bytes / 10e9 + core) * 1.25;
    EXPECT_NEAR(timed.compute_s, expect, 1e-12 * expect) << recompute_name(rc);
    double cp_s = 0;
    for (const CommRow& c : timed.comm)
      if (c.group == "cp") cp_s += c.time_s;
    EXPECT_GT(cp_s, 0);  // still reported, not added
    EXPECT_LE(timed.exposed_comm_s, flops.exposed_comm_s);
  }
  in.recompute = Recompute::none;
  in.hw.attention_fwd_s = in.hw.attention_bwd_s = 0;
  in.hw.bw_intra_GBps = in.hw.bw_inter_GBps = 0.01;  // slow links: the cp comm outlasts any compute
  in.cp_algo = CpAlgo::ulysses;
  const PlanResult uly = plan(in);
  double a2a = 0;
  for (const CommRow& c : uly.comm)
    if (c.group == "cp") a2a += c.time_s;
  EXPECT_GE(uly.exposed_comm_s, a2a);  // every all-to-all exposed
  for (double bad : {-1.0, std::nan(""), std::numeric_limits<double>::infinity()}) {
    in.hw.attention_fwd_s = bad;
    EXPECT_THROW(plan(in), InputError);
    in.hw.attention_fwd_s = 0;
    in.hw.attention_bwd_s = bad;
    EXPECT_THROW(plan(in), InputError);
    in.hw.attention_bwd_s = 0;
  }
}

// A measured step over the modeled one scales compute (GEMMs and memory-bound
// work alike, and so the bubble and what overlap can hide), nothing else; it
// must be a finite number > 0.
TEST(Planner, ComputeScaleScalesComputeOnly) {
  PlanInput in;
  in.shape = planner_model("small");
  in.precision = Precision::fp32;
  in.microbatch_size = 2;
  in.global_batch = 8;
  in.pp = 2;
  in.dp = 2;
  in.shard = dp::Shard::zero3;
  in.hw.peak_tflops = 0.05;
  in.hw.mem_bw_GBps = 10;
  in.hw.bw_intra_GBps = in.hw.bw_inter_GBps = 5;
  in.hw.latency_us = 3;
  const PlanResult one = plan(in);
  in.hw.compute_scale = 1.25;
  const PlanResult scaled = plan(in);
  EXPECT_NEAR(scaled.compute_s, 1.25 * one.compute_s, 1e-12 * one.compute_s);
  EXPECT_NEAR(scaled.bubble_s, 1.25 * one.bubble_s, 1e-12 * one.bubble_s);
  EXPECT_DOUBLE_EQ(scaled.memory_s, one.memory_s);  // the bytes over the bandwidth, as before
  EXPECT_DOUBLE_EQ(scaled.comm_s, one.comm_s);
  EXPECT_NEAR(scaled.step_s, scaled.compute_s + scaled.bubble_s + scaled.exposed_comm_s, 1e-15);
  for (double bad : {0.0, -1.0, std::numeric_limits<double>::infinity(), std::nan("")}) {
    in.hw.compute_scale = bad;
    EXPECT_THROW(plan(in), InputError) << bad;
  }
}

// Ranks time-sharing cores: the bubble is what the critical path at a whole
// core (compute x share x (1 + bubble / ideal)) exceeds the shared compute by,
// none when the share's compute is longer; a share outside (0, 1] is refused.
TEST(Planner, TimeSharedCoresHideTheBubble) {
  PlanInput in;
  in.shape = planner_model("small");
  in.precision = Precision::fp32;
  in.microbatch_size = 2;
  in.global_batch = 4;  // 2 microbatches over pp 4: a large bubble
  in.pp = 4;
  in.hw.peak_tflops = 0.05;
  in.hw.bw_intra_GBps = in.hw.bw_inter_GBps = 5;
  const PlanResult whole = plan(in);
  ASSERT_GT(whole.bubble_over_ideal, 1);
  EXPECT_NEAR(whole.bubble_s, whole.compute_s * whole.bubble_over_ideal, 1e-15);
  in.hw.core_share = 0.5;
  const PlanResult half = plan(in);
  EXPECT_NEAR(half.bubble_s, half.compute_s * 0.5 * (1 + half.bubble_over_ideal) - half.compute_s, 1e-15);
  in.hw.core_share = 0.2;  // five ranks per core: the shared compute is the longer
  EXPECT_EQ(plan(in).bubble_s, 0);
  for (double bad : {0.0, -0.5, 1.5, std::nan("")}) {
    in.hw.core_share = bad;
    EXPECT_THROW(plan(in), InputError) << bad;
  }
}

// The table is read in log(compute) between its points and held at its ends.
TEST(Planner, AsyncCallCostInterpolatesInLogCompute) {
  const std::vector<AsyncCallCost> t{{100, 50}, {1000, 200}, {4000, 300}};
  EXPECT_EQ(async_call_cost_us({}, 500), 0);
  EXPECT_DOUBLE_EQ(async_call_cost_us(t, 10), 50);
  EXPECT_DOUBLE_EQ(async_call_cost_us(t, 100), 50);
  EXPECT_NEAR(async_call_cost_us(t, std::sqrt(1e5)), 125, 1e-9);  // halfway in log
  EXPECT_DOUBLE_EQ(async_call_cost_us(t, 1000), 200);
  EXPECT_NEAR(async_call_cost_us(t, 2000), 250, 1e-9);
  EXPECT_DOUBLE_EQ(async_call_cost_us(t, 1e6), 300);
}

// On time-shared cores each collective a rank issues without waiting (ZeRO-3's
// prefetched gathers, DDP's overlapped buckets) costs the table's figure at
// the step's compute per such call; with whole cores, or gathers waited for at
// once (prefetch 0), nothing. A table out of order or not finite is refused.
TEST(Planner, AsyncCallsCostOnTimeSharedCoresOnly) {
  PlanInput in;
  in.shape = planner_model("small");
  in.precision = Precision::fp32;
  in.microbatch_size = 4;
  in.global_batch = 32;  // 2 microbatches per rank
  in.dp = 4;
  in.shard = dp::Shard::zero3;
  in.hw.peak_tflops = 0.05;
  in.hw.bw_intra_GBps = in.hw.bw_inter_GBps = 5;
  in.hw.async_call_cost = {{100, 50}, {1000, 200}, {4000, 300}};
  const PlanResult whole = plan(in);
  int64_t gathers = 0;
  for (const CommRow& c : whole.comm)
    if (c.op == "all_gather" && c.group == "dp" && c.phase != "step") gathers += c.calls;
  ASSERT_GT(gathers, 0);
  EXPECT_EQ(whole.async_calls, gathers);
  EXPECT_EQ(whole.async_cost_s, 0) << "whole cores";
  in.hw.core_share = 0.5;
  const PlanResult shared = plan(in);
  const double per_call = async_call_cost_us(in.hw.async_call_cost, shared.compute_s * 1e6 / double(gathers));
  EXPECT_GT(per_call, 0);
  EXPECT_NEAR(shared.async_cost_s, double(gathers) * per_call * 1e-6, 1e-15);
  in.hw.async_call_cost.clear();
  const PlanResult untaxed = plan(in);
  EXPECT_NEAR(shared.exposed_comm_s - untaxed.exposed_comm_s, shared.async_cost_s, 1e-12);
  EXPECT_NEAR(shared.step_s - untaxed.step_s, shared.async_cost_s, 1e-12);
  in.hw.async_call_cost = {{100, 50}, {1000, 200}, {4000, 300}};
  in.prefetch = 0;
  EXPECT_EQ(plan(in).async_calls, 0);
  // DDP: the buckets reduced under backward, only when overlapped.
  in.shard = dp::Shard::none;
  in.overlap = true;
  const PlanResult ddp = plan(in);
  EXPECT_GT(ddp.async_calls, 0);
  EXPECT_GT(ddp.async_cost_s, 0);
  in.overlap = false;
  EXPECT_EQ(plan(in).async_calls, 0);
  for (const std::vector<AsyncCallCost>& bad : std::vector<std::vector<AsyncCallCost>>{
           {{1000, 50}, {100, 20}}, {{100, 50}, {100, 60}}, {{0, 50}}, {{100, -1}}, {{100, std::nan("")}},
           {{std::numeric_limits<double>::infinity(), 1}}}) {
    in.hw.async_call_cost = bad;
    EXPECT_THROW(plan(in), InputError);
  }
  in.hw.async_call_cost.clear();
  in.prefetch = -1;
  EXPECT_THROW(plan(in), InputError);
}

// Korthikanti et al. 2022 Table 2 (16-bit activations, dropout).
TEST(Planner, ActivationsMatchKorthikanti) {
  const int64_t s = 2048, b = 4, h = 12288, a = 96, sbh = s * b * h;
  for (int t : {1, 2, 8}) {
    ActivationShape x{b, s, h, a, t, 1, false, true, 2};
    // sbh(10 + 24/t + 5as/(ht)) multiplied through by t.
    EXPECT_EQ(layer_activation_bytes(x, Recompute::none) * t, sbh * (10 * t + 24) + 5 * a * s * s * b);
    EXPECT_EQ(layer_activation_bytes(x, Recompute::selective) * t, sbh * (10 * t + 24));
    EXPECT_EQ(layer_activation_bytes(x, Recompute::full), 2 * sbh);
    x.sp = true;  // sbh/t (34 + 5as/h)
    EXPECT_EQ(layer_activation_bytes(x, Recompute::none) * t, 34 * sbh + 5 * a * s * s * b);
    EXPECT_EQ(layer_activation_bytes(x, Recompute::selective) * t, 34 * sbh);
    EXPECT_EQ(layer_activation_bytes(x, Recompute::full) * t, 2 * sbh);
  }
  // The canonical model has no dropout: 16e sbh + e as^2b per layer.
  ActivationShape fp32{1, 64, 32, 2, 1, 1, false, false, 4};
  EXPECT_EQ(layer_activation_bytes(fp32, Recompute::none), 64 * 64 * 32 + 4 * 2 * 64 * 64);
}

PlanInput params_only(int64_t psi, int dp, dp::Shard shard) {
  PlanInput in;
  in.params = psi;
  in.dp = dp;
  in.shard = shard;
  in.precision = Precision::bf16_mixed;
  return in;
}

// ZeRO Sec. 3 / Fig. 1 through the planner: 2+2+K, 2+2+K/Nd, 2+(2+K)/Nd, (2+2+K)/Nd.
TEST(Planner, ModelStatesEqualZeroFormulas) {
  for (int64_t psi : {int64_t(7'500'000'000), int64_t(1'000'003), int64_t(1'008'000'000'000)}) {
    for (int nd : {1, 8, 64, 1024}) {
      const int64_t sh = (psi + nd - 1) / nd, full = sh * nd;
      auto total = [&](dp::Shard s) { return plan(params_only(psi, nd, s)).worst; };
      EXPECT_EQ(total(dp::Shard::none).params + total(dp::Shard::none).grads + total(dp::Shard::none).optimizer,
                16 * psi);
      const StageMemory z1 = total(dp::Shard::zero1), z2 = total(dp::Shard::zero2), z3 = total(dp::Shard::zero3);
      EXPECT_EQ(z1.params + z1.grads + z1.optimizer, 2 * full + 2 * full + 12 * sh);
      EXPECT_EQ(z2.params + z2.grads + z2.optimizer, 2 * full + 14 * sh);
      EXPECT_EQ(z3.params + z3.grads + z3.optimizer, 16 * sh);
    }
  }
}

// The planner's bubble is the pipeline's declared one, which equals the
// simulator's on the generated schedules.
TEST(Planner, BubbleEqualsSimulator) {
  using pipeline::ScheduleKind;
  struct Case { ScheduleKind kind; int pp, v; int64_t batch; };
  for (const Case c : {Case{ScheduleKind::gpipe, 4, 1, 8}, Case{ScheduleKind::one_f_one_b, 4, 1, 16},
                       Case{ScheduleKind::interleaved, 4, 3, 8}, Case{ScheduleKind::zb_h1, 3, 1, 6},
                       Case{ScheduleKind::one_f_one_b, 6, 1, 5}}) {
    PlanInput in;
    in.shape = planner_model("gpt2-124m");
    in.pp = c.pp;
    in.virtual_stages = c.v;
    in.schedule = c.kind;
    in.global_batch = c.batch;
    const PlanResult r = plan(in);
    EXPECT_EQ(r.microbatches, c.batch);
    const pipeline::ScheduleConfig cfg{c.pp, int(c.batch), c.v, 1};
    const pipeline::SimResult sim = pipeline::simulate(pipeline::make_schedule(c.kind, cfg), {1, 1, 1, 0});
    EXPECT_NEAR(r.bubble_over_ideal, sim.bubble_over_ideal, 1e-12) << pipeline::schedule_name(c.kind);
    if (c.kind == ScheduleKind::one_f_one_b || c.kind == ScheduleKind::gpipe) {
      EXPECT_DOUBLE_EQ(r.bubble_over_ideal, double(c.pp - 1) / double(c.batch));
    }
  }
}

TEST(Planner, TrillionParametersOnThousandsOfRanks) {
  PlanInput in;
  in.shape = planner_model("megatron-1t");
  in.tp = 8;
  in.pp = 64;
  in.dp = 96;  // 49152 ranks
  in.sp = true;
  in.shard = dp::Shard::zero1;
  in.recompute = Recompute::selective;
  in.global_batch = 3072 * 16;
  in.ranks_per_node = 8;
  in.hw.peak_tflops = 312;
  in.hw.bw_intra_GBps = 300;
  in.hw.bw_inter_GBps = 25;
  in.hw.latency_us = 5;
  const PlanResult r = plan(in);
  EXPECT_EQ(r.world, 8 * 64 * 96);
  EXPECT_TRUE(r.timed);
  EXPECT_GT(r.step_s, r.compute_s);
  EXPECT_GT(r.mfu, 0.0);
  EXPECT_LE(r.mfu, r.hfu);
  EXPECT_LE(r.hfu, 1.0);
  EXPECT_GT(r.worst.activations, 0);
  bool has_tp = false, has_pp = false, has_dp = false;
  for (const CommRow& c : r.comm) {
    has_tp |= c.group == "tp" && !c.inter_node;
    has_pp |= c.group == "pp" && c.inter_node;
    has_dp |= c.group == "dp" && c.inter_node;
    EXPECT_GT(c.time_s, 0.0) << c.group;
  }
  EXPECT_TRUE(has_tp && has_pp && has_dp);
}

TEST(Planner, OverlapHidesDataParallelComm) {
  PlanInput in = params_only(124'000'000, 8, dp::Shard::zero2);
  in.global_batch = 64;
  in.hw.peak_tflops = 100;
  in.hw.bw_intra_GBps = 50;
  in.hw.bw_inter_GBps = 10;
  in.hw.latency_us = 2;
  const PlanResult a = plan(in);
  in.overlap = true;
  const PlanResult b = plan(in);
  EXPECT_NEAR(a.exposed_comm_s, a.comm_s, 1e-15);
  EXPECT_LT(b.exposed_comm_s, a.exposed_comm_s);
}

// A mixture-of-experts model under data parallel: the units are the layout's
// (every expert of an MoE block), and one rank's activations and workspace
// are what its runner allocates, with the capacity scope of global capacity
// over the dp ranks; tp with sp, and cp, with MoE are refused.
TEST(Planner, MixtureOfExpertsUnderDataParallelIsTheRunners) {
  const ModelConfig m = named_model("tiny-moe");
  const ParamLayout l(m);
  const std::vector<int64_t> units = rank_param_units(m, 1, pipeline::partition_layers(m.L, 1, 1), 0);
  ASSERT_EQ(int(units.size()), l.num_units());
  for (int u = 0; u < l.num_units(); ++u) EXPECT_EQ(units[size_t(u)], l.unit_size(u)) << "unit " << u;
  for (int dp : {1, 2, 4})
    for (MoeCapacity cap : {MoeCapacity::global, MoeCapacity::local}) {
      PlanInput in;
      in.shape = m;
      in.shape->moe.capacity = cap;
      in.dp = dp;
      in.seq = 16;
      in.microbatch_size = 4;
      in.global_batch = 4 * dp;
      in.precision = Precision::fp32;
      const PlanResult r = plan(in);
      const int64_t scope = cap == MoeCapacity::global && dp > 1 ? int64_t(4) * 16 * dp : 0;
      const MarkovSource data(m.V, 1);
      MemoryTracker mt;
      MoeScope none;
      const ParamLayout lay(*in.shape);
      MicrobatchRunner<float> runner(lay, data, &mt, 4, 16, none);
      // The runner here has no group: its capacity scope is its own tokens; the
      // plan's is the scope's. Equal at dp 1 or local capacity; otherwise the
      // declared bytes are the ones for the scope (moe.h moe_activation_bytes).
      if (scope == 0) {
        EXPECT_EQ(r.worst.activations, int64_t(mt.peak(MemTag::activations))) << dp;
        EXPECT_EQ(r.worst.workspace, int64_t(mt.peak(MemTag::workspace))) << dp;
      }
      EXPECT_EQ(r.worst.workspace, runner_workspace_bytes(*in.shape, 4, 16, Precision::fp32, scope));
      EXPECT_EQ(r.params_total, m.num_params());
    }
  PlanInput t;  // tensor parallel with MoE: without sequence parallel, context parallel or pipeline stages
  t.shape = m;
  t.tp = 2;
  t.sp = true;
  EXPECT_THROW(plan(t), InputError);
  t.sp = false;
  t.cp = 2;
  EXPECT_THROW(plan(t), InputError);
}

// The run spec of a plan at pp 1 (one microbatch per step, two steps): its
// strategy's ranks, run on the local backend, allocate per tag (device peaks
// after two steps, max over ranks) what the plan's worst rank holds:
// params, grads, optimizer, activations, comm buffers and workspace. A plan
// on a GPU profile: each rank on a stand-in device (reference/device_testing.h).
void expect_plan_is_the_ranks(const PlanResult& r, const PlanInput& in, const Strategy& st, const std::string& where) {
  RunSpec s;
  s.train.model = *in.shape;
  s.train.precision = in.precision;
  s.train.seq = int(in.seq);
  s.train.batch = int(in.global_batch);
  s.train.steps = 2;
  s.mesh.dp = in.dp;
  s.mesh.ep = in.ep;
  s.mesh.tp = in.tp;
  s.data.shard = in.shard;
  s.data.offload = in.offload;
  validate(s);
  st.validate(s);
  const bool on_device = !in.hw.host_kernels;
  if (on_device) s.train.device = Device::cuda;
  std::mutex mu;
  int64_t peak[kNumMemTags] = {}, host_optimizer = 0;
  testing::StandInDevices devices;
  run_local(s.world(), [&](Communicator& w) {
    const std::shared_ptr<TrainDevice> device = on_device ? devices.open() : nullptr;  // outlives the rank
    std::unique_ptr<Rank> rank = st.make_rank(s, w, device.get());
    rank->step();
    rank->step();
    std::lock_guard lk(mu);
    for (int t = 0; t < kNumMemTags; ++t)
      peak[t] = std::max(peak[t], int64_t(rank->memory().peak(MemTag(t), Place::device)));
    host_optimizer = std::max(host_optimizer, int64_t(rank->memory().peak(MemTag::optimizer, Place::host)));
  });
  EXPECT_EQ(r.worst.params, peak[int(MemTag::params)]) << where;
  EXPECT_EQ(r.worst.grads, peak[int(MemTag::grads)]) << where;
  EXPECT_EQ(r.worst.optimizer, peak[int(MemTag::optimizer)]) << where;
  EXPECT_EQ(r.worst.activations, peak[int(MemTag::activations)]) << where;
  EXPECT_EQ(r.worst.comm, peak[int(MemTag::comm)]) << where;
  EXPECT_EQ(r.worst.workspace, peak[int(MemTag::workspace)]) << where;
  EXPECT_EQ(r.worst.optimizer_host, host_optimizer) << where;
}

// A small MoE or dense plan over dp x ep (x tp): sequences of 16 tokens,
// `micro` sequences per microbatch, one microbatch per dp rank.
struct SmallCase { int dp, ep; dp::Shard shard; const char* model; Precision p; };
PlanInput small_input(const SmallCase& c, int micro, int tp = 1) {
  PlanInput in;
  in.shape = named_model(c.model);
  in.dp = c.dp;
  in.ep = c.ep;
  in.tp = tp;
  in.shard = c.shard;
  in.seq = 16;
  in.microbatch_size = micro;
  in.global_batch = micro * c.dp;
  in.precision = c.p;
  return in;
}

// ZeRO-Offload on GPUs: the host holds the optimizer's state and its copies
// of the owned gradients and parameters; the plan on h100 is what the ranks
// on stand-in devices hold, tag by tag (host optimizer too), data parallel
// and expert parallel; the copies are what it adds to the CPU's plan.
TEST(Planner, OffloadOnAGpuIsTheRanks) {
  using Case = SmallCase;
  const Case cases[] = {{2, 1, dp::Shard::zero2, "tiny", Precision::fp32},
                        {2, 1, dp::Shard::zero3, "tiny", Precision::bf16_mixed},
                        {2, 2, dp::Shard::zero2, "tiny-moe", Precision::bf16_mixed}};
  for (const Case& c : cases) {
    PlanInput in = small_input(c, 2);
    in.offload = dp::Offload::optimizer;
    const PlanResult cpu = plan(in);
    in.hw = hardware_for(load_machine("h100"), c.p);
    const PlanResult g = plan(in);
    const std::string where = std::string(c.model) + " dp" + std::to_string(c.dp) + ".ep" + std::to_string(c.ep) +
                              " " + std::string(dp::shard_name(c.shard)) + " + offload on h100";
    expect_plan_is_the_ranks(g, in, c.ep > 1 ? ep::strategy() : dp::strategy(), where);
    EXPECT_EQ(g.worst.optimizer, 0) << where;
    const dp::BytesPerParam b = dp::bytes_per_param(c.p);
    EXPECT_EQ(g.worst.optimizer_host, cpu.worst.optimizer_host / b.optimizer * (b.optimizer + b.param + b.grad))
        << where;
  }
}

// Expert parallel: the plan's per-rank memory is what an expert-parallel
// rank allocates, tag by tag (its peaks after two steps), over data options,
// ep sizes, capacity modes and precisions; ep without MoE, or not dividing
// the experts or dp, is refused.
TEST(Planner, ExpertParallelMemoryIsTheRanks) {
  using Case = SmallCase;
  const Case cases[] = {{2, 2, dp::Shard::none, "tiny-moe", Precision::fp32},
                        {4, 2, dp::Shard::zero3, "tiny-moe", Precision::bf16_mixed},
                        {4, 4, dp::Shard::zero1, "tiny-moe-local", Precision::fp32},
                        {4, 2, dp::Shard::zero2, "tiny-moe-e8-top1", Precision::fp32}};
  for (const Case& c : cases) {
    PlanInput in = small_input(c, 4);
    const PlanResult r = plan(in);
    const std::string where = std::string(c.model) + " dp" + std::to_string(c.dp) + ".ep" + std::to_string(c.ep);
    expect_plan_is_the_ranks(r, in, ep::strategy(), where);
    bool has_ep = false;
    for (const CommRow& row : r.comm) has_ep |= row.group == "ep" && row.bytes > 0;
    EXPECT_TRUE(has_ep) << where;
    // On a GPU: no CPU kernel workspace, the routing state in host memory;
    // the ranks on stand-in devices hold what the plan says.
    in.hw = hardware_for(load_machine("h100"), c.p);
    const PlanResult g = plan(in);
    expect_plan_is_the_ranks(g, in, ep::strategy(), where + " on h100");
    EXPECT_LT(g.worst.activations, r.worst.activations) << where;
  }
  // An ep group of consecutive ranks spans nodes when a node holds fewer.
  PlanInput nodes;
  nodes.shape = named_model("tiny-moe");
  nodes.dp = 4;
  nodes.ep = 4;
  nodes.seq = 16;
  nodes.ranks_per_node = 2;
  for (const CommRow& row : plan(nodes).comm)
    if (row.group == "ep") {
      EXPECT_TRUE(row.inter_node);
    }
  nodes.ranks_per_node = 4;
  for (const CommRow& row : plan(nodes).comm)
    if (row.group == "ep") {
      EXPECT_FALSE(row.inter_node);
    }
  PlanInput bad;
  bad.shape = named_model("tiny");
  bad.dp = 2;
  bad.ep = 2;
  EXPECT_THROW(plan(bad), InputError);  // a dense model
  bad.shape = named_model("tiny-moe");
  bad.ep = 3;
  bad.dp = 3;
  EXPECT_THROW(plan(bad), InputError);  // 3 does not divide 4 experts
  bad.ep = 4;
  bad.dp = 2;
  EXPECT_THROW(plan(bad), InputError);  // 4 does not divide dp 2
}

// Mixture of experts with tensor-parallel experts (x data and expert
// parallel): the plan's per-rank memory is what the tensor-parallel rank
// allocates, tag by tag, and its tp rows carry the experts' all-reduces.
TEST(Planner, MixtureOfExpertsUnderTensorParallelIsTheRanks) {
  using Case = SmallCase;
  const Case cases[] = {{2, 1, dp::Shard::none, "tiny-moe", Precision::fp32},
                        {2, 2, dp::Shard::zero3, "tiny-moe", Precision::bf16_mixed},
                        {4, 2, dp::Shard::zero1, "tiny-moe-local", Precision::fp32}};
  for (const Case& c : cases) {
    PlanInput in = small_input(c, 4, /*tp=*/2);
    const PlanResult r = plan(in);
    const std::string where = std::string(c.model) + " dp" + std::to_string(c.dp) + ".ep" + std::to_string(c.ep) + ".tp2";
    expect_plan_is_the_ranks(r, in, tp::strategy(), where);
    bool tp_rows = false, ep_rows = false;
    for (const CommRow& row : r.comm) {
      tp_rows |= row.group == "tp" && row.bytes > 0;
      ep_rows |= row.group == "ep" && row.bytes > 0;
    }
    EXPECT_TRUE(tp_rows) << where;
    EXPECT_EQ(ep_rows, c.ep > 1) << where;
    in.hw = hardware_for(load_machine("h100"), c.p);  // on stand-in devices
    expect_plan_is_the_ranks(plan(in), in, tp::strategy(), where + " on h100");
  }
}

// Mixture of experts in pipeline stages: the plan's worst rank holds what the
// pipeline executor allocates, tag by tag (model states of both components,
// activations, comm buffers, workspace; peaks after two steps), over schedules, data
// options, ep sizes (1 too: the experts are still a component of their own),
// capacity modes and precisions; and its comm rows name the expert groups.
TEST(Planner, MixtureOfExpertsInPipelineStagesIsTheRanks) {
  struct Case {
    int dp, ep, pp;
    dp::Shard shard;
    pipeline::ScheduleKind kind;
    const char* model;
    Precision p;
  };
  using K = pipeline::ScheduleKind;
  const Case cases[] = {{2, 2, 2, dp::Shard::none, K::one_f_one_b, "tiny-moe", Precision::fp32},
                        {2, 1, 2, dp::Shard::zero3, K::gpipe, "tiny-moe", Precision::bf16_mixed},
                        {4, 2, 2, dp::Shard::zero1, K::interleaved, "tiny-moe-local", Precision::fp32},
                        {2, 2, 4, dp::Shard::zero2, K::one_f_one_b, "tiny-moe-e8-top1", Precision::fp32}};
  for (const Case& c : cases) {
    ModelConfig m = named_model(c.model);
    m.L = 8;
    const int v = c.kind == K::interleaved ? 2 : 1, micro = 2 * c.pp;
    PlanInput in;
    in.shape = m;
    in.dp = c.dp;
    in.ep = c.ep;
    in.pp = c.pp;
    in.schedule = c.kind;
    in.virtual_stages = v;
    in.shard = c.shard;
    in.seq = 16;
    in.microbatch_size = 1;
    in.global_batch = int64_t(micro) * c.dp;
    in.precision = c.p;
    const PlanResult r = plan(in);
    RunSpec s;
    s.train.model = m;
    s.train.precision = c.p;
    s.train.seq = 16;
    s.train.batch = micro * c.dp;
    s.train.microbatches = micro;
    s.train.steps = 2;
    s.mesh.dp = c.dp;
    s.mesh.ep = c.ep;
    s.mesh.pp = c.pp;
    s.pipe.schedule = c.kind;
    s.pipe.virtual_stages = v;
    s.data.shard = c.shard;
    validate(s);
    pipeline::strategy().validate(s);
    std::mutex mu;
    std::vector<std::array<int64_t, kNumMemTags>> peaks(size_t(c.pp));
    run_local(s.world(), [&](Communicator& w) {
      std::unique_ptr<Rank> rank = pipeline::strategy().make_rank(s, w, nullptr);
      rank->step();
      rank->step();
      const int stage = mesh_coord(s.mesh, w.rank()).pp;
      std::lock_guard lk(mu);
      for (int t = 0; t < kNumMemTags; ++t)
        peaks[size_t(stage)][size_t(t)] =
            std::max(peaks[size_t(stage)][size_t(t)], int64_t(rank->memory().peak(MemTag(t), Place::device)));
    });
    const std::string where = std::string(c.model) + " dp" + std::to_string(c.dp) + ".ep" + std::to_string(c.ep) +
                              ".pp" + std::to_string(c.pp) + " " + std::string(pipeline::schedule_name(c.kind));
    for (const StageMemory& st : r.stages) {
      const auto& pk = peaks[size_t(st.stage)];
      EXPECT_EQ(st.params, pk[int(MemTag::params)]) << where << " stage " << st.stage;
      EXPECT_EQ(st.grads, pk[int(MemTag::grads)]) << where << " stage " << st.stage;
      EXPECT_EQ(st.optimizer, pk[int(MemTag::optimizer)]) << where << " stage " << st.stage;
      EXPECT_EQ(st.activations, pk[int(MemTag::activations)]) << where << " stage " << st.stage;
      EXPECT_EQ(st.comm, pk[int(MemTag::comm)]) << where << " stage " << st.stage;
      EXPECT_EQ(st.workspace, pk[int(MemTag::workspace)]) << where << " stage " << st.stage;
    }
    bool ep_rows = false, edp_rows = false;
    for (const CommRow& row : r.comm) {
      ep_rows |= row.group == "ep" && row.bytes > 0;
      edp_rows |= row.group.rfind("edp", 0) == 0 && row.bytes > 0;
    }
    EXPECT_EQ(ep_rows, c.ep > 1) << where;
    EXPECT_EQ(edp_rows, c.dp / c.ep > 1) << where;
  }
  PlanInput bad;
  bad.shape = named_model("tiny-moe");
  bad.shape->L = 8;
  bad.dp = 2;
  bad.ep = 2;
  bad.pp = 2;
  bad.schedule = pipeline::ScheduleKind::zb_h1;
  EXPECT_THROW(plan(bad), InputError);  // zb-h1 would split the MoE backward
  bad.schedule = pipeline::ScheduleKind::one_f_one_b;
  bad.tp = 2;
  EXPECT_THROW(plan(bad), InputError);  // tensor parallel MoE
}

TEST(Planner, BadInputIsInputError) {
  PlanInput in = params_only(1000, 0, dp::Shard::none);
  EXPECT_THROW(plan(in), InputError);
  in.dp = 2;
  in.tp = 2;  // needs a shape
  EXPECT_THROW(plan(in), InputError);
  PlanInput s;
  s.shape = planner_model("gpt2-124m");
  s.dp = 4;
  s.global_batch = 6;
  EXPECT_THROW(plan(s), InputError);
  s.global_batch = 8;
  s.hw.peak_tflops = 10;  // no bandwidth for the dp traffic
  EXPECT_THROW(plan(s), InputError);
}

// plan --machine: the built-in profiles carry their datasheet figures and
// sources; a TOML profile reads strictly; the precision picks the peak.
TEST(Machine, BuiltInProfilesByNameWithSources) {
  ASSERT_EQ(builtin_machines().size(), 5u);
  for (const auto& m : builtin_machines()) {
    EXPECT_GT(m.peak_tflops_bf16, m.peak_tflops_fp32) << m.name;
    EXPECT_GT(m.memory_GB, 0) << m.name;
    EXPECT_EQ(m.ranks_per_node, 8) << m.name;
    EXPECT_NE(m.source.find("datasheet"), std::string::npos) << m.name;
  }
  const MachineProfile a = load_machine("A100");  // case-insensitive
  EXPECT_EQ(a.name, "a100");
  EXPECT_DOUBLE_EQ(hardware_for(a, Precision::bf16_mixed).peak_tflops, 312);
  EXPECT_DOUBLE_EQ(hardware_for(a, Precision::fp32).peak_tflops, 19.5);
  EXPECT_DOUBLE_EQ(hardware_for(load_machine("h100"), Precision::bf16_mixed).peak_tflops, 989.4);
  EXPECT_DOUBLE_EQ(hardware_for(load_machine("h200"), Precision::bf16_mixed).mem_bw_GBps, 4800);
  EXPECT_DOUBLE_EQ(hardware_for(load_machine("mi300x"), Precision::fp64).peak_tflops, 163.4);
  EXPECT_DOUBLE_EQ(hardware_for(load_machine("B200"), Precision::bf16_mixed).peak_tflops, 2250);
  EXPECT_EQ(load_machine("b200").ranks_per_node, 8);
  // A GPU's own name (cudaDeviceProp::name) finds its profile: the MFU peak of a run on it.
  ASSERT_NE(machine_for_device("cuda:0 NVIDIA H100 80GB HBM3"), nullptr);
  EXPECT_EQ(machine_for_device("cuda:0 NVIDIA H100 80GB HBM3")->name, "h100");
  EXPECT_EQ(machine_for_device("cuda:1 NVIDIA A100-SXM4-80GB")->name, "a100");
  EXPECT_EQ(machine_for_device("AMD Instinct MI300X")->name, "mi300x");
  EXPECT_EQ(machine_for_device("cuda:0 NVIDIA GeForce RTX 4090"), nullptr);
  EXPECT_EQ(machine_for_device("cuda:0 NVIDIA A100 80GB PCIe")->name, "a100");  // the same datasheet peaks
  EXPECT_EQ(machine_for_device("cuda:0 NVIDIA H200")->name, "h200");
  EXPECT_EQ(machine_for_device("cuda:0 NVIDIA B200")->name, "b200");
  // Other parts of a chip, with other datasheet peaks: no profile, not the SXM one.
  for (const char* other : {"cuda:0 NVIDIA H100 PCIe", "cuda:0 NVIDIA H100 NVL", "cuda:0 NVIDIA H200 NVL",
                            "cuda:0 NVIDIA GB200"})
    EXPECT_EQ(machine_for_device(other), nullptr) << other;
  try {
    load_machine("b300");
    ADD_FAILURE() << "an unknown machine was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("'b300' is neither a built-in machine (a100, h100, h200, mi300x, b200)"),
              std::string::npos)
        << e.what();
  }
}

TEST(Machine, ProfileFileReadsStrictly) {
  const auto dir = std::filesystem::temp_directory_path() / ("pb_machine_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto file = [&](const std::string& name, const std::string& text) {
    const auto p = dir / name;
    std::ofstream(p) << text;
    return p.string();
  };
  const MachineProfile m = load_machine(file("ok.toml",
                                             "[machine]\nname = \"box\"\nsource = \"calibrated 2026-11-23\"\n"
                                             "peak_tflops_bf16 = 100.0\nbw_intra_GBps = 40.0\nmemory_GB = 24.0\n"
                                             "gemm_efficiency = 0.5\nranks_per_node = 2\n"));
  EXPECT_EQ(m.name, "box");
  EXPECT_DOUBLE_EQ(m.peak_tflops_fp32, 100);  // defaults to the bf16 peak
  EXPECT_DOUBLE_EQ(m.bw_inter_GBps, 40);      // defaults to the intra-node link
  EXPECT_DOUBLE_EQ(hardware_for(m, Precision::fp32).gemm_efficiency, 0.5);
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"[machine]\nname = \"x\"\nsource = \"s\"\n", "machine.peak_tflops_bf16"},
      {"[machine]\nname = \"x\"\nsource = \"s\"\npeak_tflops_bf16 = 1.0\nspeed = 2.0\n", "machine.speed"},
      {"[machine]\nname = \"x\"\nsource = \"s\"\npeak_tflops_bf16 = 1.0\ngemm_efficiency = 0.0\n",
       "machine.gemm_efficiency"},
      {"[machine]\nname = \"x\"\nsource = \"s\"\npeak_tflops_bf16 = inf\n", "machine.peak_tflops_bf16"},
      {"[machine]\nname = \"x\"\npeak_tflops_bf16 = 1.0\n", "machine.source"},
      {"[machine]\nname = \"\"\nsource = \"s\"\npeak_tflops_bf16 = 1.0\n", "machine.name"},
      {"[machine\n", "bad.toml"},
  };
  for (const auto& [text, want] : bad) {
    try {
      load_machine(file("bad.toml", text));
      ADD_FAILURE() << "accepted: " << text;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  }
  std::filesystem::remove_all(dir);
}

// A GPU's kernels keep their own workspaces: a plan on a built-in GPU holds
// none of the CPU kernels' (bf16's GEMM staging, the attention scores), and
// equals what a rank on a device allocates (MicrobatchRunner, and the
// tensor-parallel runner, without them).
TEST(Machine, OnAGpuThePlanHoldsNoCpuKernelWorkspace) {
  for (Precision p : {Precision::fp32, Precision::bf16_mixed}) {
    PlanInput in;
    in.shape = planner_model("gpt2-124m");
    in.seq = 256;
    in.dp = 2;
    in.global_batch = 8;
    in.microbatch_size = 4;
    in.precision = p;
    const int64_t cpu = plan(in).worst.workspace;
    in.hw = hardware_for(load_machine("h100"), p);
    EXPECT_FALSE(in.hw.host_kernels);
    const int64_t gpu = plan(in).worst.workspace;
    EXPECT_LT(gpu, cpu) << precision_name(p);
    EXPECT_EQ(gpu, runner_workspace_bytes(*in.shape, 4, 256, p, 0, 1, /*kernel_ws=*/false)) << precision_name(p);
    EXPECT_EQ(cpu, runner_workspace_bytes(*in.shape, 4, 256, p)) << precision_name(p);
    // The tensor-parallel runner likewise (a rank of dp2.tp2 with SP).
    in.tp = 2;
    in.sp = true;
    in.hw = Hardware{};
    const int64_t tp_cpu = plan(in).worst.workspace;
    in.hw = hardware_for(load_machine("h100"), p);
    const int64_t tp_gpu = plan(in).worst.workspace;
    tp::TpOptions o;
    o.tp = 2;
    o.sp = true;
    EXPECT_LT(tp_gpu, tp_cpu) << precision_name(p);
    EXPECT_EQ(tp_gpu, tp::runner_workspace_bytes(*in.shape, o, 4, 256, p, 0, 1, /*kernel_ws=*/false));
    EXPECT_EQ(tp_cpu, tp::runner_workspace_bytes(*in.shape, o, 4, 256, p));
  }
  EXPECT_TRUE(hardware_for(MachineProfile{}, Precision::fp32).host_kernels);  // a calibrated CPU profile
}

TEST(Machine, ThePlanSaysWhetherItFits) {
  PlanInput in;
  in.shape = planner_model("gpt2-124m");
  in.dp = 8;
  in.hw = hardware_for(load_machine("a100"), in.precision);
  in.hw.memory_GB = 80;
  in.hw.machine = "a100";
  std::string t = format_plan_table(in, plan(in));
  EXPECT_NE(t.find("fits in"), std::string::npos) << t;
  EXPECT_NE(t.find("machine         a100"), std::string::npos) << t;
  in.hw.memory_GB = 0.5;
  t = format_plan_table(in, plan(in));
  EXPECT_NE(t.find("DOES NOT FIT in"), std::string::npos) << t;
}

TEST(Machine, ProfileTomlRoundTripsAndLinesFit) {
  MachineProfile m = load_machine("h200");
  m.source = "a \"quoted\" source";
  const auto dir = std::filesystem::temp_directory_path() / ("pb_machine_rt_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto p = (dir / "m.toml").string();
  std::ofstream(p) << machine_toml(m);
  const MachineProfile r = load_machine(p);
  EXPECT_EQ(r.name, m.name);
  EXPECT_EQ(r.source, m.source);
  EXPECT_DOUBLE_EQ(r.peak_tflops_bf16, m.peak_tflops_bf16);
  EXPECT_DOUBLE_EQ(r.mem_bw_GBps, m.mem_bw_GBps);
  EXPECT_DOUBLE_EQ(r.memory_GB, m.memory_GB);
  EXPECT_EQ(r.ranks_per_node, m.ranks_per_node);
  EXPECT_TRUE(r.gpu);
  std::filesystem::remove_all(dir);
  // t = 5 + 2 x exactly, and with noise that cancels.
  const LineFit f = fit_line({{0, 5}, {1, 7}, {2, 9}, {3, 11}});
  EXPECT_NEAR(f.intercept, 5, 1e-12);
  EXPECT_NEAR(f.slope, 2, 1e-12);
  const LineFit g = fit_line({{1, 7.5}, {1, 6.5}, {3, 11.5}, {3, 10.5}});
  EXPECT_NEAR(g.intercept, 5, 1e-12);
  EXPECT_NEAR(g.slope, 2, 1e-12);
  EXPECT_THROW(fit_line({{1, 2}}), InputError);
  EXPECT_THROW(fit_line({{1, 2}, {1, 3}}), InputError);
}

// The GEMMs a rank runs are the model's FLOPs exactly: their 2 m n k per
// microbatch, times the microbatches (and the tp or cp shards), is
// Megatron's formula without recomputation.
// A mixture-of-experts block runs its router and its top_k experts on every
// token (model_flops_per_step's count): at any ep, a rank's E / ep experts
// run the same routed rows in all.
TEST(Planner, RankGemmsAreTheModelFlops) {
  for (const char* name : {"tiny", "small", "gpt2-124m", "tiny-moe", "tiny-moe-e8-top1"}) {
    const ModelConfig m = planner_model(name);
    for (const auto& [tp, cp] : std::vector<std::pair<int, int>>{{1, 1}, {2, 1}, {4, 1}, {1, 2}, {1, 4}}) {
      if (m.NH % tp || m.V % tp) continue;
      for (int ep : {1, 2, 4}) {
        if (ep > 1 && m.moe.experts == 0) continue;
        const int64_t b = 3, s = m.maxT;
        double f = 0;
        for (const GemmShape& g : rank_gemms(m, b, s, tp, cp, true, ep))
          f += 2.0 * double(g.m) * double(g.n) * double(g.k) * g.count;
        EXPECT_NEAR(f * tp * cp, to_double(iteration_flops(m, b, s, Recompute::none).model),
                    1e-12 * f * tp * cp)
            << name << " tp" << tp << " cp" << cp << " ep" << ep;
      }
    }
    if (m.moe.experts > 0) {  // the planner's FLOPs are the sweep's MFU numerator
      EXPECT_NEAR(to_double(iteration_flops(m, 5, 16, Recompute::none).model), model_flops_per_step(m, 5, 16),
                  1e-12 * model_flops_per_step(m, 5, 16))
          << name;
      const double extra = to_double(iteration_flops(m, 5, 16, Recompute::full).hardware) -
                           to_double(iteration_flops(m, 5, 16, Recompute::none).hardware);
      ModelConfig dense = m;
      dense.moe = {};
      const double dense_extra = to_double(iteration_flops(dense, 5, 16, Recompute::full).hardware) -
                                 to_double(iteration_flops(dense, 5, 16, Recompute::none).hardware);
      // Full recomputation runs the MoE blocks' forward again too: a third more of their extra.
      EXPECT_NEAR(extra - dense_extra,
                  (model_flops_per_step(m, 5, 16) - model_flops_per_step(dense, 5, 16)) / 3, 1e-9 * extra)
          << name;
    }
  }
}

// A mixture-of-experts block's memory-bound bytes beyond a dense block's,
// counted by hand for tiny-moe (top-2 of 4 experts, C 32), and in the plan
// only on the stage that holds an MoE block (block 0 of 2).
TEST(Planner, MoeBlocksMoveTheirDispatchAndCombine) {
  const ModelConfig m = planner_model("tiny-moe");
  ActivationShape x{4, 16, m.C, m.NH, 1, 1, false, false, 4};
  // Per token, forward: GELU over one more expert's 4C (8 x 32), dispatch
  // 2 x 2 x 32, combine 3 x 32 + 2 weights, router softmax 2 x 4; backward
  // twice that.
  EXPECT_EQ(moe_layer_extra_traffic_bytes(x, m.moe), 3 * (256 + 128 + 96 + 2 + 8) * 64 * 4);
  x.tp = 2;  // the experts' hidden split: the GELU's share halves
  EXPECT_EQ(moe_layer_extra_traffic_bytes(x, m.moe), 3 * (128 + 128 + 96 + 2 + 8) * 64 * 4);
  // In the plan: the same model dense moves, per step, two microbatches of
  // those bytes less, and the experts' states (fp32 AdamW reads and writes 28
  // bytes per parameter; DDP zeroes its 4-byte gradient once) less.
  PlanInput in;
  in.shape = m;
  in.seq = 16;
  in.precision = Precision::fp32;
  in.microbatch_size = 4;
  in.global_batch = 8;
  in.hw.peak_tflops = 0.05;
  in.hw.mem_bw_GBps = 10;
  const PlanResult moe = plan(in);
  ModelConfig dense = m;
  dense.moe = {};
  in.shape = dense;
  const PlanResult d = plan(in);
  x.tp = 1;
  EXPECT_DOUBLE_EQ(moe.memory_bytes - d.memory_bytes,
                   2.0 * double(moe_layer_extra_traffic_bytes(x, m.moe)) +
                       double(m.num_params() - dense.num_params()) * (28 + 4));
}

// A GEMM table: the nearest shape by the logarithms of m, n, k; the model's
// efficiency its GEMMs' flops over their time at those rates.
TEST(Planner, GemmTableGivesTheEfficiencyAtTheRanksShapes) {
  const std::vector<GemmRate> table = {{64, 64, 64, 10}, {64, 1024, 1024, 40}, {1024, 1024, 1024, 80}};
  EXPECT_EQ(table_gflops({}, 5, 5, 5), 0);
  EXPECT_EQ(table_gflops(table, 64, 64, 64), 10);
  EXPECT_EQ(table_gflops(table, 16, 50, 90), 10);
  EXPECT_EQ(table_gflops(table, 100, 700, 2000), 40);
  EXPECT_EQ(table_gflops(table, 512, 1024, 1024), 80);  // log-nearer 1024 than 64
  EXPECT_EQ(table_gflops(table, 100000, 1, 1), 10);
  PlanInput in;
  in.shape = planner_model("small");
  in.seq = 64;
  in.microbatch_size = 4;
  in.precision = Precision::fp32;
  in.hw.peak_tflops = 0.1;
  in.hw.bw_intra_GBps = 10;
  in.hw.gemm_efficiency = 0.3;  // unused once a table is given
  const PlanResult scalar = plan(in);
  EXPECT_DOUBLE_EQ(scalar.gemm_efficiency, 0.3);
  in.hw.gemm_rates = {{64, 64, 64, 50}};  // one rate everywhere: half of the 100 GFLOP/s peak
  const PlanResult uniform = plan(in);
  EXPECT_NEAR(uniform.gemm_efficiency, 0.5, 1e-12);
  EXPECT_NEAR(uniform.compute_s - uniform.memory_s, uniform.hardware_flops / 50e9, 1e-12);
  // Rates growing with the size: by hand over the rank's GEMMs, and tensor
  // parallel's smaller shards reach less.
  in.hw.gemm_rates = table;
  double f = 0, t = 0;
  for (const GemmShape& g : rank_gemms(*in.shape, 4, 64, 1, 1)) {
    const double x = 2.0 * double(g.m) * double(g.n) * double(g.k) * g.count;
    f += x;
    t += x / (table_gflops(table, g.m, g.n, g.k) * 1e9);
  }
  const PlanResult one = plan(in);
  EXPECT_NEAR(one.gemm_efficiency, f / t / 1e11, 1e-12);
  // With the attention core's time measured its per-head GEMMs leave the
  // table's average: the linears and the head alone.
  const std::vector<GemmShape> all = rank_gemms(*in.shape, 4, 64, 1, 2);
  const std::vector<GemmShape> linear = rank_gemms(*in.shape, 4, 64, 1, 2, false);
  ASSERT_EQ(linear.size() + 3, all.size());
  EXPECT_TRUE(std::equal(linear.begin(), linear.end(), all.begin(), [](const GemmShape& a, const GemmShape& b) {
    return a.m == b.m && a.n == b.n && a.k == b.k && a.count == b.count;
  }));
  std::vector<GemmRate> small_too = table;
  small_too.push_back({32, 32, 32, 2});  // the per-head shapes of small at cp2 (32 x 64 x 32) crawl
  auto efficiency = [&](const std::vector<GemmShape>& shapes) {
    double fl = 0, ti = 0;
    for (const GemmShape& g : shapes) {
      const double x = 2.0 * double(g.m) * double(g.n) * double(g.k) * g.count;
      fl += x;
      ti += x / (table_gflops(small_too, g.m, g.n, g.k) * 1e9);
    }
    return fl / ti / 1e11;
  };
  in.hw.gemm_rates = small_too;
  in.cp = 2;
  EXPECT_NEAR(plan(in).gemm_efficiency, efficiency(all), 1e-12);
  in.hw.attention_fwd_s = 1e-5;
  in.hw.attention_bwd_s = 2e-5;
  EXPECT_NEAR(plan(in).gemm_efficiency, efficiency(linear), 1e-12);
  EXPECT_GT(efficiency(linear), efficiency(all));  // the per-head shapes are the smallest
  in.hw.attention_fwd_s = in.hw.attention_bwd_s = 0;
  in.hw.gemm_rates = table;
  in.cp = 1;
  in.tp = 2;
  EXPECT_LT(plan(in).gemm_efficiency, one.gemm_efficiency);
}

// A collective fit replaces latency and bandwidth for its op within a node:
// calls x alpha + bus bytes / GBps, alpha scaled by the ring steps when the
// nearest group size is another; across nodes the links stay.
TEST(Planner, CollectiveFitsTimeTheirOp) {
  PlanInput in = params_only(10'000'000, 2, dp::Shard::none);
  in.hw.peak_tflops = 1;
  in.hw.bw_intra_GBps = 1;
  in.hw.bw_inter_GBps = 1;
  in.hw.latency_us = 1000;
  in.hw.collectives["all_reduce"] = {{2, 5, 20}, {8, 50, 4}};
  const PlanResult r = plan(in);
  ASSERT_FALSE(r.comm.empty());
  for (const CommRow& c : r.comm) {
    ASSERT_EQ(c.op, "all_reduce");
    EXPECT_NEAR(c.time_s, double(c.calls) * 5e-6 + c.bus_bytes / 20e9, 1e-15) << c.group;
  }
  in.dp = 3;  // nearest by ratio: 2 (3/2 < 8/3); 4 ring steps over its 2
  in.global_batch = 3;
  for (const CommRow& c : plan(in).comm)
    EXPECT_NEAR(c.time_s, double(c.calls) * 5e-6 * 4 / 2 + c.bus_bytes / 20e9, 1e-15) << c.group;
  in.dp = 4;  // equidistant from 2 and 8: the larger; 6 steps over its 14
  in.global_batch = 4;
  for (const CommRow& c : plan(in).comm)
    EXPECT_NEAR(c.time_s, double(c.calls) * 50e-6 * 6 / 14 + c.bus_bytes / 4e9, 1e-15) << c.group;
  in.ranks_per_node = 2;  // the dp group spans nodes: the inter-node link and latency
  for (const CommRow& c : plan(in).comm) {
    ASSERT_TRUE(c.inter_node) << c.group;
    EXPECT_NEAR(c.time_s, double(c.calls) * 6 * 1000e-6 + c.bus_bytes / 1e9, 1e-12) << c.group;
  }
  EXPECT_DOUBLE_EQ(ring_steps("send_recv", 9), 1);
  EXPECT_DOUBLE_EQ(ring_steps("all_to_all", 9), 8);
  EXPECT_DOUBLE_EQ(bus_bytes("all_reduce", 4, 100), 150);
  EXPECT_DOUBLE_EQ(bus_bytes("all_to_all", 4, 100), 75);
}

// Each profile text (after `head`) is refused by load_machine with a message
// holding its `want`.
void expect_refused(const std::filesystem::path& dir, const std::string& head,
                    const std::vector<std::pair<std::string, std::string>>& bad) {
  for (const auto& [text, want] : bad) {
    const auto f = (dir / "bad.toml").string();
    std::ofstream(f) << head << text;
    try {
      load_machine(f);
      ADD_FAILURE() << "accepted: " << text;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  }
}

// Measured tables round-trip through a profile, reach the plan's hardware by
// precision, and bad tables are refused naming the key.
TEST(Machine, ProfileTablesReadStrictly) {
  const auto dir = std::filesystem::temp_directory_path() / ("pb_machine_tables_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  MachineProfile m = load_machine("a100");
  m.wake_us = 33;
  m.gemm["fp32"] = {{16, 64, 64, 12.5}, {1024, 1024, 1024, 95}};
  m.gemm["fp64"] = {{256, 256, 256, 40}};
  m.collectives["send_recv"] = {{2, 1.5, 9}, {4, 20, 3}};
  const auto p = (dir / "m.toml").string();
  std::ofstream(p) << machine_toml(m);
  const MachineProfile r = load_machine(p);
  EXPECT_DOUBLE_EQ(r.wake_us, 33);
  ASSERT_EQ(r.gemm.size(), 2u);
  ASSERT_EQ(r.gemm.at("fp32").size(), 2u);
  EXPECT_EQ(r.gemm.at("fp32")[0].m, 16);
  EXPECT_EQ(r.gemm.at("fp32")[1].k, 1024);
  EXPECT_DOUBLE_EQ(r.gemm.at("fp32")[0].gflops, 12.5);
  ASSERT_EQ(r.collectives.at("send_recv").size(), 2u);
  EXPECT_EQ(r.collectives.at("send_recv")[1].group_size, 4);
  EXPECT_DOUBLE_EQ(r.collectives.at("send_recv")[1].alpha_us, 20);
  EXPECT_EQ(hardware_for(r, Precision::fp32).gemm_rates.size(), 2u);
  EXPECT_EQ(hardware_for(r, Precision::fp64).gemm_rates.size(), 1u);
  EXPECT_TRUE(hardware_for(r, Precision::bf16_mixed).gemm_rates.empty());
  EXPECT_EQ(hardware_for(r, Precision::bf16_mixed).collectives.size(), 1u);
  const std::string head = "[machine]\nname = \"x\"\nsource = \"s\"\npeak_tflops_bf16 = 1.0\n";
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"[machine.gemm.fp32]\nm = [1, 2]\nn = [1]\nk = [1]\ngflops = [1.0]\n", "machine.gemm.fp32.n has 1 values"},
      {"[machine.gemm.fp32]\nm = [1]\nn = [1]\nk = [1]\ngflops = [0.0]\n", "machine.gemm.fp32.gflops"},
      {"[machine.gemm.fp32]\nm = [1.5]\nn = [1]\nk = [1]\ngflops = [1.0]\n", "machine.gemm.fp32.m must hold whole"},
      {"[machine.gemm.fp32]\nm = [1]\nn = [1]\ngflops = [1.0]\n", "machine.gemm.fp32.k"},
      {"[machine.gemm.fp32]\nm = []\nn = []\nk = []\ngflops = []\n", "at least one value"},
      {"[machine.gemm.fp16]\nm = [1]\nn = [1]\nk = [1]\ngflops = [1.0]\n", "machine.gemm.fp16"},
      {"[machine.collective.all_reduce]\ngroup_size = [1]\nalpha_us = [1.0]\nGBps = [1.0]\n",
       "group_size must be >= 2"},
      {"[machine.collective.broadcast]\ngroup_size = [2]\nalpha_us = [1.0]\nGBps = [1.0]\n",
       "machine.collective.broadcast"},
      {"[machine.collective.all_reduce]\ngroup_size = [2]\nalpha_us = [1.0]\nGBps = [-1.0]\n",
       "machine.collective.all_reduce.GBps"},
  };
  expect_refused(dir, head, bad);
  std::filesystem::remove_all(dir);
}

// calibrate --inter-node: the link from a collectives CSV's all_reduce rows
// across nodes (t = alpha + bus / B; the other rows ignored); bad files name
// what they lack. The plan times inter-node steps at that latency.
TEST(Machine, InterNodeLinkFromCollectiveRows) {
  const auto dir = std::filesystem::temp_directory_path() / ("pb_inter_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string head = "run_id,kind,world,status,op,bytes,dtype,inplace,time_us,nodes\n";
  auto row = [](const char* op, int world, double bytes, double t_us, int nodes, const char* inplace = "0",
                const char* dtype = "fp32") {
    return std::string("r,collective,") + std::to_string(world) + ",ok," + op + "," + std::to_string(int64_t(bytes)) +
           "," + dtype + "," + inplace + "," + std::to_string(t_us) + "," + std::to_string(nodes) + "\n";
  };
  // 4 ranks: alpha 300 us, bus 2 GB/s (bus bytes = 1.5 S).
  auto t_us = [](double S) { return 300 + 1.5 * S / 2e9 * 1e6; };
  std::string text = head;
  for (double S : {4.0, 1024.0, 65536.0, double(1 << 20), double(4 << 20), double(16 << 20)})
    text += row("all_reduce", 4, S, t_us(S), 2);
  text += row("all_reduce", 4, 1 << 20, 1, 1);               // one node: not inter-node
  text += row("all_gather", 4, 1 << 20, 1, 2);               // another op
  text += row("all_reduce", 4, 1 << 20, 1, 2, "1");          // in place
  text += row("all_reduce", 4, 1 << 20, 1, 2, "0", "bf16");  // another dtype
  text += row("all_reduce", 2, 1 << 20, 1, 2);               // a smaller world
  const auto p = (dir / "c.csv").string();
  std::ofstream(p) << text;
  const InterNodeFit f = fit_inter_node(p);
  EXPECT_EQ(f.world, 4);
  EXPECT_EQ(f.rows, 6);
  EXPECT_NEAR(f.GBps, 2, 1e-6);
  EXPECT_NEAR(f.latency_us, t_us(1024) / 6, 1e-6);  // the median of 4 B, 1 KiB, 64 KiB over 6 steps
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"run_id,kind,world,status,op,bytes,dtype,inplace,time_us\n", "no 'nodes' column"},
      {head + row("all_reduce", 4, 1 << 20, 10, 1), "no ok fp32 all_reduce rows across 2 or more nodes"},
      {head + row("all_reduce", 4, 1 << 20, 10, 2) + row("all_reduce", 4, 1 << 20, 11, 2), "at least two (has 1)"},
      {head + "r,collective,4,ok,all_reduce,abc,fp32,0,1,2\n" + row("all_reduce", 4, 1 << 20, 10, 2), "'bytes' is not a number"},
      {head + row("all_reduce", 4, 1 << 20, 20, 2) + row("all_reduce", 4, 4 << 20, 10, 2), "do not grow with size"},
  };
  for (const auto& [csv, want] : bad) {
    std::ofstream(p) << csv;
    try {
      fit_inter_node(p);
      ADD_FAILURE() << "accepted: " << csv;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(fit_inter_node((dir / "none.csv").string()), InputError);
  std::filesystem::remove_all(dir);
  PlanInput in = params_only(10'000'000, 4, dp::Shard::none);
  in.hw.peak_tflops = 1;
  in.hw.bw_intra_GBps = in.hw.bw_inter_GBps = 1;
  in.hw.latency_us = 1;
  in.hw.latency_inter_us = 50;
  in.ranks_per_node = 2;
  for (const CommRow& c : plan(in).comm) {
    ASSERT_TRUE(c.inter_node);
    EXPECT_NEAR(c.time_s, double(c.calls) * 6 * 50e-6 + c.bus_bytes / 1e9, 1e-12);
  }
}

// Calibrated training shapes (parabench calibrate --model) round-trip
// through a profile and reach the plan at its rank's work per block
// (shape_work): log-linear between two shapes, the nearest beyond them; the
// rates, compute_scale, and corun_scale at the node's ranks side by side,
// taken at the copies of the weights they hold; compute_scale_for makes the
// calibration step plan at the time it measured.
TEST(Machine, CalibratedShapeFiguresReachThePlan) {
  const auto dir = std::filesystem::temp_directory_path() / ("pb_machine_shape_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  MachineProfile m;
  m.name = "cpu";
  m.source = "test";
  m.peak_tflops_bf16 = m.peak_tflops_fp32 = m.peak_tflops_fp64 = 0.1;
  m.mem_bw_GBps = 8;
  m.bw_intra_GBps = m.bw_inter_GBps = 10;
  m.ranks_per_node = 2;
  const double w_tiny = shape_work(planner_model("tiny"), 4, 16, 1, 1),
               w_small = shape_work(planner_model("small"), 4, 16, 1, 1);
  // One block of tiny for 4 x 16 tokens: 72 b s h^2 + 12 b s^2 h.
  EXPECT_DOUBLE_EQ(w_tiny, 72.0 * 64 * 32 * 32 + 12.0 * 4 * 256 * 32);
  EXPECT_DOUBLE_EQ(shape_work(planner_model("small"), 4, 16, 2, 1), w_small / 2);
  m.shapes = {{"tiny", w_tiny, 7, 32, 27, 100, 1.1, 1.2}, {"small", w_small, 8, 28, 23, 50, 1.0, 1.0}};
  const auto p = (dir / "m.toml").string();
  std::ofstream(p) << machine_toml(m);
  const MachineProfile r = load_machine(p);
  ASSERT_EQ(r.shapes.size(), 2u);
  EXPECT_EQ(r.shapes[1].workload, "small");
  EXPECT_DOUBLE_EQ(r.shapes[0].buffer_mem_bw_GBps, 100);
  // Between: log-linear; beyond: the nearest.
  const double mid = std::sqrt(w_tiny * w_small);
  EXPECT_NEAR(shape_figures_at(r.shapes, mid).compute_scale, 1.05, 1e-6);
  EXPECT_NEAR(shape_figures_at(r.shapes, mid).buffer_mem_bw_GBps, 75, 1e-6);
  EXPECT_DOUBLE_EQ(shape_figures_at(r.shapes, w_tiny / 10).compute_scale, 1.1);
  EXPECT_DOUBLE_EQ(shape_figures_at(r.shapes, w_small * 10).corun_scale, 1.0);
  EXPECT_DOUBLE_EQ(shape_figures_at({}, 5).compute_scale, 1);
  // A plan of tiny takes tiny's figures; of small at tp2, between the two.
  PlanInput in;
  in.shape = planner_model("tiny");
  in.seq = 16;
  in.precision = Precision::fp32;
  in.microbatch_size = 4;
  in.global_batch = 8;
  in.ranks_per_node = r.ranks_per_node;
  Hardware h = hardware_for(r, in);
  EXPECT_DOUBLE_EQ(h.mem_bw_GBps, 7);
  EXPECT_DOUBLE_EQ(h.shared_mem_bw_GBps, 32);
  EXPECT_DOUBLE_EQ(h.optimizer_mem_bw_GBps, 27);
  EXPECT_DOUBLE_EQ(h.buffer_mem_bw_GBps, 100);
  EXPECT_DOUBLE_EQ(h.compute_scale, 1.1);
  EXPECT_DOUBLE_EQ(h.corun_scale, 1.2);
  EXPECT_EQ(h.corun_ranks, 2);
  PlanInput small = in;
  small.shape = planner_model("small");
  small.tp = 2;
  const Hardware hs = hardware_for(r, small);
  EXPECT_GT(hs.compute_scale, 1.0);
  EXPECT_LT(hs.compute_scale, 1.1);
  EXPECT_DOUBLE_EQ(hardware_for(r, Precision::fp32).compute_scale, 1);  // no plan: no shape figures
  PlanInput params_only = in;
  params_only.shape.reset();
  params_only.params = 1000000;
  EXPECT_DOUBLE_EQ(hardware_for(r, params_only).mem_bw_GBps, 8);
  // A built-in (datasheet) profile carries none.
  EXPECT_TRUE(load_machine("h100").shapes.empty());
  EXPECT_DOUBLE_EQ(hardware_for(load_machine("h100"), in).corun_scale, 1);
  in.shard = dp::Shard::zero3;  // buffers of its own, which compute_scale leaves alone
  in.hw = h;
  in.hw.compute_scale = 1;  // compute_scale_for: of a plan at 1
  const PlanResult est = plan(in);
  ASSERT_GT(est.buffer_s, 0);
  in.hw.compute_scale = compute_scale_for(est, 1.3 * est.step_s);
  EXPECT_NEAR(plan(in).step_s, 1.3 * est.step_s, 1e-12 * est.step_s);
  EXPECT_NEAR(in.hw.compute_scale, (1.3 * est.step_s - est.buffer_s) / (est.step_s - est.buffer_s), 1e-12);
  in.hw.compute_scale = 1;

  // corun_factor: linear in the copies between 1 and `at`, clamped.
  EXPECT_DOUBLE_EQ(corun_factor(1.2, 2, 1), 1);
  EXPECT_DOUBLE_EQ(corun_factor(1.2, 2, 2), 1.2);
  EXPECT_DOUBLE_EQ(corun_factor(1.2, 2, 5), 1.2);
  EXPECT_DOUBLE_EQ(corun_factor(1.3, 4, 2), 1.1);
  EXPECT_DOUBLE_EQ(corun_factor(1.3, 1, 4), 1);
  // In the plan: one rank, or two holding halves of the weights (tp2), none;
  // two data-parallel ranks on the node, all of it; four over two nodes, the
  // node's two; on nodes of one rank, none.
  in.shard = dp::Shard::none;
  const double alone = plan(in).compute_s;
  auto corun_of = [&](int dp, int tp, int64_t rpn) {
    PlanInput x = in;
    x.dp = dp;
    x.tp = tp;
    x.global_batch = 8 * dp;
    x.ranks_per_node = rpn;
    x.hw.corun_scale = 1;
    const PlanResult without = plan(x);
    x.hw.corun_scale = 1.2;
    const PlanResult with = plan(x);
    // Compute scales by it, the data-parallel buffers aside (as compute_scale).
    EXPECT_NEAR((with.compute_s - with.buffer_s) / (without.compute_s - without.buffer_s), with.corun, 1e-12);
    EXPECT_DOUBLE_EQ(with.buffer_s, without.buffer_s);
    return with.corun;
  };
  EXPECT_GT(alone, 0);
  EXPECT_DOUBLE_EQ(corun_of(1, 1, 2), 1);
  EXPECT_DOUBLE_EQ(corun_of(1, 2, 2), 1);
  EXPECT_DOUBLE_EQ(corun_of(2, 1, 2), 1.2);
  EXPECT_DOUBLE_EQ(corun_of(4, 1, 2), 1.2);
  EXPECT_DOUBLE_EQ(corun_of(4, 1, 1), 1);
  in.hw.corun_scale = 0;
  EXPECT_THROW(plan(in), InputError);
  in.hw.corun_scale = 1;

  // Bad figures in a file are refused naming the key.
  const std::string head = "[machine]\nname = \"x\"\nsource = \"s\"\npeak_tflops_bf16 = 1.0\n";
  auto table = [](const std::string& workload, const std::string& work, const std::string& scale) {
    return "[machine.shape]\nworkload = " + workload + "\nwork = " + work +
           "\nmem_bw_GBps = [7.0, 8.0]\nshared_mem_bw_GBps = [30.0, 28.0]\noptimizer_mem_bw_GBps = [27.0, 23.0]\n"
           "buffer_mem_bw_GBps = [100.0, 50.0]\ncompute_scale = " + scale + "\ncorun_scale = [1.1, 1.0]\n";
  };
  const std::string two = "[\"tiny\", \"small\"]";
  expect_refused(dir, head, {
           {table(two, "[1.0, 2.0]", "[0.0, 1.0]"), "machine.shape.compute_scale"},
           {table(two, "[2.0, 1.0]", "[1.1, 1.0]"), "machine.shape.work must be strictly ascending"},
           {table(two, "[1.0]", "[1.1, 1.0]"), "machine.shape.mem_bw_GBps has 2 values"},
           {table("[\"tiny\"]", "[1.0, 2.0]", "[1.1, 1.0]"), "machine.shape.workload has 1 values"},
           {table("[\"tiny\", \"\"]", "[1.0, 2.0]", "[1.1, 1.0]"), "must name each shape"},
           {table(two, "[1.0, 2.0]", "[1.1, 1.0]") + "extra = 1.0\n", "machine.shape.extra"},
           {"workload = 3\n", "machine.workload"}});
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace pb::planner
