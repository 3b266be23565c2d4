// The planner's mixture-of-experts compositions held to the ranks that run
// them: sequence parallel, recompute and context parallel outside pipelines
// (expert with context parallel too: ep folded over dp x cp), and in pipeline
// stages tensor, sequence and context parallel, recompute, PipeDream-2BW and
// zb-h1 with MoE stages. For each run spec the plan (plan_input_of, as
// `parabench plan` takes it) holds per pipeline rank what the engine's ranks
// allocate, tag by tag (device peaks after the run's steps, max over the
// stage's ranks), and per group the bytes they move (the comm log), with the
// routing-dependent rows (the experts' tp all-reduces, the ep all-to-alls) at
// the rows the ranks routed. The llama family's MoE (tiny-mixtral: SwiGLU
// experts, no biases) is held the same way under every axis, but for its
// activations (the planner's analytic count) and workspace (not modelled).
// The compositions the engine does not run yet are refused, saying so.
#include <gtest/gtest.h>

#include <array>
#include <map>
#include <mutex>
#include <string>

#include "harness/comm/runner.h"
#include "harness/mesh.h"
#include "harness/status.h"
#include "impl/expert_parallel/cost.h"
#include "impl/pipeline/stage.h"
#include "impl/registry.h"
#include "impl/spec/run_spec.h"
#include "reference/device_testing.h"
#include "suites/planner/machine.h"
#include "suites/planner/plan_input.h"
#include "suites/planner/planner_testing.h"
#include "suites/planner/planner.h"

namespace pb::planner {
namespace {

struct Case {
  const char* mesh;      // mesh text (dpN.epM.tpT.cpC.ppK)
  const char* strategy;  // strategy text (sp, recompute, schedule, shard, ...)
  const char* model;
  Precision p;
  int layers = 0;  // 0: the model's
  int microbatches = 1;
};

RunSpec spec_of(const Case& c) {
  RunSpec s;
  s.train.model = named_model(c.model);
  if (c.layers) s.train.model.L = c.layers;
  s.train.precision = c.p;
  s.train.seq = 16;
  s.train.steps = 3;
  s.mesh = parse_mesh(c.mesh);
  s.train.microbatches = c.microbatches;
  s.train.batch = 2 * c.microbatches * s.mesh.dp;
  apply_strategy_text(s, c.strategy, fault_catalogue());
  validate(s);
  return s;
}

// What one rank measured over the run's steps: the logical bytes per
// (group, op) of its comm log and the rows its MoE layers routed.
struct RankMeasure {
  int stage = 0;
  std::map<std::string, int64_t> bytes;  // "group op"
  int64_t calls = 0, sent_rows = 0, owner_rows = 0;
};
// What the ranks of `s` measured: per pipeline rank and tag the device peak
// (max over the stage's ranks), and every rank's traffic.
struct Measured {
  std::vector<std::array<int64_t, kNumMemTags>> peaks;
  std::vector<RankMeasure> ranks;
};

Measured run_ranks(const RunSpec& s, bool on_device) {
  const Strategy& st = strategy_for(s);
  st.validate(s);
  RunSpec run = s;
  if (on_device) run.train.device = Device::cuda;
  Measured out;
  out.peaks.resize(size_t(s.mesh.pp));
  out.ranks.resize(size_t(s.world()));
  std::mutex mu;
  testing::StandInDevices devices;
  run_local(run.world(), [&](Communicator& w) {
    const std::shared_ptr<TrainDevice> device = on_device ? devices.open() : nullptr;  // outlives the rank
    std::unique_ptr<Rank> rank = st.make_rank(run, w, device.get());
    rank->train(run.train.steps, nullptr);
    RankMeasure me;
    me.stage = mesh_coord(run.mesh, w.rank()).pp;
    for (const std::string& g : w.log().groups())
      for (int op = 0; op < kNumCommOps; ++op)
        if (const int64_t b = int64_t(w.log().get(g, CommOp(op)).bytes))
          me.bytes[g + " " + std::string(comm_op_name(CommOp(op)))] = b;
    const MoeLoad load = rank->moe_load();
    me.calls = load.calls, me.sent_rows = load.sent_rows, me.owner_rows = load.owner_rows;
    std::lock_guard lk(mu);
    for (int t = 0; t < kNumMemTags; ++t)
      out.peaks[size_t(me.stage)][size_t(t)] =
          std::max(out.peaks[size_t(me.stage)][size_t(t)], int64_t(rank->memory().peak(MemTag(t), Place::device)));
    out.ranks[size_t(w.rank())] = std::move(me);
  });
  return out;
}

std::string where_of(const Case& c, bool on_device) {
  return std::string(c.model) + " " + c.mesh + " " + c.strategy + " " + precision_name(c.p) +
         (on_device ? " on h100" : "");
}

// The plan's comm rows as a rank's log names them: per (group, op), a
// send_recv as its send, the tied embedding's sum on pp_tied.
std::map<std::string, int64_t> plan_bytes(const PlanResult& r) {
  std::map<std::string, int64_t> out;
  for (const CommRow& row : r.comm) {
    const std::string group = row.group == "embedding" ? "pp_tied" : row.group;
    out[group + " " + (row.op == "send_recv" ? std::string("send") : row.op)] += row.bytes;
  }
  return out;
}

// The rows a balanced router sends each MoE block of one microbatch (the
// plan's): the microbatch's tokens on this rank under its capacity scope
// (global capacity over dp >= 2 joins the data ranks; the cp ranks of a
// data rank share its microbatch).
int64_t balanced_rows(const RunSpec& s) {
  const ModelConfig& m = s.train.model;
  const int64_t b = s.train.batch / s.mesh.dp / s.train.microbatches, cp = s.mesh.cp;
  const bool joint = m.moe.capacity == MoeCapacity::global && s.mesh.dp > 1;
  const int64_t ranks = (joint ? s.mesh.dp : 1) * cp;
  return ep::balanced_rows(m, b * s.train.seq / cp, ranks > 1 ? b * s.train.seq / cp * ranks : 0);
}

void expect_plan_is_the_ranks(const Case& c, bool on_device) {
  const RunSpec s = spec_of(c);
  PlanInput in = plan_input_of(s);
  if (on_device) in.hw = hardware_for(load_machine("h100"), c.p);
  in.pp_scatter_gather = false;  // the executor sends a stage boundary whole
  const PlanResult r = plan(in);
  const Measured m = run_ranks(s, on_device);
  const std::string where = where_of(c, on_device);
  ASSERT_EQ(r.stages.size(), size_t(s.mesh.pp)) << where;
  for (const StageMemory& st : r.stages) {
    const auto& pk = m.peaks[size_t(st.stage)];
    const std::string at = where + " stage " + std::to_string(st.stage);
    EXPECT_EQ(st.params, pk[int(MemTag::params)]) << at;
    EXPECT_EQ(st.grads, pk[int(MemTag::grads)]) << at;
    EXPECT_EQ(st.optimizer, pk[int(MemTag::optimizer)]) << at;
    EXPECT_EQ(st.comm, pk[int(MemTag::comm)]) << at;
    // The llama family's activations are the planner's analytic count and its
    // runners' workspace is not modelled (docs/planner.md#the-llama-family):
    // its states, comm buffers and bytes are held here, those two are not.
    if (s.train.model.llama()) {
      EXPECT_EQ(st.workspace, -1) << at;
      continue;
    }
    EXPECT_EQ(st.activations, pk[int(MemTag::activations)]) << at;
    EXPECT_EQ(st.workspace, pk[int(MemTag::workspace)]) << at;
  }
  // Bytes per group and op of every rank of the plan's stage: the plan's,
  // its balanced rows replaced by the ones the rank routed (each row is C
  // elements: the experts' tp all-reduce forward and backward, the ep
  // dispatch and combine both ways, and full recompute's rerun once more).
  const ModelConfig& model = s.train.model;
  const int64_t e = c.p == Precision::fp32 ? 4 : 2, passes = s.tensor.recompute == Recompute::full ? 3 : 2;
  const pipeline::Partition part = pipeline::partition_layers(model.L, s.mesh.pp, s.pipe.virtual_stages);
  int64_t moe_blocks = 0;  // the plan's stage's
  for (int ch = 0; ch < part.v; ++ch) {
    const pipeline::StageSlice& sl = part.at(r.worst.stage, ch);
    for (int b = sl.first_block; b < sl.first_block + sl.num_blocks; ++b) moe_blocks += model.is_moe(b);
  }
  const int64_t planned_rows = int64_t(s.train.steps) * s.train.microbatches * moe_blocks * balanced_rows(s);
  std::map<std::string, int64_t> planned = plan_bytes(r);
  for (auto& [key, bytes] : planned) bytes *= s.train.steps;
  int compared = 0;
  for (size_t k = 0; k < m.ranks.size(); ++k) {
    const RankMeasure& rk = m.ranks[k];
    if (rk.stage != r.worst.stage) continue;
    std::map<std::string, int64_t> want = planned;
    if (s.mesh.tp > 1 && model.moe.experts > 0)
      want["tp all_reduce"] += passes * (rk.owner_rows - planned_rows) * model.C * e;
    if (s.mesh.ep > 1) want["ep all_to_all"] += passes * (rk.sent_rows + rk.owner_rows - 2 * planned_rows) * model.C * e;
    for (const auto& [key, bytes] : rk.bytes) {
      const std::string group = key.substr(0, key.find(' '));
      if (group == "check" || group.find("scalar") != std::string::npos || key.ends_with(" recv")) continue;
      EXPECT_EQ(want[key], bytes) << where << " rank " << k << ": " << key;
      ++compared;
    }
    for (const auto& [key, bytes] : want)
      EXPECT_TRUE(bytes == 0 || rk.bytes.count(key)) << where << " rank " << k << ": planned " << key << " "
                                                     << bytes << ", measured none";
  }
  EXPECT_GT(compared, 0) << where;
}

// Outside pipelines: sequence parallel, recompute (selective, full; tp 1
// too) and context parallel (ring, Ulysses; ep 1), with data, expert and
// tensor parallel, capacity modes, data options and precisions.
TEST(PlannerMoe, SpRecomputeAndCpAreTheRanks) {
  const Case cases[] = {
      {"dp2.tp2", "sp=on", "tiny-moe", Precision::fp32},
      {"dp2.ep2.tp2", "sp=on", "tiny-moe", Precision::bf16_mixed},
      {"dp2.tp2", "recompute=selective", "tiny-moe-local", Precision::fp32},
      {"dp2.ep2.tp2", "sp=on,recompute=full", "tiny-moe", Precision::fp32},
      {"dp2.ep2.tp2", "recompute=full,shard=zero3", "tiny-moe", Precision::bf16_mixed},
      {"dp2.ep2", "recompute=full,shard=zero1", "tiny-moe", Precision::fp32},
      {"dp2", "recompute=selective,shard=zero2", "tiny-moe", Precision::bf16_mixed},
      {"dp1.cp2", "cp_algo=ring", "tiny-moe", Precision::fp32},
      {"dp2.cp2", "cp_algo=ulysses,shard=zero2", "tiny-moe", Precision::bf16_mixed},
      {"dp2.tp2.cp2", "sp=on,recompute=selective", "tiny-moe-local", Precision::fp32},
      {"dp2.tp2.cp2", "recompute=full,shard=zero1", "tiny-moe", Precision::fp32},
      // expert with context parallel: ep folded over dp x cp (cp fastest)
      {"dp1.cp2.ep2", "cp_algo=ring", "tiny-moe", Precision::fp32},
      {"dp2.cp2.ep2", "cp_algo=ulysses,shard=zero1", "tiny-moe", Precision::bf16_mixed},
      {"dp2.cp2.ep4", "cp_algo=ring,shard=zero2", "tiny-moe-local", Precision::fp32},
      {"dp2.tp2.cp2.ep2", "sp=on,recompute=full", "tiny-moe", Precision::fp32},
      {"dp2.cp2.ep2", "recompute=selective,shard=zero3", "tiny-moe", Precision::fp32},
  };
  for (const Case& c : cases) {
    expect_plan_is_the_ranks(c, false);
    expect_plan_is_the_ranks(c, true);  // on stand-in devices: no CPU kernel workspace, routing state on the host
  }
}

// The llama family's MoE (SwiGLU experts, no biases; tiny-mixtral) under
// expert parallel, with data and tensor parallel, capacity modes, sharding
// and precisions: the ep rank's own state costs and every group's bytes.
TEST(PlannerMoe, LlamaExpertParallelIsTheRanks) {
  const Case cases[] = {
      {"dp2.ep2", "", "tiny-mixtral", Precision::fp32},
      {"dp4.ep2", "shard=zero1", "tiny-mixtral", Precision::bf16_mixed},
      {"dp2.ep2.tp2", "shard=zero3", "tiny-mixtral", Precision::fp32},
      {"dp4.ep4", "shard=zero2", "tiny-mixtral", Precision::bf16_mixed},
  };
  for (const Case& c : cases) expect_plan_is_the_ranks(c, false);  // (the family runs on the CPU only)
}

// The llama family's MoE in pipeline stages (with data, expert and tensor
// parallel, every schedule): every stage's states and comm buffers, the
// worst stage's bytes.
TEST(PlannerMoe, LlamaStagesAreTheRanks) {
  const Case cases[] = {
      {"dp2.ep2.pp2", "schedule=1f1b", "tiny-mixtral", Precision::fp32, 4, 4},
      {"dp1.tp2.pp2", "schedule=1f1b", "tiny-mixtral", Precision::fp32, 4, 4},
      {"dp2.ep2.tp2.pp2", "schedule=gpipe,shard=zero2", "tiny-mixtral", Precision::bf16_mixed, 4, 2},
      {"dp2.pp2", "schedule=interleaved,virtual_stages=2,shard=zero1", "tiny-mixtral", Precision::fp32, 8, 4},
      {"dp1.pp2", "schedule=2bw", "tiny-mixtral", Precision::fp32, 4, 4},
      {"dp2.ep2.pp2", "schedule=zb-h1", "tiny-mixtral", Precision::fp32, 4, 4},
  };
  for (const Case& c : cases) expect_plan_is_the_ranks(c, false);
}

// The llama family's MoE under sequence parallel, recompute (selective,
// full) and context parallel (ring, Ulysses; with ep folded over dp x cp),
// outside pipelines and in stages.
TEST(PlannerMoe, LlamaSpCpRecomputeAreTheRanks) {
  const Case cases[] = {
      {"dp2.tp2", "sp=on", "tiny-mixtral", Precision::fp32},
      {"dp2.ep2.tp2", "sp=on,recompute=full", "tiny-mixtral", Precision::fp32},
      {"dp2.ep2", "recompute=selective,shard=zero1", "tiny-mixtral", Precision::bf16_mixed},
      {"dp1.cp2", "cp_algo=ring", "tiny-mixtral", Precision::fp32},
      {"dp2.cp2.ep2", "cp_algo=ulysses,shard=zero2", "tiny-mixtral", Precision::fp32},
      {"dp2.tp2.pp2", "schedule=1f1b,sp=on", "tiny-mixtral", Precision::fp32, 4, 4},
      {"dp2.ep2.pp2", "schedule=gpipe,recompute=full", "tiny-mixtral", Precision::fp32, 4, 2},
      {"dp2.cp2.pp2", "schedule=1f1b,cp_algo=ring", "tiny-mixtral", Precision::fp32, 4, 4},
  };
  for (const Case& c : cases) expect_plan_is_the_ranks(c, false);
}

// Pipeline stages: tensor parallel inside MoE stages (with data and expert
// parallel), and PipeDream-2BW with MoE stages (two weight versions; each
// microbatch's own capacity); every stage's memory, the worst stage's bytes.
TEST(PlannerMoe, TensorParallelAnd2bwStagesAreTheRanks) {
  const Case cases[] = {
      {"dp2.ep2.tp2.pp2", "schedule=1f1b", "tiny-moe", Precision::fp32, 4, 4},
      {"dp2.tp2.pp2", "schedule=interleaved,virtual_stages=2,shard=zero1", "tiny-moe", Precision::bf16_mixed, 8, 4},
      {"dp2.ep2.tp2.pp2", "schedule=gpipe,shard=zero2", "tiny-moe-e8-top1", Precision::fp32, 4, 2},
      {"dp1.pp2", "schedule=2bw", "tiny-moe", Precision::fp32, 4, 4},
      {"dp2.ep2.pp2", "schedule=2bw,shard=zero1", "tiny-moe-local", Precision::fp32, 4, 2},
      {"dp2.tp2.pp2", "schedule=2bw", "tiny-moe-local", Precision::bf16_mixed, 4, 4},
  };
  for (const Case& c : cases) {
    expect_plan_is_the_ranks(c, false);
    expect_plan_is_the_ranks(c, true);
  }
}

// Pipeline stages, continued (ctest planner_moe_stages_test, label full):
// sequence parallel, recompute (selective; full with its rerun's MoeActs)
// and context parallel (ep 1) in MoE stages, and zb-h1 with MoE stages.
TEST(PlannerMoe, SpCpRecomputeAndZbH1StagesAreTheRanks) {
  const Case cases[] = {
      // sequence parallel, recompute (selective, full; tp = cp = 1 too) and context parallel (ep 1) in MoE stages
      {"dp2.tp2.pp2", "schedule=1f1b,sp=on", "tiny-moe", Precision::fp32, 4, 4},
      {"dp2.ep2.tp2.pp2", "schedule=gpipe,recompute=full,shard=zero2", "tiny-moe", Precision::fp32, 4, 2},
      {"dp2.pp2", "schedule=1f1b,recompute=full", "tiny-moe", Precision::bf16_mixed, 4, 4},
      {"dp2.ep2.pp2", "schedule=interleaved,virtual_stages=2,recompute=selective,shard=zero1", "tiny-moe-local",
       Precision::fp32, 8, 4},
      {"dp2.cp2.pp2", "schedule=1f1b,cp_algo=ulysses", "tiny-moe", Precision::fp32, 4, 4},
      {"dp1.tp2.cp2.pp2", "schedule=gpipe,cp_algo=ring,sp=on,recompute=full", "tiny-moe",
       Precision::fp32, 4, 2},
      // zb-h1 with MoE stages: each MoE block's backward whole in B, W the dense blocks' alone
      {"dp2.ep2.pp2", "schedule=zb-h1", "tiny-moe", Precision::fp32, 4, 4},
      {"dp2.tp2.pp2", "schedule=zb-h1,sp=on", "tiny-moe", Precision::bf16_mixed, 4, 4},
      {"dp1.pp2", "schedule=zb-h1,recompute=selective,shard=zero2", "tiny-moe-e8-top1", Precision::fp32, 4, 4},
      {"dp2.cp2.pp2", "schedule=zb-h1,cp_algo=ring", "tiny-moe-local", Precision::fp32, 6, 4},
      // expert and context parallel together in MoE stages (ep folded over the stage's dp x cp ranks)
      {"dp2.cp2.ep2.pp2", "schedule=1f1b,cp_algo=ring", "tiny-moe", Precision::fp32, 4, 4},
      {"dp2.cp2.ep4.pp2", "schedule=interleaved,virtual_stages=2,shard=zero1", "tiny-moe-local",
       Precision::bf16_mixed, 8, 4},
      {"dp1.tp2.cp2.ep2.pp2", "schedule=gpipe,cp_algo=ring,sp=on,recompute=full", "tiny-moe", Precision::fp32,
       4, 2},
  };
  for (const Case& c : cases) {
    expect_plan_is_the_ranks(c, false);
    expect_plan_is_the_ranks(c, true);
  }
}

// The capacity scope's exchanges (group moe: dp x cp ranks at stride tp)
// cross nodes when the scope spans more ranks than a node holds.
TEST(PlannerMoe, CapacityExchangesCrossNodesWhenTheScopeDoes) {
  for (auto [rpn, inter] : {std::pair{int64_t(4), true}, {int64_t(8), false}}) {
    PlanInput in = model_input("tiny-moe", 1, 0, 16);
    in.dp = 2, in.tp = 2, in.cp = 2, in.ranks_per_node = rpn;
    int rows = 0;
    for (const CommRow& row : plan(in).comm)
      if (row.group == "moe") {
        EXPECT_EQ(row.inter_node, inter) << "ranks per node " << rpn;
        EXPECT_EQ(row.group_size, 4);  // dp 2 x cp 2
        ++rows;
      }
    EXPECT_EQ(rows, 2);
  }
}

// An ep group (ep consecutive values of the (cp, dp) index, at stride tp)
// crosses nodes when its ranks lie further apart than a node holds.
TEST(PlannerMoe, ExpertGroupsCrossNodesWhereTheirRanksDo) {
  struct Row {
    int dp, tp, cp, ep;
    int64_t rpn;
    bool inter;
  };
  for (const Row& w : {Row{4, 1, 1, 4, 2, true}, Row{4, 1, 1, 4, 4, false}, Row{2, 2, 1, 2, 2, true},
                       Row{2, 2, 1, 2, 4, false}, Row{2, 1, 2, 2, 2, false}, Row{2, 2, 2, 4, 4, true},
                       Row{2, 2, 2, 4, 8, false}}) {
    PlanInput in = model_input("tiny-moe", 1, 0, 16);
    in.dp = w.dp, in.tp = w.tp, in.cp = w.cp, in.ep = w.ep, in.ranks_per_node = w.rpn;
    int rows = 0;
    for (const CommRow& row : plan(in).comm)
      if (row.group == "ep") {
        EXPECT_EQ(row.inter_node, w.inter) << "dp" << w.dp << " tp" << w.tp << " cp" << w.cp << " ep" << w.ep
                                           << " ranks per node " << w.rpn;
        ++rows;
      }
    EXPECT_EQ(rows, 2);
  }
}

// What the engine does not run yet is refused, saying so and naming the
// composition: expert with context parallel in MoE pipeline stages, 2bw
// with global capacity over dp ranks, zb-h1 with full recompute.
TEST(PlannerMoe, WhatTheEngineDoesNotRunIsRefused) {
  auto refused = [](const char* mesh, const char* strategy, const char* model, const std::string& says) {
    PlanInput in = model_input(model, 1, 0, 16);
    in.shape->L = 4;
    RunSpec s;
    s.mesh = parse_mesh(mesh);
    apply_strategy_text(s, strategy, fault_catalogue());
    set_parallelism(in, s);
    in.global_batch = 4 * in.dp;
    try {
      plan(in);
      ADD_FAILURE() << mesh << " " << strategy << ": planned";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << mesh << " " << strategy << ": " << e.what();
    }
  };
  const std::string not_yet = "the engine does not run it yet";
  refused("dp2.pp2", "schedule=2bw", "tiny-moe", "global capacity over dp 2");
  refused("dp2.ep2.pp2", "schedule=zb-h1,recompute=full", "tiny-moe", "zb-h1 with recompute=full and a "
                                                                        "mixture-of-experts model: the engine does "
                                                                        "not run it");
  // The same compositions of a dense model still plan.
  PlanInput dense = model_input("tiny", 1, 8, 16);
  dense.dp = 2, dense.tp = 2, dense.pp = 2, dense.sp = true;
  EXPECT_NO_THROW(plan(dense));
}

}  // namespace
}  // namespace pb::planner
