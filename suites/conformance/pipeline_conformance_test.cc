// Pipeline schedules under the conformance engine: every synchronous schedule
// is bitwise equal to the reference replaying its microbatch order (and so to
// each other) for pp in {1..4}, m from below p to 4p, virtual stages for
// interleaved, composed with DDP and ZeRO-1; PipeDream-2BW is bitwise equal to
// delayed-weight training; declared activation and p2p bytes hold exactly;
// injected faults are caught; bad configs are rejected.
#include <gtest/gtest.h>

#include <cmath>
#include <tuple>

#include "harness/status.h"
#include "suites/conformance/pipeline_engine.h"

namespace pb {
namespace {

namespace pl = pipeline;

PipelineRun run_of(pl::ScheduleKind k, int pp, int m, int v = 1, int dp = 1, Precision p = Precision::fp32) {
  PipelineRun r;
  r.cfg.model = named_model("tiny");
  r.cfg.model.L = 8;  // room for pp * v <= 8 stages
  r.cfg.precision = p;
  r.cfg.steps = 2;
  r.cfg.batch = dp * m;  // one sequence per microbatch
  r.cfg.seq = 8;
  r.cfg.microbatches = m;
  r.cfg.optim.lr = 3e-3;
  r.pipe.kind = k;
  r.pipe.pp = pp;
  r.pipe.virtual_stages = v;
  r.pipe.dp = dp;
  r.world.timeout_s = 60;
  return r;
}

std::string explain(const ConformanceResult& r) {
  return r.strategy + " " + precision_name(r.precision) + ":" + describe_failures(r);
}

void expect_bitwise_pass(const PipelineRun& run, PipelineReport* rep = nullptr) {
  auto r = run_pipeline_conformance(run, rep);
  EXPECT_TRUE(r.pass()) << explain(r);
  EXPECT_TRUE(r.bitwise_declared) << r.strategy;
  EXPECT_FALSE(r.bits.empty()) << r.strategy;
  ASSERT_EQ(r.exact.size(), 3u) << r.strategy;  // activations, p2p sends, tied all-reduce
  EXPECT_GT(r.exact[0].measured, 0) << r.strategy;
  if (run.pipe.pp > 1) {
    EXPECT_GT(r.exact[1].declared, 0) << r.strategy;
  }
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
    PipelineReport rep;
    expect_bitwise_pass(run_of(k, pp, 4, v), &rep);
    traces.push_back(rep.trace);
  }
  const auto n = size_t(ParamLayout(run_of(pl::ScheduleKind::gpipe, 1, 1).cfg.model).total());
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
    for (auto mode : {pl::DpMode::ddp, pl::DpMode::zero1})
      for (auto [pp, dp] : {std::pair{2, 2}, {2, 4}, {4, 2}, {2, 3}, {1, 4}}) {
        for (auto [k, v] : {std::pair{pl::ScheduleKind::one_f_one_b, 1}, {pl::ScheduleKind::zb_h1, 1},
                            {pl::ScheduleKind::interleaved, 2}}) {
          auto run = run_of(k, pp, 2 * pp, v, dp, p);
          run.pipe.dp_mode = mode;
          expect_bitwise_pass(run);
        }
      }
}

TEST(PipelineConformance, PipeDream2BWMatchesDelayedWeightTraining) {
  for (int pp : {1, 2, 3, 4})
    for (int m : {pp, 2 * pp}) {
      auto run = run_of(pl::ScheduleKind::pipedream_2bw, pp, m);
      run.cfg.steps = 4;
      auto r = run_pipeline_conformance(run);
      EXPECT_TRUE(r.pass()) << explain(r);
      EXPECT_TRUE(r.bitwise_declared);
      EXPECT_NE(r.strategy.find("delayed-weight"), std::string::npos) << r.strategy;
    }
  auto run = run_of(pl::ScheduleKind::pipedream_2bw, 2, 2, 1, 2);
  run.cfg.steps = 3;
  run.pipe.dp_mode = pl::DpMode::zero1;
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
  auto caught = [](PipelineRun run, auto set) {
    set(run.pipe.faults);
    auto r = run_pipeline_conformance(run);
    // Caught by the numerics, not only by the byte accounting.
    EXPECT_FALSE(all_pass(r.bits)) << "bits did not catch: " << r.strategy;
    EXPECT_FALSE(all_pass(r.rule)) << "the rule did not catch: " << r.strategy;
  };
  for (auto k : {pl::ScheduleKind::gpipe, pl::ScheduleKind::one_f_one_b, pl::ScheduleKind::zb_h1}) {
    caught(run_of(k, 2, 4), [](pl::PipelineFaults& f) { f.skip_microbatch = true; });
    caught(run_of(k, 3, 4), [](pl::PipelineFaults& f) { f.grad_to_wrong_stage = true; });
    caught(run_of(k, 2, 4), [](pl::PipelineFaults& f) { f.tied_grad_not_summed = true; });
  }
  caught(run_of(pl::ScheduleKind::interleaved, 2, 4, 2), [](pl::PipelineFaults& f) { f.tied_grad_not_summed = true; });
  caught(run_of(pl::ScheduleKind::zb_h1, 2, 4), [](pl::PipelineFaults& f) { f.drop_w = true; });
  caught(run_of(pl::ScheduleKind::zb_h1, 4, 4, 1, 2), [](pl::PipelineFaults& f) { f.drop_w = true; });
}

TEST(PipelineConformance, ChaosDelaysChangeNothing) {
  auto run = run_of(pl::ScheduleKind::one_f_one_b, 3, 6, 1, 2);
  run.world.chaos.enabled = true;
  run.world.chaos.seed = 11;
  run.world.chaos.max_delay_us = 300;
  expect_bitwise_pass(run);
}

TEST(PipelineConformance, BadSchedulesAndConfigsGetClearErrors) {
  auto rejected = [](const PipelineRun& run, const std::string& says) {
    try {
      run_pipeline_conformance(run);
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
  no_w.pipe.faults.drop_w = true;
  rejected(no_w, "fault drop_w: does not apply to 1f1b (applies to: zb-h1");
  WorldOptions w;
  w.size = 3;
  auto world3 = make_local_world(w);
  try {
    run_pipeline_conformance(run_of(pl::ScheduleKind::one_f_one_b, 2, 2), *world3);
    ADD_FAILURE() << "pp 2 accepted on a world of 3";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("does not divide world"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace pb
