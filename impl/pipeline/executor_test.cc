// The executor on small configs: pp = 1 with m microbatches is gradient
// accumulation (bitwise equal to the reference with micro = m); a 1F1B run is
// bitwise equal to its replay; bad configs are rejected with the field named.
#include "impl/pipeline/executor.h"

#include <gtest/gtest.h>

#include "harness/comm/runner.h"
#include "harness/status.h"

namespace pb::pipeline {
namespace {

TrainConfig tiny(int steps, int batch, int micro) {
  TrainConfig c;
  c.model = named_model("tiny");
  c.steps = steps;
  c.batch = batch;
  c.seq = 8;
  c.microbatches = micro;
  return c;
}

// Loss of each step and the final parameters from rank 0.
std::pair<std::vector<double>, std::vector<double>> run_pipeline(const TrainConfig& cfg, const PipelineOptions& o) {
  std::vector<double> losses, params;
  run_local(o.pp * o.dp(), [&](Communicator& c) {
    PipelineRank<float> r(cfg, o, c);
    std::vector<double> l;
    for (int s = 0; s < cfg.steps; ++s) l.push_back(r.step().loss);
    auto p = r.full_params();
    if (c.rank() == 0) {
      losses = l;
      params = p;
    }
  });
  return {losses, params};
}

TEST(Executor, OneStageIsGradientAccumulation) {
  const TrainConfig cfg = tiny(2, 4, 2);
  PipelineOptions o;
  o.kind = ScheduleKind::gpipe;
  auto [loss, params] = run_pipeline(cfg, o);
  ReferenceTrainer<float> ref(cfg, SplitPlan{1, 2, true, {}});
  for (int s = 0; s < cfg.steps; ++s) EXPECT_EQ(ref.step().loss, loss[size_t(s)]);
  EXPECT_EQ(ref.params_f64(), params);
}

TEST(Executor, OneFOneBMatchesItsReplayBitwise) {
  const TrainConfig cfg = tiny(2, 4, 4);
  PipelineOptions o;
  o.pp = 2;
  auto [loss, params] = run_pipeline(cfg, o);
  ReferenceTrainer<float> ref(cfg, pipeline_replay_plan(o, cfg));
  for (int s = 0; s < cfg.steps; ++s) EXPECT_EQ(ref.step().loss, loss[size_t(s)]);
  EXPECT_EQ(ref.params_f64(), params);
}

void expect_rejected(const PipelineOptions& o, const TrainConfig& cfg, int world, const std::string& says) {
  try {
    validate(o, cfg, world);
    ADD_FAILURE() << "accepted: " << says;
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
  }
}

TEST(Executor, BadConfigsAreRejectedWithTheFieldNamed) {
  PipelineOptions o;
  o.pp = 2;
  o.kind = ScheduleKind::interleaved;
  o.virtual_stages = 2;
  TrainConfig cfg = tiny(1, 6, 3);
  cfg.model.L = 4;
  expect_rejected(o, cfg, 2, "divisible by pp");  // interleaved needs m % pp == 0
  o = {};
  o.pp = 3;
  expect_rejected(o, tiny(1, 6, 3), 3, "more stages than layers");
  o.pp = 2;
  expect_rejected(o, tiny(1, 4, 2), 3, "does not divide world");
  expect_rejected(o, tiny(1, 3, 2), 2, "train.batch");
  o.faults.drop_w = true;
  expect_rejected(o, tiny(1, 4, 2), 2, "drop_w");
}

}  // namespace
}  // namespace pb::pipeline
