// The executor on small configs: pp = 1 with m microbatches is gradient
// accumulation (bitwise equal to the reference with micro = m); a 1F1B run is
// bitwise equal to its replay; bad configs are rejected with the field named.
#include "impl/pipeline/executor.h"

#include <gtest/gtest.h>

#include "harness/comm/runner.h"
#include "harness/mesh.h"
#include "harness/status.h"
#include "impl/pipeline/strategy.h"
#include "impl/pipeline/validate.h"

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

// The comm buffers a stage's schedule-order replay declares
// (stage_comm_peak_bytes) are the peak the executor measures on the local
// backend, rank by rank: every schedule, every data-parallel family, the
// tensor axis inside a stage, MoE stages with their expert component, one
// rank's interleaved chunks handing gradients over locally; with messages
// matched by order (as on nccl), of the schedule as posted there
// (posted_without_tags: interleaved with m > pp receives a gradient before
// the F paired with its backward).
TEST(Executor, CommBufferPeakIsTheScheduleOrderReplay) {
  struct Case {
    const char* mesh;
    const char* strategy;
    const char* model;
    int micro;
    bool by_order = false;
  };
  const std::vector<Case> cases = {
      {"pp2", "shard=none,schedule=gpipe", "tiny", 2},
      {"dp2.pp2", "shard=none,schedule=1f1b", "tiny", 4},
      {"dp2.pp2", "shard=zero1,schedule=1f1b", "tiny", 4},
      {"dp2.pp2", "shard=zero2,schedule=1f1b", "tiny", 4},
      {"dp2.pp2", "shard=zero3,schedule=1f1b", "tiny", 4},
      {"dp2.pp2", "shard=zero3,schedule=gpipe", "tiny", 2},
      {"dp2.pp2.rpn1", "shard=hzero,schedule=1f1b", "tiny", 2},
      {"dp4.pp2", "shard=hsdp,shard_group=2,schedule=1f1b", "tiny", 2},
      {"dp2.pp2", "shard=zero2,schedule=zb-h1", "tiny", 2},
      {"dp2.pp2", "shard=zero3,schedule=zb-h1", "tiny", 4},
      {"dp2.pp2", "shard=zero1,schedule=2bw", "tiny", 2},
      {"pp2", "shard=none,schedule=interleaved,virtual_stages=2", "small", 4},
      {"dp2.pp2", "shard=zero3,schedule=interleaved,virtual_stages=2", "small", 2},
      {"dp1", "shard=zero2,schedule=interleaved,virtual_stages=2", "tiny", 2},
      {"tp2.pp2", "shard=zero3,sp=on,schedule=1f1b", "tiny", 2},
      {"dp2.ep2.pp2", "shard=none,schedule=1f1b", "tiny-moe", 2},
      {"dp2.ep2.pp2", "shard=zero3,schedule=1f1b", "tiny-moe", 2},
      {"pp2", "shard=none,schedule=interleaved,virtual_stages=2", "small", 4, true},
      {"dp2.pp2", "shard=zero3,schedule=interleaved,virtual_stages=2", "small", 4, true},
      {"dp2.pp2", "shard=zero1,schedule=1f1b", "tiny", 4, true},
  };
  for (const Case& c : cases) {
    RunSpec s;
    s.mesh = parse_mesh(c.mesh);
    apply_strategy_text(s, c.strategy, fault_decls());  // no faults here: the pipeline's table
    s.train.model = named_model(c.model);
    s.train.steps = 2;
    s.train.seq = 8;
    s.train.microbatches = c.micro;
    s.train.batch = 2 * c.micro * s.mesh.dp;
    const PipelineOptions o = options_of(s);
    const std::string what = std::string(c.mesh) + " " + c.strategy + " " + c.model + (c.by_order ? " by order" : "");
    const TrainConfig& cfg = s.train;
    const int world = s.world();
    std::vector<int64_t> measured(size_t(world), -1);
    WorldOptions wo;
    wo.match_by_order = c.by_order;
    run_local(
        world,
        [&](Communicator& comm) {
          PipelineRank<float> r(cfg, o, comm);
          r.train(cfg.steps, nullptr);
          measured[size_t(comm.rank())] = int64_t(r.memory().peak(MemTag::comm, Place::device));
        },
        wo);
    const Partition part = partition_layers(cfg.model.L, o.pp, o.virtual_stages);
    Schedule sched = make_schedule(o.kind, schedule_config(o, cfg));
    if (c.by_order) sched = posted_without_tags(std::move(sched));
    const MeshShape mesh{o.dp(), o.tp(), o.cp(), o.pp, o.data.ranks_per_node * o.tp() * o.cp(), o.ep};
    for (int rank = 0; rank < world; ++rank) {
      const MeshCoord at = mesh_coord(mesh, rank);
      const ParamLayout layout(cfg.model, o.tp(), at.tp);
      StageCommShape x;
      x.units = stage_units(layout, part, at.pp);
      x.dense = dp::data_axis(o.component(), cfg.precision, cfg.microbatches);
      if (cfg.model.moe.experts > 0) {
        x.experts = stage_experts(layout, part, at.pp, o.ep, at.ep);
        x.expert = dp::data_axis(o.experts, cfg.precision, cfg.microbatches);
      }
      int64_t tokens = int64_t(cfg.batch / (o.dp() * cfg.microbatches)) * cfg.seq / o.cp();
      if (o.tensor.sp) tokens /= o.tp();
      x.boundary_bytes = tokens * cfg.model.C * int64_t(sizeof(float));
      x.tp = o.tp() > 1 || o.cp() > 1;
      EXPECT_EQ(stage_comm_peak_bytes(sched, part, layout, at.pp, x), measured[size_t(rank)])
          << what << " rank " << rank;
      EXPECT_GT(measured[size_t(rank)], 0) << what << " rank " << rank;  // every case holds some
    }
  }
}

}  // namespace
}  // namespace pb::pipeline
