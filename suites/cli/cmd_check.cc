// parabench check: the conformance matrix — every strategy implemented, over
// world sizes and precisions — printed as a table of ratios, written as
// conformance rows, exit 1 on any failure (CI gating).
#include <algorithm>
#include <chrono>
#include <map>
#include <cstdio>
#include <memory>
#include <sstream>
#include <string_view>

#include "harness/comm/comm_backends.h"
#include "harness/io/csv_schema.h"
#include "harness/status.h"
#include "suites/cli/command.h"
#include "suites/cli/common.h"
#include "suites/cli/conformance_output.h"
#include "suites/cli/determinism_check.h"
#include "suites/cli/reshard_flags.h"
#include "reference/train_config_io.h"
#include "suites/conformance/engine.h"
#include "impl/registry.h"
#include "suites/conformance/pipeline_report.h"
#include "suites/planner/preflight.h"

namespace pb::cli {
namespace {

struct CheckFlags {
  std::vector<int> dps = {1, 2, 3, 4, 8};
  std::vector<std::string> precisions = {"fp32", "bf16-mixed"};
  std::vector<std::string> shards = {"none", "zero1", "zero2", "zero3", "hsdp", "hzero"};
  std::string model;  // empty: tiny, or tiny-tp for tensor-parallel points
  int steps = 3;
  std::vector<std::string> schedules = {"gpipe", "1f1b", "interleaved", "zb-h1", "2bw"};
  std::vector<int> pps = {2, 4};
  std::vector<int> tps = {2, 3, 4};
  std::vector<int> cps = {2, 3, 4};
  std::vector<int> eps = {2, 4};
  std::vector<std::string> capacities = {"global", "local"};  // MoE capacity modes
  std::vector<std::string> meshes;      // --mesh: these meshes instead of the default matrix
  std::vector<std::string> strategies;  // --strategy: options applied to every --mesh point
  std::vector<std::string> specs;       // --spec "MESH STRATEGY": points in the run spec's label form
  // The default matrix's list flags (--dp ... --ep), refused beside --mesh
  // or --spec, which they would not shape; and --mesh and --spec themselves.
  std::vector<CLI::Option*> matrix_flags;
  CLI::Option *mesh_flag = nullptr, *spec_flag = nullptr;
  bool chaos = false;
  bool determinism = false;  // --determinism: the determinism matrix instead (cmd_determinism.cc)
  std::string junit;  // --junit FILE
  std::string out = "results/runs";
  std::string run_dir;  // write into this directory instead of OUT/<run id>
  std::string backend;  // local | mpi | nccl (default: nccl on cuda, else mpi under mpirun, else local)
  std::string device = "cpu";  // cpu | cuda: where every point's ranks run (cuda: one GPU per rank over nccl)
  PreflightFlags limits;
};

// One point of the matrix: the model and batch follow from the mesh so every
// point is small enough for CI — data parallel: `model`, 8 sequences per dp
// rank; pipeline: tiny 8 blocks deep (room for pp x v stages), m = 2 pp
// microbatches of one sequence per replica.
StrategyRun point(const CheckFlags& f, const std::string& precision, const MeshShape& mesh,
                  const std::string& strategy) {
  StrategyRun s;
  s.spec.mesh = mesh;
  apply_strategy_text(s.spec, strategy, fault_catalogue(), "--strategy");
  TrainConfig& c = s.spec.train;
  c.precision = parse_precision(precision);
  c.steps = f.steps;
  s.world.chaos.enabled = f.chaos;
  if (mesh.pp > 1 || s.spec.pipe.schedule) {
    // Tensor or context parallel inside the stages: tiny-tp's heads and
    // padded vocabulary; 12 tokens (16 where 2cp does not divide 12).
    const bool model_parallel = mesh.tp > 1 || mesh.cp > 1;
    c.model = named_model(!f.model.empty() ? f.model : model_parallel ? "tiny-tp" : "tiny");
    c.model.L = 8;
    c.model.name += "-l8";
    c.seq = !model_parallel ? 16 : mesh.cp > 1 && 12 % (2 * mesh.cp) ? 16 : 12;
    c.microbatches = int(checked_product("train.microbatches", {{"per pipeline stage", 2}, {"mesh pp", mesh.pp}}));
    c.batch = int(checked_product("train.batch", {{"microbatches", c.microbatches}, {"mesh dp", mesh.dp}}));
  } else if (mesh.tp > 1 || mesh.cp > 1 || s.spec.tensor.recompute != Recompute::none) {
    // Tensor and context parallel: tiny-tp (12 heads: tp or Ulysses' cp 2, 3,
    // 4; a vocabulary of 67 that every tp pads) unless a model is named; 12
    // tokens so a microbatch's tokens split over tp 2, 3 and 4 under sequence
    // parallel and into 2cp zigzag chunks at cp 2 and 3; 16 at cp 4.
    c.model = named_model(f.model.empty() ? "tiny-tp" : f.model);
    c.seq = std::min(mesh.cp > 1 && 12 % (2 * mesh.cp) ? 16 : 12, c.model.maxT);
    c.batch = int(checked_product("train.batch", {{"sequences per dp rank", 4}, {"mesh dp", mesh.dp}}));
  } else {
    c.model = named_model(f.model.empty() ? "tiny" : f.model);
    c.seq = std::min(16, c.model.maxT);
    c.batch = int(checked_product("train.batch", {{"sequences per dp rank", 8}, {"mesh dp", mesh.dp}}));
  }
  return s;
}

// A --mesh entry: the mesh text, optionally with ".sp" (sequence parallel on
// at that point), e.g. "dp2.tp2.sp".
StrategyRun mesh_point(const CheckFlags& f, const std::string& precision, const std::string& entry,
                       const std::string& strategy) {
  std::string mesh, opts = strategy;
  size_t b = 0;
  while (b <= entry.size()) {
    const size_t e = std::min(entry.find('.', b), entry.size());
    const std::string part = entry.substr(b, e - b);
    std::string& to = part == "sp" ? opts : mesh;
    if (!to.empty()) to += part == "sp" ? ',' : '.';
    to += part == "sp" ? std::string("sp=on") : part;
    b = e + 1;
  }
  return point(f, precision, parse_mesh(mesh, "--mesh"), opts);
}

MeshShape dp_mesh(int dp, int rpn = 0) {
  MeshShape m;
  m.dp = dp;
  m.ranks_per_node = rpn;
  return m;
}

// The matrix check runs: --mesh x --strategy x --precision when meshes are
// given; otherwise every data-parallel option at every --dp, every schedule
// at every --pp, and PP x every --shard (and ZeRO-2 + offload) at dp 2 (1F1B,
// the first --pp).
// Tensor parallel: every --tp with and without SP; recomputation (selective,
// full, with SP, and alone at tp 1) at the first --tp; dp 2 x the first --tp
// x every --shard (hzero on two nodes; and ZeRO-2 + offload, ZeRO-3 with SP).
// Every point is built and validated before the first one runs.
std::vector<StrategyRun> matrix(const CheckFlags& f);

void tensor_parallel_points(const CheckFlags& f, const std::string& prec, std::vector<StrategyRun>& runs) {
  if (f.tps.empty()) return;
  auto mesh = [](int dp, int tp) {
    MeshShape m;
    m.dp = dp;
    m.tp = tp;
    return m;
  };
  for (int tp : f.tps) {
    require(tp > 0, "--tp: tensor-parallel sizes must be > 0, got " + std::to_string(tp));
    if (tp == 1) continue;
    runs.push_back(point(f, prec, mesh(1, tp), ""));
    runs.push_back(point(f, prec, mesh(1, tp), "sp=on"));
  }
  const int tp = f.tps.front();
  for (const char* opts : {"recompute=selective", "recompute=full", "sp=on,recompute=full"})
    if (tp > 1 || std::string(opts).find("sp") == std::string::npos) runs.push_back(point(f, prec, mesh(1, tp), opts));
  if (tp > 1) runs.push_back(point(f, prec, mesh(1, 1), "recompute=full"));  // recomputation alone
  for (const auto& sh : f.shards) {
    const dp::Shard shard = dp::parse_shard(sh, "--shard");
    if (tp == 1) continue;
    StrategyRun s = point(f, prec, mesh(2, tp), "");
    s.spec.data.shard = shard;
    if (shard == dp::Shard::hzero) s.spec.mesh.ranks_per_node = tp;  // two nodes of one replica each
    if (shard == dp::Shard::hsdp) s.spec.data.shard_group = 1;  // two replicas of one
    runs.push_back(s);
    if (shard == dp::Shard::zero2) {
      s.spec.data.offload = dp::Offload::optimizer;
      runs.push_back(s);
    }
    if (shard == dp::Shard::zero3) {
      s.spec.tensor.sp = true;
      runs.push_back(s);
    }
  }
}

// Context parallel: every --cp with ring (zigzag and contiguous) and Ulysses;
// at the first --cp: dp 2 x every --shard (ring; hzero on two nodes, ZeRO-2 +
// offload, ZeRO-3 with Ulysses), recomputation (ring full, Ulysses selective
// and full), CP x TP (tp 2: ring, Ulysses, ring with SP; dp2.tp2.cp2), and
// CP x PP (cp2.pp2 1F1B ring and interleaved Ulysses; dp2.cp2.pp2 ZeRO-3;
// tp2.cp2.pp2 SP) at the first --pp.
void context_parallel_points(const CheckFlags& f, const std::string& prec, std::vector<StrategyRun>& runs) {
  if (f.cps.empty()) return;
  auto mesh = [](int dp, int tp, int cp) {
    MeshShape m;
    m.dp = dp, m.tp = tp, m.cp = cp;
    return m;
  };
  for (int cp : f.cps) {
    require(cp > 0, "--cp: context-parallel sizes must be > 0, got " + std::to_string(cp));
    if (cp == 1) continue;
    for (const char* opts : {"cp_algo=ring", "cp_algo=ring,zigzag=off", "cp_algo=ulysses"})
      runs.push_back(point(f, prec, mesh(1, 1, cp), opts));
  }
  const int cp = f.cps.front();
  if (cp == 1) return;
  for (const auto& sh : f.shards) {
    StrategyRun s = point(f, prec, mesh(2, 1, cp), "cp_algo=ring");
    s.spec.data.shard = dp::parse_shard(sh, "--shard");
    if (s.spec.data.shard == dp::Shard::hzero) s.spec.mesh.ranks_per_node = cp;  // two nodes of one replica each
    if (s.spec.data.shard == dp::Shard::hsdp) s.spec.data.shard_group = cp;      // two replicas of one
    runs.push_back(s);
    if (s.spec.data.shard == dp::Shard::zero2) {
      s.spec.data.offload = dp::Offload::optimizer;
      runs.push_back(s);
    }
    if (s.spec.data.shard == dp::Shard::zero3) {
      s.spec.context.algo = CpAlgo::ulysses;
      runs.push_back(s);
    }
  }
  for (const char* opts : {"cp_algo=ring,recompute=full", "cp_algo=ulysses,recompute=selective",
                           "cp_algo=ulysses,recompute=full"})
    runs.push_back(point(f, prec, mesh(1, 1, cp), opts));
  for (const char* opts : {"cp_algo=ring", "cp_algo=ulysses", "cp_algo=ring,sp=on"})
    runs.push_back(point(f, prec, mesh(1, 2, cp), opts));
  runs.push_back(point(f, prec, mesh(2, 2, cp), "cp_algo=ring,shard=zero1"));
  if (f.pps.empty() || f.pps.front() < 2) return;
  const std::pair<MeshShape, const char*> staged[] = {
      {mesh(1, 1, cp), "schedule=1f1b"},
      {mesh(1, 1, cp), "schedule=interleaved,virtual_stages=2,cp_algo=ulysses"},
      {mesh(2, 1, cp), "schedule=1f1b,shard=zero3"},
      {mesh(1, 2, cp), "schedule=1f1b,sp=on"}};
  for (auto [m, opts] : staged) {
    m.pp = f.pps.front();
    runs.push_back(point(f, prec, m, opts));
  }
}

MoeCapacity parse_capacity(const std::string& c) {
  require(c == "global" || c == "local", "--moe-capacity: '" + c + "' is not one of global, local");
  return c == "global" ? MoeCapacity::global : MoeCapacity::local;
}

// A mixture-of-experts model's variant: E experts, top-k, capacity mode, its
// name the variant's (reference/model_config.h: "tiny-moe-e8-top1-local"
// names what it runs, so the table and the baseline keys tell them apart).
void set_moe(TrainConfig& c, int experts, int top_k, MoeCapacity cap) {
  MoeConfig& m = c.model.moe;
  m.experts = experts;
  m.top_k = top_k;
  m.capacity = cap;
  c.model.name = moe_variant_name(c.model);
}

// Mixture of experts (tiny-moe: block 0's MLP as 4 experts, top-2).
// Data parallel: dp2 x DDP, ZeRO-1, ZeRO-3 x each --moe-capacity, dp4 ZeRO-2
// global, and 8 experts top-1 at dp2 (global).
// Expert parallel, at each --ep: dp = ep (edp 1) DDP x each capacity, 8
// experts top-1 (local), dp 2ep ZeRO-1 (edp 2, the last capacity); at the
// first --ep of 2 or more, dp 2ep (dp4 at ep 2):
// every --shard on both components (hsdp: shard groups of 2 dp ranks, 1
// expert rank; hzero: 2 nodes) and ZeRO-2 + offload (global), 8 experts
// top-2 ZeRO-3 at dp = ep = 4. Expert with context parallel: below.
void moe_points(const CheckFlags& f, const std::string& prec, std::vector<StrategyRun>& runs) {
  auto moe = [&](MeshShape m, dp::Shard shard, MoeCapacity cap, int experts = 4, int top_k = 2) {
    StrategyRun s = point(f, prec, m, "");
    s.spec.train.model = named_model("tiny-moe");
    set_moe(s.spec.train, experts, top_k, cap);
    s.spec.data.shard = shard;
    return s;
  };
  auto ep_mesh = [](int dp, int ep, int rpn = 0) {
    MeshShape m = dp_mesh(dp, rpn);
    m.ep = ep;
    return m;
  };
  std::vector<MoeCapacity> caps;
  for (const auto& c : f.capacities) caps.push_back(parse_capacity(c));
  for (MoeCapacity cap : caps)
    for (dp::Shard sh : {dp::Shard::none, dp::Shard::zero1, dp::Shard::zero3}) runs.push_back(moe(dp_mesh(2), sh, cap));
  runs.push_back(moe(dp_mesh(4), dp::Shard::zero2, MoeCapacity::global));
  runs.push_back(moe(dp_mesh(2), dp::Shard::none, MoeCapacity::global, 8, 1));
  for (int ep : f.eps) {
    require(ep > 0 && 4 % ep == 0, "--ep: expert-parallel sizes must divide the matrix's 4 experts (1, 2, 4), got " +
                                       std::to_string(ep));
    if (ep == 1) continue;
    for (MoeCapacity cap : caps) runs.push_back(moe(ep_mesh(ep, ep), dp::Shard::none, cap));
    runs.push_back(moe(ep_mesh(ep, ep), dp::Shard::none, MoeCapacity::local, 8, 1));
    runs.push_back(moe(ep_mesh(2 * ep, ep), dp::Shard::zero1, caps.empty() ? MoeCapacity::global : caps.back()));
  }
  // Pipeline (tiny-moe with 8 layers, MoE every second: two per stage at pp
  // 2), at the first --pp and the first --ep E of 2 or more (1 if none):
  // dp max(2, E) x 1F1B DDP x each capacity and GPipe ZeRO-3 (global), dp 2E
  // interleaved ZeRO-1 (global), and dp2 (ep 1) 1F1B ZeRO-2 (local).
  const bool pipelines = !f.pps.empty() && f.pps.front() > 1 &&
                         std::any_of(f.schedules.begin(), f.schedules.end(), [](const auto& n) { return n != "none"; });
  const auto first_ep = std::find_if(f.eps.begin(), f.eps.end(), [](int e) { return e >= 2; });
  if (pipelines) {
    using pipeline::ScheduleKind;
    auto moe_pipe = [&](int dp, int ep, dp::Shard shard, MoeCapacity cap, ScheduleKind k) {
      MeshShape m = ep_mesh(dp, ep);
      m.pp = f.pps.front();
      StrategyRun s = point(f, prec, m, "");  // a pipeline point: 8 layers, 2pp microbatches
      s.spec.pipe.schedule = k;
      s.spec.pipe.virtual_stages = k == ScheduleKind::interleaved ? 2 : 1;
      s.spec.train.model = named_model("tiny-moe");
      s.spec.train.model.L = 8;
      set_moe(s.spec.train, 4, 2, cap);
      s.spec.train.model.name += "-l8";
      s.spec.data.shard = shard;
      return s;
    };
    const int ep = first_ep == f.eps.end() ? 1 : *first_ep;
    for (MoeCapacity cap : caps) runs.push_back(moe_pipe(std::max(2, ep), ep, dp::Shard::none, cap, ScheduleKind::one_f_one_b));
    runs.push_back(moe_pipe(std::max(2, ep), ep, dp::Shard::zero3, MoeCapacity::global, ScheduleKind::gpipe));
    runs.push_back(moe_pipe(2 * ep, ep, dp::Shard::zero1, MoeCapacity::global, ScheduleKind::interleaved));
    runs.push_back(moe_pipe(2, 1, dp::Shard::zero2, MoeCapacity::local, ScheduleKind::one_f_one_b));
  }
  // Tensor parallel (experts split over tp; tiny-moe's 2 heads: tp 2 when
  // --tp has it): dp2.tp2 DDP x each capacity, and at the first --ep E of 2
  // or more dp E.tp2 DDP (global), dp 2E.tp2 ZeRO-3 (global) and ZeRO-1
  // (local), and at E = 2 dp4.ep2.tp2 hZeRO on two nodes (global).
  if (std::find(f.tps.begin(), f.tps.end(), 2) != f.tps.end()) {
    auto tp2 = [&](int dp, int ep, dp::Shard shard, MoeCapacity cap) {
      MeshShape m = ep_mesh(dp, ep);
      m.tp = 2;
      return moe(m, shard, cap);
    };
    for (MoeCapacity cap : caps) runs.push_back(tp2(2, 1, dp::Shard::none, cap));
    if (first_ep != f.eps.end()) {
      const int ep = *first_ep;
      runs.push_back(tp2(ep, ep, dp::Shard::none, MoeCapacity::global));
      runs.push_back(tp2(2 * ep, ep, dp::Shard::zero3, MoeCapacity::global));
      runs.push_back(tp2(2 * ep, ep, dp::Shard::zero1, MoeCapacity::local));
      if (ep == 2) {  // hZeRO on two nodes of 2 dp x 2 tp ranks (the edp group spans them)
        StrategyRun h = tp2(4, 2, dp::Shard::hzero, MoeCapacity::global);
        h.spec.mesh.ranks_per_node = 4;
        runs.push_back(h);
      }
    }
  }
  // Expert with context parallel (the ep group folded over dp x cp, as
  // Megatron-core's expert rank generator does), at the first --cp C and the
  // first --ep E of 2 or more: dp E.cp C.ep E DDP x each capacity (E <= C: an
  // ep group is the cp ranks of one data rank), ep E x C ZeRO-3 (global; an
  // ep group spans data and cp ranks) where it divides the 4 experts, and
  // with tp 2 (when --tp has it) ZeRO-1 with SP (local).
  if (first_ep != f.eps.end() && !f.cps.empty() && f.cps.front() > 1) {
    const int ep = *first_ep, cp = f.cps.front();
    auto cp_moe = [&](int ep_size, int tp, dp::Shard shard, MoeCapacity cap) {
      MeshShape m = ep_mesh(ep, ep_size);
      m.cp = cp;
      m.tp = tp;
      return moe(m, shard, cap);
    };
    for (MoeCapacity cap : caps) runs.push_back(cp_moe(ep, 1, dp::Shard::none, cap));
    if (4 % (ep * cp) == 0) runs.push_back(cp_moe(ep * cp, 1, dp::Shard::zero3, MoeCapacity::global));
    if (std::find(f.tps.begin(), f.tps.end(), 2) != f.tps.end()) {
      StrategyRun s = cp_moe(ep, 2, dp::Shard::zero1, MoeCapacity::local);
      s.spec.tensor.sp = true;
      runs.push_back(s);
    }
  }
  // Every --shard at the first --ep of 2 or more, on dp = 2 ep ranks (edp 2:
  // hZeRO's two nodes hold one rank of each edp group each).
  const auto first = std::find_if(f.eps.begin(), f.eps.end(), [](int e) { return e >= 2; });
  if (first == f.eps.end()) return;
  const int ep = *first;
  for (const auto& sh : f.shards) {
    const dp::Shard shard = dp::parse_shard(sh, "--shard");
    StrategyRun s = moe(ep_mesh(2 * ep, ep, shard == dp::Shard::hzero ? ep : 0), shard, MoeCapacity::global);
    if (shard == dp::Shard::hsdp) s.spec.data.shard_group = 2;
    runs.push_back(s);
    if (shard == dp::Shard::zero2) {
      s.spec.data.offload = dp::Offload::optimizer;
      runs.push_back(s);
    }
  }
  runs.push_back(moe(ep_mesh(4, 4), dp::Shard::zero3, MoeCapacity::global, 8, 2));
}

// A --spec entry: "<mesh> <strategy>", the run spec's label form
// (run_spec.h spec_label), e.g. "dp2.pp2 shard=zero3,schedule=1f1b".
StrategyRun spec_point(const CheckFlags& f, const std::string& precision, const std::string& entry) {
  const size_t sp = entry.find(' ');
  const std::string mesh = entry.substr(0, sp), strategy = sp == std::string::npos ? "" : entry.substr(sp + 1);
  require(strategy.find(' ') == std::string::npos,
          "--spec: '" + entry + "' is not '<mesh> <strategy>' (e.g. 'dp2.pp2 shard=zero3,schedule=1f1b')");
  return point(f, precision, parse_mesh(mesh, "--spec"), strategy);
}

std::vector<StrategyRun> matrix(const CheckFlags& f) {
  std::vector<StrategyRun> runs;
  for (CLI::Option* o : f.matrix_flags) {  // they shape the default matrix only: never ignored in silence
    refuse_together(o, f.mesh_flag, "the points to check (" + o->get_name() + " shapes the default matrix)");
    refuse_together(o, f.spec_flag, "the points to check (" + o->get_name() + " shapes the default matrix)");
  }
  if (!f.meshes.empty() || !f.specs.empty()) {
    const std::vector<std::string> strategies = f.strategies.empty() ? std::vector<std::string>{""} : f.strategies;
    std::vector<std::pair<std::string, std::string>> points;  // (mesh entry, strategy) or ("", spec)
    for (const auto& m : f.meshes)
      for (const auto& st : strategies) points.emplace_back(m, st);
    for (const auto& s : f.specs) points.emplace_back("", s);
    for (const auto& prec : f.precisions)
      for (const auto& [m, st] : points) {
        StrategyRun r = m.empty() ? spec_point(f, prec, st) : mesh_point(f, prec, m, st);
        const MoeConfig moe = r.spec.train.model.moe;
        if (moe.experts == 0) {
          runs.push_back(r);
          continue;
        }
        for (const auto& cap : f.capacities) {  // a mixture-of-experts model: each --moe-capacity
          StrategyRun c = r;
          set_moe(c.spec.train, moe.experts, moe.top_k, parse_capacity(cap));
          runs.push_back(c);
        }
      }
    return runs;
  }
  require(f.strategies.empty(),
          "--strategy: applies to --mesh points; give --mesh too (or whole points as --spec 'MESH STRATEGY')");
  for (const auto& prec : f.precisions) {
    for (const auto& sh : f.shards)
      for (int dp : f.dps) {
        require(dp > 0, "--dp: world sizes must be > 0, got " + std::to_string(dp));
        const dp::Shard shard = dp::parse_shard(sh, "--shard");
        const bool two_level = shard == dp::Shard::hsdp || shard == dp::Shard::hzero;
        if (two_level && dp < 2) continue;  // two levels need two ranks
        // Shard groups / nodes of dp/2 ranks (of one rank when dp is odd).
        StrategyRun s = point(f, prec, dp_mesh(dp, two_level ? (dp % 2 ? 1 : dp / 2) : 0), "");
        s.spec.data.shard = shard;
        s.spec.data.bucket_bytes = 16 << 10;
        if (two_level) s.spec.data.shard_group = dp % 2 ? 1 : dp / 2;
        runs.push_back(s);
        if (shard == dp::Shard::zero2 && dp > 1) {  // ZeRO-Offload
          s.spec.data.offload = dp::Offload::optimizer;
          runs.push_back(s);
        }
        if (shard == dp::Shard::none && dp > 1) {  // DDP with accumulation (no_sync)
          s.spec.train.microbatches = 2;
          s.spec.train.batch = 16 * dp;
          runs.push_back(s);
        }
      }
    for (int pp : f.pps) {
      require(pp > 0, "--pp: pipeline sizes must be > 0, got " + std::to_string(pp));
      for (const auto& name : f.schedules) {
        if (name == "none") continue;
        MeshShape m;
        m.pp = pp;
        const auto kind = pipeline::parse_schedule_kind(name, "--schedule");
        StrategyRun r = point(f, prec, m, "");
        r.spec.pipe.schedule = kind;
        r.spec.pipe.virtual_stages = kind == pipeline::ScheduleKind::interleaved ? 2 : 1;
        runs.push_back(r);
        if (kind == pipeline::ScheduleKind::one_f_one_b && pp == f.pps.front())
          for (const auto& sh : f.shards) {  // PP x every data-axis option, dp 2
            StrategyRun d = r;
            d.spec.mesh.dp = 2;
            d.spec.data.shard = dp::parse_shard(sh, "--shard");
            d.spec.train.batch = 2 * r.spec.train.batch;
            if (d.spec.data.shard == dp::Shard::hsdp) d.spec.data.shard_group = 1;  // two replicas of one
            if (d.spec.data.shard == dp::Shard::hzero) d.spec.mesh.ranks_per_node = 1;  // two nodes
            runs.push_back(d);
            if (d.spec.data.shard == dp::Shard::zero2) {  // ZeRO-Offload in every stage
              d.spec.data.offload = dp::Offload::optimizer;
              runs.push_back(d);
            }
          }
      }
    }
    tensor_parallel_points(f, prec, runs);
    context_parallel_points(f, prec, runs);
    if (f.model.empty()) moe_points(f, prec, runs);
    if (!f.tps.empty() && f.tps.front() > 1 && !f.pps.empty()) {  // TP x PP (1F1B, interleaved; SP; x dp2, ZeRO-3)
      const int tp = f.tps.front(), pp = f.pps.front();
      auto mesh = [&](int dp) {
        MeshShape m;
        m.dp = dp;
        m.tp = tp;
        m.pp = pp;
        return m;
      };
      for (const char* opts : {"schedule=1f1b", "schedule=interleaved,virtual_stages=2", "schedule=1f1b,sp=on",
                               "schedule=1f1b,shard=zero3,sp=on"})
        runs.push_back(point(f, prec, mesh(1), opts));
      for (const char* opts : {"schedule=1f1b", "schedule=1f1b,shard=zero3"}) runs.push_back(point(f, prec, mesh(2), opts));
    }
  }
  return runs;
}

// The default matrix with --model: a point the model cannot take (its
// refusal names the family, "does not support model family", or the model's
// size the mesh does not split, "does not divide model." or Ulysses' "model.heads
// ... is not divisible by cpC") is left out with
// the reason printed, and the count; any other invalid point still
// stops the check, and a matrix left empty exits 2 (run_check's require).
void skip_family_refusals(const CheckFlags& f, std::vector<StrategyRun>& runs) {
  if (f.model.empty() || !f.meshes.empty() || !f.specs.empty()) return;
  size_t skipped = 0;
  std::erase_if(runs, [&](const StrategyRun& s) {
    try {
      validate(s.spec);
      strategy_for(s.spec).validate(s.spec);
      return false;
    } catch (const InputError& e) {
      const std::string_view why = e.what();
      if (why.find("does not support model family") == std::string_view::npos &&
          why.find("does not divide model.") == std::string_view::npos &&
          why.find("ulysses shards the heads over cp: model.heads") == std::string_view::npos)
        throw;
      std::fprintf(stderr, "check: skipped %s %s: %s\n", spec_label(s.spec).c_str(),
                   std::string(precision_name(s.spec.train.precision)).c_str(), e.what());
      return ++skipped, true;
    }
  });
  if (skipped)
    std::fprintf(stderr, "check: skipped %zu point%s of the default matrix that model %s cannot run\n", skipped,
                 skipped == 1 ? "" : "s", f.model.c_str());
}

int run_check(const CheckFlags& f, const Env& env) {
  require(f.device == "cpu" || f.device == "cuda", "--device: '" + f.device + "' is not cpu or cuda");
  const bool on_device = f.device == "cuda";
  WorldOptions wo;
  wo.backend = on_device ? BackendKind::nccl : env.under_mpirun ? BackendKind::mpi : BackendKind::local;
  if (!f.backend.empty()) {
    require(parse_backend(f.backend, &wo.backend), "--backend: '" + f.backend + "' is not local, mpi or nccl");
    require(on_device == (wo.backend == BackendKind::nccl),
            on_device ? "--backend " + f.backend +
                            ": --device cuda runs over nccl (its buffers are device memory; local and mpi move "
                            "host memory)"
                      : std::string("--backend nccl: needs --device cuda"));
  }
  if (on_device) {
    for (const auto& p : f.precisions)
      require(p != "fp64", "--precision fp64: --device cuda runs fp32 and bf16-mixed (fp64 is the CPU's truth)");
    if (const std::string why = cuda_unavailable(); !why.empty()) throw InputError("--device cuda: " + why);
  }
  require(wo.backend != BackendKind::local || env.launched_size == 1,
          "--backend local: under mpirun -np " + std::to_string(env.launched_size) +
              " every process would write its own results; use --backend mpi");
  for (const auto& p : f.precisions)
    require(p == "fp64" || p == "fp32" || p == "bf16-mixed",
            "--precision: '" + p + "' is not one of fp64, fp32, bf16-mixed");
  auto runs = matrix(f);
  if (on_device) {
    const DeviceOpener gpu = rank_device_opener();  // every rank on the GPU the nccl backend chose for its process
    for (auto& s : runs) {
      s.spec.train.device = Device::cuda;
      s.open_device = gpu;
    }
  }
  const Limits limits = limits_of(f.limits);
  const bool local = wo.backend == BackendKind::local;
  skip_family_refusals(f, runs);
  for (const auto& s : runs) {  // the whole matrix is valid, and fits, before the first row
    validate(s.spec);
    strategy_for(s.spec).validate(s.spec);
    require_fits(planner::run_need(s.spec, local ? s.spec.world() : 1, local, /*conformance=*/true), limits,
                 "check " + spec_label(s.spec) + " " + s.spec.train.model.name);
  }
  std::unique_ptr<World> mpi_world;  // one per process: MPI initializes once
  if (wo.backend != BackendKind::local) {
    wo.size = 0;
    mpi_world = make_world(wo);
    std::string spec;  // the whole matrix, as this process was asked to run it
    for (const auto& s : runs) spec += config_hash_of(s) + (s.world.chaos.enabled ? "c" : "") + ";";
    require_same_spec(*mpi_world, spec, "check");
    // The world is what mpirun launched: its size picks the points; the
    // others are named, not dropped in silence.
    std::map<int, int> skipped;  // world -> points
    for (const auto& s : runs)
      if (s.spec.world() != mpi_world->size()) ++skipped[s.spec.world()];
    std::erase_if(runs, [&](const StrategyRun& s) { return s.spec.world() != mpi_world->size(); });
    if (hosts_rank(*mpi_world, 0) && !skipped.empty()) {
      std::string list;
      for (auto [w, n] : skipped)
        list += (list.empty() ? "" : ", ") + std::to_string(n) + " of world " + std::to_string(w);
      std::fprintf(stderr,
                   "check: under mpirun -np %d only the points of world %d run; skipped %s (run them with mpirun -np "
                   "of their world, or without mpirun on the local backend)\n",
                   mpi_world->size(), mpi_world->size(), list.c_str());
    }
    for (auto& s : runs) s.world.backend = wo.backend;
  }
  require(!runs.empty(), "check: the matrix is empty (see --dp, --shard, --pp, --mesh, --precision" +
                             std::string(mpi_world ? "; under mpirun a point's world must be the launched size)" : ")"));
  const bool writer = !mpi_world || hosts_rank(*mpi_world, 0);
  if (writer && !f.junit.empty()) require_junit_writable(f.junit);
  JunitSuite junit{"parabench check", 0, {}};
  const std::string run_id = make_run_id(std::chrono::system_clock::now());
  std::unique_ptr<ResultWriter> csv_writer;
  if (writer) {
    auto dir = f.run_dir.empty() ? make_run_dir(f.out, run_id) : make_run_dir(f.run_dir, "");
    csv_writer = std::make_unique<ResultWriter>((dir / "conformance.csv").string(), "conformance");
    print_result_header();
  }
  int failures = 0;
  for (const auto& s : runs) {
    ConformanceResult r;
    const auto started = std::chrono::steady_clock::now();
    try {
      r = mpi_world ? run_conformance(s, *mpi_world) : run_conformance(s);
    } catch (const std::exception& e) {
      if (!mpi_world) throw;
      std::fprintf(stderr, "parabench check: %s\n", e.what());
      mpi_world->terminate(1);  // ends every process; does not return
      throw;
    }
    if (!writer) continue;
    add_junit_cases(r, std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(), &junit);
    failures += !r.pass();
    print_result_row(r);
    if (s.spec.mesh.pp > 1 || s.spec.pipe.schedule)
      std::printf("    %s\n", describe_bubble(pipeline_report(s.spec, r)).c_str());
    write_conformance_rows(*csv_writer,
                           make_meta(run_id, env.git_rev, r.backend, r.world, r.mesh, config_hash_of(s)),
                           r, f.steps);
  }
  if (!writer) return 0;
  if (!f.junit.empty()) write_junit(f.junit, {junit});
  std::printf("\n%zu configurations, %d failed. %s\nresults: %s\n", runs.size(), failures, kRatioLegend,
              csv_writer->path().c_str());
  return failures ? 1 : 0;
}

}  // namespace

StrategyRun check_point(const std::string& model, const std::string& precision, const std::string& mesh_entry,
                        const std::string& strategy, int steps) {
  CheckFlags f;
  f.model = model;
  f.steps = steps;
  return mesh_point(f, precision, mesh_entry, strategy);
}

void register_check(CLI::App& root, Registry& reg, const Env& env) {
  auto f = std::make_shared<CheckFlags>();
  CLI::App* app = root.add_subcommand("check", "conformance matrix; exit 1 on any failure");
  auto matrix_flag = [&](CLI::Option* o) { return f->matrix_flags.push_back(o), o; };
  matrix_flag(app->add_option("--dp", f->dps, "data-parallel world sizes of the default matrix"))->capture_default_str();
  app->add_option("--precision", f->precisions, "fp32, bf16-mixed, fp64")->capture_default_str();
  matrix_flag(app->add_option("--shard", f->shards, "none zero1 zero2 zero3 hsdp hzero (default matrix)"))
      ->capture_default_str();
  app->add_option("--model", f->model,
                  "named model for every point (default: tiny; tiny-tp, whose 12 heads split over tp 2, 3 and 4, "
                  "for tensor-parallel points)");
  app->add_option("--steps", f->steps, "steps per configuration")->capture_default_str()
      ->check(CLI::PositiveNumber);
  matrix_flag(app->add_option("--schedule", f->schedules, "pipeline schedules (none: no pipeline points)"))
      ->capture_default_str();
  matrix_flag(app->add_option("--pp", f->pps, "pipeline sizes"))->capture_default_str();
  matrix_flag(app->add_option("--tp", f->tps, "tensor-parallel sizes (tiny-tp unless --model names another)"))
      ->capture_default_str();
  matrix_flag(app->add_option("--cp", f->cps, "context-parallel sizes (tiny-tp unless --model names another)"))
      ->capture_default_str();
  matrix_flag(app->add_option("--ep", f->eps, "expert-parallel sizes (tiny-moe points; divide 4)"))
      ->capture_default_str();
  app->add_option("--moe-capacity", f->capacities, "MoE capacity modes for tiny-moe points: global, local")
      ->capture_default_str();
  f->mesh_flag = app->add_option(
      "--mesh", f->meshes,
      "meshes to check instead of the default matrix (dp2 dp2.pp2 tp2 dp2.tp2 cp2 tp2.cp2 ...; "
      "an entry's .sp is an alias of sp=on; cp_algo=ulysses and zigzag=off by --strategy)");
  app->add_option("--strategy", f->strategies,
                  "options for every --mesh point, e.g. shard=zero3,prefetch=2 schedule=zb-h1");
  f->spec_flag = app->add_option(
      "--spec", f->specs,
      "whole points instead of the default matrix, in the run spec's label form 'MESH STRATEGY', e.g. "
      "'dp2.pp2 shard=zero3,schedule=1f1b' (with --mesh: both sets)");
  app->add_option("--junit", f->junit, "also write JUnit XML here: one test case per configuration and quantity")
      ->check(non_empty());
  app->add_flag("--chaos", f->chaos, "inject seeded random delays into every collective");
  auto determinism = app->add_flag("--determinism", f->determinism,
                                   "instead of the matrix: which pairs of runs are bit-identical, bounded by the "
                                   "rule or not vouched for, each claim run and judged (docs/numerics.md)");
  app->add_option("--out", f->out, "results directory")->capture_default_str();
  app->add_option("--run-dir", f->run_dir, "write directly into this directory");
  app->add_option("--backend", f->backend,
                  "local, mpi or nccl (default: nccl with --device cuda, else mpi under mpirun, else local)");
  app->add_option("--device", f->device,
                  "cpu | cuda (every point's ranks on GPUs, one per process under mpirun, over nccl; fp32 and "
                  "bf16-mixed)")
      ->capture_default_str();
  add_preflight_flags(app, f->limits);
  // check --reshard A:B (cmd_reshard.cc): resharding judged against an
  // uninterrupted run, instead of the matrix; 4 steps unless --steps says.
  auto reshard = std::make_shared<ReshardCheckFlags>();
  add_reshard_check_flags(app, *reshard);
  for (const char* other : {"--mesh", "--spec", "--strategy", "--reshard", "--chaos", "--junit", "--model", "--device",
                            "--moe-capacity", "--out", "--run-dir"})
    determinism->excludes(other);
  for (CLI::Option* o : f->matrix_flags) determinism->excludes(o);
  reg.push_back({app, [f, reshard, app, &env] {
                   if (f->determinism) return run_determinism_check(f->precisions, f->steps, f->backend, env);
                   if (!reshard->pairs.empty())
                     return run_reshard_check(*reshard, f->precisions, f->model, app->count("--steps") ? f->steps : 4,
                                              {f->out, f->run_dir, f->junit, env.git_rev});
                   return run_check(*f, env);
                 }});
}

}  // namespace pb::cli
