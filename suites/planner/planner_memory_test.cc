// The planner's memory: ZeRO's model-state bytes, and each rank's
// allocations (params, grads, optimizer, activations, comm buffers,
// workspace) as the strategies' ranks make them, MoE and offload included.
#include "suites/planner/planner.h"
#include "suites/planner/machine.h"
#include "suites/planner/plan_output.h"
#include "suites/planner/planner_testing.h"

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
    PlanInput in = model_input("small");
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


// torchtitan's 8B FSDP row on a GPU (configs/published/torchtitan_llama3.csv,
// h100 8b 8gpu), figures by hand: Llama 3 8B has V = 128256, C = 4096, 32
// blocks of 218,112,000 parameters (wq, wo 4096^2; wk, wv 4096 x 1024; w1,
// w2, w3 4096 x 14336; two norms). FSDP2's buffers at the peak, bf16: the root
// (tok_embeddings + norm + output = 2 x 128256 x 4096 + 4096 = 1,050,677,248)
// held gathered, the last block held gathered, and the all-gather stream's
// pool at the root's gather plus its inputs' casts (1/8 of it):
// 2 x (1,050,677,248 x (2 + 1/8) + 218,112,000) = 4,901,602,304 bytes. The
// eager loss's hole: the bf16 logits, 2 x 8192 x 128256 x 2 = 4,202,692,608
// bytes. A CPU profile (host kernels) keeps the engine's figures.
TEST(Planner, TorchtitanFsdp2BuffersOnAGpu) {
  PlanInput in = model_input("llama3-8b", 2, 16, 8192);
  in.precision = Precision::bf16_mixed;
  in.dp = 8;
  in.shard = dp::Shard::zero3;
  in.recompute_even_matmuls = true;
  in.flash_attention = true;
  in.eager_kernels = true;
  const PlanResult cpu = plan(in);
  in.hw.host_kernels = false;
  const PlanResult gpu = plan(in);
  EXPECT_EQ(gpu.worst.comm, int64_t{4901602304});
  EXPECT_EQ(gpu.worst.activations - cpu.worst.activations, int64_t{4202692608});
  EXPECT_EQ(gpu.worst.params + gpu.worst.grads + gpu.worst.optimizer,
            cpu.worst.params + cpu.worst.grads + cpu.worst.optimizer);
  // The engine's replay on the CPU profile, unchanged.
  dp::DataAxis a;
  a.dp = 8;
  a.shard = dp::Shard::zero3;
  a.precision = Precision::bf16_mixed;
  std::vector<int64_t> units{int64_t{128256} * 4096};  // tok_embeddings, 32 blocks, norm + output
  units.insert(units.end(), 32, int64_t{218112000});
  units.push_back(int64_t{128256} * 4096 + 4096);
  EXPECT_EQ(cpu.worst.comm, dp::comm_buffer_peak_bytes(units, a));
  // Without eager kernels a GPU plan keeps the engine's buffers.
  in.eager_kernels = false;
  EXPECT_EQ(plan(in).worst.comm, cpu.worst.comm);
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

// A mixture-of-experts model under data parallel: the units are the layout's
// (every expert of an MoE block), and one rank's activations and workspace
// are what its runner allocates, with the capacity scope of global capacity
// over the dp ranks; ep with cp is refused.
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
  PlanInput t;  // zb-h1 with full recompute: the engine refuses it (planner_moe_test has the rest)
  t.shape = m;
  t.shape->L = 4;
  t.dp = 2;
  t.pp = 2;
  t.seq = 16;
  t.schedule = pipeline::ScheduleKind::zb_h1;
  t.recompute = Recompute::full;
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
  PlanInput in = model_input(c.model, micro, micro * c.dp, 16);
  in.dp = c.dp;
  in.ep = c.ep;
  in.tp = tp;
  in.shard = c.shard;
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
  PlanInput nodes = model_input("tiny-moe", 1, 0, 16);
  nodes.dp = 4;
  nodes.ep = 4;
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
  bad.schedule = pipeline::ScheduleKind::pipedream_2bw;
  EXPECT_THROW(plan(bad), InputError);  // 2bw with global capacity over dp 2
}

}  // namespace
}  // namespace pb::planner
