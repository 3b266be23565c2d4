// Pipeline schedules under the conformance engine: every synchronous schedule
// is bitwise equal to the reference replaying its microbatch order (and so to
// each other) for pp in {1..4}, m from below p to 4p, virtual stages for
// interleaved, composed with DDP and ZeRO-1; PipeDream-2BW is bitwise equal to
// delayed-weight training; declared activation and p2p bytes hold exactly;
// injected faults are caught; bad configs are rejected.
#include <gtest/gtest.h>

#include <cmath>
#include <tuple>

#include "impl/registry.h"
#include "harness/status.h"
#include "reference/device_testing.h"
#include "suites/conformance/engine.h"
#include "suites/conformance/pipeline_report.h"
#include "suites/conformance/stand_in_runs.h"

namespace pb {
namespace {

namespace pl = pipeline;

StrategyRun run_of(pl::ScheduleKind k, int pp, int m, int v = 1, int dp = 1, Precision p = Precision::fp32) {
  StrategyRun r;
  TrainConfig& c = r.spec.train;
  c.model = named_model("tiny");
  c.model.L = 8;  // room for pp * v <= 8 stages
  c.precision = p;
  c.steps = 2;
  c.batch = dp * m;  // one sequence per microbatch
  c.seq = 8;
  c.microbatches = m;
  c.optim.lr = 3e-3;
  r.spec.pipe.schedule = k;
  r.spec.mesh.pp = pp;
  r.spec.pipe.virtual_stages = v;
  r.spec.mesh.dp = dp;
  r.world.timeout_s = 60;
  return r;
}

std::string explain(const ConformanceResult& r) {
  return r.strategy + " " + precision_name(r.precision) + ":" + describe_failures(r);
}

ConformanceResult expect_bitwise_pass(const StrategyRun& run, PipelineReport* rep = nullptr) {
  auto r = run_conformance(run);
  EXPECT_TRUE(r.pass()) << explain(r);
  EXPECT_TRUE(r.bitwise_declared) << r.strategy;
  EXPECT_FALSE(r.bits.empty()) << r.strategy;
  // Model states, activations, p2p sends, the tied all-reduce: all declared.
  for (const char* what : {"mem.params", "mem.grads", "mem.optimizer", "mem.activations"})
    EXPECT_GT(r.exact_of(what).measured, 0) << r.strategy << " " << what;
  if (run.spec.mesh.pp > 1) {
    EXPECT_GT(r.exact_of("comm.pp.send").declared, 0) << r.strategy;
    EXPECT_GT(r.exact_of("comm.pp_tied.all_reduce").declared, 0) << r.strategy;
  }
  if (rep) *rep = pipeline_report(run.spec, r);
  return r;
}

TEST(PipelineConformance, SynchronousSchedulesAreBitwiseWithTheirReplay) {
  for (auto k : {pl::ScheduleKind::gpipe, pl::ScheduleKind::one_f_one_b, pl::ScheduleKind::zb_h1})
    for (int pp : {1, 2, 3, 4})
      for (int m : {pp - 1, pp, 2 * pp + 1, 4 * pp, 4 * pp + 3}) {
        if (m < 1 || (k == pl::ScheduleKind::zb_h1 && m < pp)) continue;  // zb-h1 needs m >= p
        expect_bitwise_pass(run_of(k, pp, m));
      }
  for (int pp : {1, 2, 3, 4})
    for (int v : {2, 3})
      for (int m : {pp, 2 * pp}) {
        if (pp * v > 8) continue;
        expect_bitwise_pass(run_of(pl::ScheduleKind::interleaved, pp, m, v));
      }
}

TEST(PipelineConformance, Bf16IsBitwiseToo) {
  for (auto k : {pl::ScheduleKind::one_f_one_b, pl::ScheduleKind::zb_h1})
    expect_bitwise_pass(run_of(k, 4, 8, 1, 1, Precision::bf16_mixed));
  expect_bitwise_pass(run_of(pl::ScheduleKind::interleaved, 2, 4, 2, 1, Precision::bf16_mixed));
}

TEST(PipelineConformance, SynchronousSchedulesAreBitwiseEqualToEachOther) {
  // Same microbatches (m = 4, one sequence each), any schedule and depth: the
  // per-unit norm sums make even pp and v irrelevant to the bits.
  std::vector<Trace> traces;
  for (auto [k, pp, v] : {std::tuple{pl::ScheduleKind::gpipe, 2, 1}, {pl::ScheduleKind::one_f_one_b, 2, 1},
                          {pl::ScheduleKind::zb_h1, 2, 1}, {pl::ScheduleKind::interleaved, 2, 2},
                          {pl::ScheduleKind::one_f_one_b, 1, 1}, {pl::ScheduleKind::one_f_one_b, 4, 1},
                          {pl::ScheduleKind::zb_h1, 4, 1}, {pl::ScheduleKind::interleaved, 4, 2}}) {
    traces.push_back(expect_bitwise_pass(run_of(k, pp, 4, v)).trace);
  }
  const auto n = size_t(ParamLayout(run_of(pl::ScheduleKind::gpipe, 1, 1).spec.train.model).total());
  ASSERT_EQ(traces[0].grads1.size(), n);  // the comparisons below are not vacuous
  ASSERT_EQ(traces[0].params.size(), n);
  ASSERT_EQ(traces[0].loss.size(), 2u);
  for (size_t i = 1; i < traces.size(); ++i) {
    EXPECT_EQ(traces[0].loss, traces[i].loss);
    EXPECT_EQ(traces[0].grad_norm, traces[i].grad_norm);
    EXPECT_EQ(traces[0].grads1, traces[i].grads1);
    EXPECT_EQ(traces[0].params, traces[i].params);
  }
}

TEST(PipelineConformance, ComposedWithDdpAndZero1) {
  for (Precision p : {Precision::fp32, Precision::bf16_mixed})
    for (auto mode : {dp::Shard::none, dp::Shard::zero1})
      for (auto [pp, dp] : {std::pair{2, 2}, {2, 4}, {4, 2}, {2, 3}, {1, 4}}) {
        for (auto [k, v] : {std::pair{pl::ScheduleKind::one_f_one_b, 1}, {pl::ScheduleKind::zb_h1, 1},
                            {pl::ScheduleKind::interleaved, 2}}) {
          auto run = run_of(k, pp, 2 * pp, v, dp, p);
          run.spec.data.shard = mode;
          expect_bitwise_pass(run);
        }
      }
}

// Each stage's model states are the data-parallel component: every data-axis
// option composes with every schedule, with exact model-state, activation
// and per-group byte checks.
struct DataCase {
  dp::Shard shard;
  int dp, shard_group, ranks_per_node;
  bool offload;
};
const DataCase kDataCases[] = {{dp::Shard::none, 2, 0, 0, false},  {dp::Shard::zero1, 2, 0, 0, false},
                               {dp::Shard::zero2, 2, 0, 0, false}, {dp::Shard::zero2, 2, 0, 0, true},
                               {dp::Shard::zero3, 2, 0, 0, false}, {dp::Shard::zero3, 3, 0, 0, false},
                               {dp::Shard::hsdp, 4, 2, 0, false},  {dp::Shard::hzero, 4, 0, 2, false}};

StrategyRun with_data(StrategyRun r, const DataCase& c) {
  r.spec.data.shard = c.shard;
  r.spec.data.shard_group = c.shard_group;
  r.spec.data.offload = c.offload ? dp::Offload::optimizer : dp::Offload::none;
  r.spec.mesh.ranks_per_node = c.ranks_per_node;
  return r;
}

TEST(PipelineConformance, EveryDataAxisOptionInsideTheStages) {
  for (Precision p : {Precision::fp32, Precision::bf16_mixed})
    for (const DataCase& c : kDataCases)
      for (auto [k, v] : {std::pair{pl::ScheduleKind::one_f_one_b, 1}, {pl::ScheduleKind::zb_h1, 1},
                          {pl::ScheduleKind::interleaved, 2}}) {
        auto run = with_data(run_of(k, 2, 4, v, c.dp, p), c);
        auto r = run_conformance(run);
        EXPECT_TRUE(r.pass()) << explain(r);
        // Every data-axis order is replayed (per-microbatch reductions, two
        // levels, the tied sum on the shards): bit equality everywhere.
        EXPECT_TRUE(r.bitwise_declared && !r.bits.empty()) << r.strategy;
        for (const char* what : {"mem.params", "mem.grads", "mem.activations"})
          EXPECT_GT(r.exact_of(what).declared, 0) << r.strategy << " " << what;
        EXPECT_EQ(r.exact_of("mem.optimizer.host").declared > 0, c.offload) << r.strategy;
        const char* dp_op = c.shard == dp::Shard::none ? "comm.dp.all_reduce"
                            : c.shard == dp::Shard::hsdp ? "comm.dp_shard.reduce_scatter"
                            : c.shard == dp::Shard::hzero ? "comm.dp_intra.reduce_scatter" : "comm.dp.reduce_scatter";
        EXPECT_GT(r.exact_of(dp_op).declared, 0) << r.strategy;
      }
}

// Sharding inside the stages saves what ZeRO says it saves: per-rank model
// states fall from DDP to ZeRO-1, -2, -3 at the same mesh.
TEST(PipelineConformance, StageModelStatesFallWithTheShard) {
  int64_t last = INT64_MAX;
  for (dp::Shard sh : {dp::Shard::none, dp::Shard::zero1, dp::Shard::zero2, dp::Shard::zero3}) {
    auto r = run_conformance(with_data(run_of(pl::ScheduleKind::one_f_one_b, 2, 4, 1, 2), {sh, 2, 0, 0, false}));
    ASSERT_TRUE(r.pass()) << explain(r);
    const int64_t states = r.exact_of("mem.params").measured + r.exact_of("mem.grads").measured +
                           r.exact_of("mem.optimizer").measured;
    EXPECT_LT(states, last) << r.strategy;
    last = states;
  }
}

TEST(PipelineConformance, DataAxisFaultsInsideTheStagesAreCaught) {
  struct Case {
    DataCase data;
    const char* fault;
  };
  for (Case c : {Case{{dp::Shard::none, 2, 0, 0, false}, "grad_not_averaged"},
                 Case{{dp::Shard::zero1, 2, 0, 0, false}, "wrong_shard_offset"},
                 Case{{dp::Shard::zero1, 2, 0, 0, false}, "stale_params"},
                 Case{{dp::Shard::zero2, 2, 0, 0, false}, "skip_grad_reduce"},
                 Case{{dp::Shard::zero2, 2, 0, 0, false}, "stale_params"},
                 Case{{dp::Shard::zero3, 2, 0, 0, false}, "wrong_shard_offset"},
                 Case{{dp::Shard::zero3, 2, 0, 0, false}, "skip_grad_reduce"},
                 Case{{dp::Shard::hsdp, 4, 2, 0, false}, "skip_replica_reduce"},
                 Case{{dp::Shard::hzero, 4, 0, 2, false}, "skip_replica_reduce"},
                 Case{{dp::Shard::zero2, 2, 0, 0, true}, "no_copy_back"},
                 Case{{dp::Shard::zero3, 2, 0, 0, true}, "no_copy_back"},
                 Case{{dp::Shard::hzero, 4, 0, 2, true}, "no_copy_back"}}) {
    for (Precision p : {Precision::fp32, Precision::bf16_mixed}) {
      auto run = with_data(run_of(pl::ScheduleKind::one_f_one_b, 2, 4, 1, c.data.dp, p), c.data);
      run.spec.faults = parse_faults(fault_catalogue(), c.fault, "strategy.faults");
      auto r = run_conformance(run);
      EXPECT_FALSE(r.pass()) << "fault not caught: " << r.strategy << " " << precision_name(p);
      EXPECT_FALSE(all_pass(r.bits)) << "bits did not catch: " << r.strategy << " " << precision_name(p);
    }
  }
}

TEST(PipelineConformance, FaultsOfThePlainDataParallelRunnerAreRefused) {
  for (auto [shard, fault] : {std::pair{dp::Shard::zero3, "keep_gathered"}, {dp::Shard::zero3, "stale_params"},
                              {dp::Shard::none, "skip_bucket"}, {dp::Shard::none, "sync_wrong_microbatch"}}) {
    auto run = with_data(run_of(pl::ScheduleKind::one_f_one_b, 2, 4, 1, 2), {shard, 2, 0, 0, false});
    run.spec.faults = parse_faults(fault_catalogue(), fault, "strategy.faults");
    try {
      run_conformance(run);
      ADD_FAILURE() << fault << " accepted inside a pipeline stage";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(fault), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("pipeline stage"), std::string::npos) << e.what();
    }
  }
}

TEST(PipelineConformance, PipeDream2BWMatchesDelayedWeightTraining) {
  for (int pp : {1, 2, 3, 4})
    for (int m : {pp, 2 * pp}) {
      auto run = run_of(pl::ScheduleKind::pipedream_2bw, pp, m);
      run.spec.train.steps = 4;
      auto r = run_conformance(run);
      EXPECT_TRUE(r.pass()) << explain(r);
      EXPECT_TRUE(r.bitwise_declared);
      EXPECT_NE(r.strategy.find("schedule=2bw"), std::string::npos) << r.strategy;
    }
  auto run = run_of(pl::ScheduleKind::pipedream_2bw, 2, 2, 1, 2);
  run.spec.train.steps = 3;
  run.spec.data.shard = dp::Shard::zero1;
  expect_bitwise_pass(run);
}

TEST(PipelineConformance, BubbleIsMeasuredBesideTheSimulatedOne) {
  PipelineReport rep;
  expect_bitwise_pass(run_of(pl::ScheduleKind::one_f_one_b, 4, 8), &rep);
  ASSERT_EQ(rep.busy_s.size(), 4u);
  ASSERT_EQ(rep.timeline.size(), 4u);
  for (int r = 0; r < 4; ++r) {
    EXPECT_GT(rep.busy_s[size_t(r)], 0);
    EXPECT_LE(rep.busy_s[size_t(r)], rep.wall_s[size_t(r)]);
    EXPECT_EQ(rep.timeline[size_t(r)].size(), 16u);  // 8 F + 8 BW
    // The actions' marks (DeviceTimeline) in order, apart, within the rank's wall.
    double last = 0;
    for (const auto& e : rep.timeline[size_t(r)]) {
      EXPECT_LE(last, e.start);
      EXPECT_LT(e.start, e.end);
      last = e.end;
    }
    EXPECT_LE(last, rep.wall_s[size_t(r)]);
  }
  EXPECT_GT(rep.measured_bubble_fraction, 0);
  EXPECT_LT(rep.measured_bubble_fraction, 1);
  EXPECT_GT(rep.simulated_bubble_fraction, 0);
  EXPECT_LT(rep.simulated_bubble_fraction, 1);
  ASSERT_TRUE(rep.declared.over_ideal.has_value());
  EXPECT_DOUBLE_EQ(*rep.declared.over_ideal, 3.0 / 8);
  EXPECT_NE(pl::render_timeline(rep.timeline, rep.makespan_s, 1).find("rank 3"), std::string::npos);
  const std::string line = describe_bubble(rep);
  EXPECT_NE(line.find("measured"), std::string::npos) << line;
  EXPECT_NE(line.find("(p-1)/m"), std::string::npos) << line;
  // With equal action costs the simulator reproduces the declared formula exactly.
  for (auto [k, v] : {std::pair{pl::ScheduleKind::gpipe, 1}, {pl::ScheduleKind::one_f_one_b, 1},
                      {pl::ScheduleKind::interleaved, 2}, {pl::ScheduleKind::zb_h1, 1}}) {
    const pl::ScheduleConfig sc{4, 8, v, 1};
    EXPECT_DOUBLE_EQ(pl::simulate(pl::make_schedule(k, sc), {}).bubble_over_ideal,
                     *pl::declared_bubble(k, sc, {}).over_ideal);
  }
}

TEST(PipelineConformance, InjectedFaultsAreCaught) {
  auto caught = [](StrategyRun run, const char* fault) {
    run.spec.faults = parse_faults(fault_catalogue(), fault, "strategy.faults");
    auto r = run_conformance(run);
    // Caught by the numerics, not only by the byte accounting.
    EXPECT_FALSE(all_pass(r.bits)) << "bits did not catch: " << r.strategy;
    EXPECT_FALSE(all_pass(r.rule)) << "the rule did not catch: " << r.strategy;
  };
  for (auto k : {pl::ScheduleKind::gpipe, pl::ScheduleKind::one_f_one_b, pl::ScheduleKind::zb_h1}) {
    caught(run_of(k, 2, 4), "skip_microbatch");
    caught(run_of(k, 3, 4), "grad_to_wrong_stage");
    caught(run_of(k, 2, 4), "tied_grad_not_summed");
  }
  caught(run_of(pl::ScheduleKind::interleaved, 2, 4, 2), "tied_grad_not_summed");
  caught(run_of(pl::ScheduleKind::zb_h1, 2, 4), "drop_w");
  caught(run_of(pl::ScheduleKind::zb_h1, 4, 4, 1, 2), "drop_w");
}

TEST(PipelineConformance, ChaosDelaysChangeNothing) {
  auto run = run_of(pl::ScheduleKind::one_f_one_b, 3, 6, 1, 2);
  run.world.chaos.enabled = true;
  run.world.chaos.seed = 11;
  run.world.chaos.max_delay_us = 300;
  expect_bitwise_pass(run);
}

TEST(PipelineConformance, BadSchedulesAndConfigsGetClearErrors) {
  auto rejected = [](const StrategyRun& run, const std::string& says) {
    try {
      run_conformance(run);
      ADD_FAILURE() << "accepted: " << says;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  rejected(run_of(pl::ScheduleKind::interleaved, 4, 6, 2), "divisible by pp");
  rejected(run_of(pl::ScheduleKind::one_f_one_b, 4, 4, 3), "virtual");  // v > 1 is interleaved only
  auto deep = run_of(pl::ScheduleKind::interleaved, 4, 4, 3);
  rejected(deep, "more stages than layers");
  auto no_w = run_of(pl::ScheduleKind::one_f_one_b, 2, 4);  // the fault of one schedule only
  no_w.spec.faults = parse_faults(fault_catalogue(), "drop_w", "strategy.faults");
  rejected(no_w, "fault drop_w: does not apply to 1f1b (applies to: zb-h1");
  WorldOptions w;
  w.size = 3;
  auto world3 = make_local_world(w);
  try {
    run_conformance(run_of(pl::ScheduleKind::one_f_one_b, 2, 2), *world3);
    ADD_FAILURE() << "pp 2 accepted on a world of 3";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("needs 2 ranks, the world has 3"), std::string::npos) << e.what();
  }
}

// train.device = cuda on a stand-in device per rank (reference/device_testing.h,
// as DpConformance.OnADeviceEachRankTrainsAsOnTheCpu): every schedule's
// stages, the data axis inside them, the messages between them and 2BW's
// weight versions go through the device path, judged as on a GPU, and train
// bit for bit as the CPU run (the stand-in's arithmetic is the CPU's).
TEST(PipelineConformance, OnADeviceEachRankTrainsAsOnTheCpu) {
  struct Case {
    pl::ScheduleKind kind;
    int pp, m, v, dp;
    dp::Shard shard;
    Precision p;
  };
  const Case cases[] = {
      {pl::ScheduleKind::one_f_one_b, 2, 4, 1, 1, dp::Shard::none, Precision::fp32},
      {pl::ScheduleKind::one_f_one_b, 2, 4, 1, 1, dp::Shard::none, Precision::bf16_mixed},
      {pl::ScheduleKind::gpipe, 2, 2, 1, 2, dp::Shard::zero1, Precision::fp32},
      {pl::ScheduleKind::gpipe, 2, 2, 1, 2, dp::Shard::zero3, Precision::bf16_mixed},
      {pl::ScheduleKind::zb_h1, 2, 2, 1, 1, dp::Shard::none, Precision::fp32},
      {pl::ScheduleKind::interleaved, 2, 2, 2, 1, dp::Shard::none, Precision::fp32},
      {pl::ScheduleKind::interleaved, 1, 2, 2, 1, dp::Shard::none, Precision::fp32},  // chunks hand over locally
      {pl::ScheduleKind::pipedream_2bw, 2, 2, 1, 1, dp::Shard::none, Precision::fp32},
  };
  for (const Case& c : cases) {
    StrategyRun s = run_of(c.kind, c.pp, c.m, c.v, c.dp, c.p);
    s.spec.data.shard = c.shard;
    const testing::StandInRuns runs = testing::expect_stand_ins_train_as_the_cpu(
        s, std::string(pl::schedule_name(c.kind)) + " " + mesh_text(s.spec.mesh) + " " + precision_name(c.p));
    const ConformanceResult &cpu = runs.cpu, &r = runs.device;
    EXPECT_EQ(r.exact_of("mem.activations").measured, cpu.exact_of("mem.activations").measured) << r.strategy;
    // A device's kernels keep their own workspaces: the CPU's GEMM staging
    // and attention scores are not held (nor declared) on it.
    EXPECT_LT(r.exact_of("mem.workspace").measured, cpu.exact_of("mem.workspace").measured) << r.strategy;
  }
  // ZeRO-Offload inside the stages: the host steps each stage's shard.
  StrategyRun s = run_of(pl::ScheduleKind::one_f_one_b, 2, 2, 1, 2, Precision::bf16_mixed);
  s.spec.data.shard = dp::Shard::zero2;
  s.spec.data.offload = dp::Offload::optimizer;
  const testing::StandInRuns runs = testing::expect_stand_ins_train_as_the_cpu(s, "dp2.pp2 1f1b zero2 + offload bf16");
  EXPECT_EQ(runs.device.exact_of("mem.optimizer").measured, 0);
  EXPECT_GT(runs.device.exact_of("mem.optimizer.host").measured, runs.cpu.exact_of("mem.optimizer.host").measured);
}

// One rank on a guarded stand-in: its memory opens only inside the device's
// ops, so any host read or write of a device buffer by the executor (tokens,
// the local hand-over, head gradients, 2BW's copies) faults.
TEST(PipelineConformance, OnADeviceTheExecutorTouchesDeviceMemoryOnlyThroughItsOps) {
  for (pl::ScheduleKind k : {pl::ScheduleKind::interleaved, pl::ScheduleKind::pipedream_2bw}) {
    StrategyRun s = run_of(k, 1, 2, k == pl::ScheduleKind::interleaved ? 2 : 1);
    s.spec.train.device = Device::cuda;
    testing::StandInDevices devices(/*guarded=*/true);
    s.open_device = [&] { return devices.open(); };
    const ConformanceResult r = run_conformance(s);
    EXPECT_TRUE(r.pass()) << explain(r);
  }
}

// Messages matched by order alone, as nccl matches them (the local backend's
// match_by_order; the executor posts each run of messages as one group):
// every schedule trains bitwise as with tags, interleaved with m > pp posted
// as Megatron posts it (one exchange around each F-backward pair, since as
// generated it deadlocks under nccl's rendezvous sends: validate_test), on
// the CPU and on stand-in devices.
TEST(PipelineConformance, MessagesMatchedByOrderAloneAsOnNccl) {
  struct Case {
    pl::ScheduleKind kind;
    int pp, m, v;
  };
  for (const Case c : {Case{pl::ScheduleKind::gpipe, 3, 4, 1}, Case{pl::ScheduleKind::one_f_one_b, 3, 5, 1},
                       Case{pl::ScheduleKind::one_f_one_b, 4, 2, 1}, Case{pl::ScheduleKind::zb_h1, 3, 4, 1},
                       Case{pl::ScheduleKind::interleaved, 2, 2, 2}, Case{pl::ScheduleKind::interleaved, 3, 3, 2},
                       Case{pl::ScheduleKind::interleaved, 2, 4, 2}, Case{pl::ScheduleKind::interleaved, 3, 6, 2},
                       Case{pl::ScheduleKind::pipedream_2bw, 2, 3, 1}}) {
    StrategyRun s = run_of(c.kind, c.pp, c.m, c.v);
    s.world.match_by_order = true;
    expect_bitwise_pass(s);
  }
  StrategyRun s = run_of(pl::ScheduleKind::interleaved, 2, 4, 2, /*dp=*/1, Precision::bf16_mixed);
  s.world.match_by_order = true;
  testing::expect_stand_ins_train_as_the_cpu(s, "interleaved pp2 m4 v2 matched by order, on stand-in devices");
}

TEST(PipelineConformance, OnADeviceTheRunSaysWhatItCannotDo) {
  StrategyRun s = run_of(pl::ScheduleKind::one_f_one_b, 2, 2);
  s.spec.train.device = Device::cuda;
  s.spec.train.model = named_model("tiny-moe");
  EXPECT_NO_THROW(validate(s.spec)) << "mixture-of-experts stages run on a device";
  s.spec.data.shard = dp::Shard::zero2;
  s.spec.data.offload = dp::Offload::optimizer;
  EXPECT_NO_THROW(validate(s.spec)) << "optimizer offload inside stages runs on a device";
  s.spec.train.precision = Precision::fp64;
  try {
    validate(s.spec);
    ADD_FAILURE() << "fp64 accepted on a device";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("train.device: cuda runs fp32 and bf16-mixed"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace pb
