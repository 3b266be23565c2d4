#include "suites/conformance/teeth.h"

#include <algorithm>
#include <functional>
#include <map>

#include "harness/status.h"
#include "impl/data_parallel/options.h"
#include "impl/registry.h"
#include "impl/tensor_parallel/options.h"
#include "impl/tensor_parallel/strategy.h"

namespace pb {

std::string FaultCatch::caught_by() const {
  std::string s;
  auto add = [&](bool on, const char* what) {
    if (!on) return;
    if (!s.empty()) s += '+';
    s += what;
  };
  add(bits, "bits");
  add(rule, "rule");
  add(fp64, "rule@fp64");
  add(memory, "memory");
  add(comm, "comm");
  return s.empty() ? "NOT CAUGHT" : s;
}

FaultCatch classify(const ConformanceResult& r, std::string strategy, std::string fault) {
  FaultCatch c;
  c.strategy = std::move(strategy);
  c.fault = std::move(fault);
  c.precision = r.precision;
  c.bitwise_declared = r.bitwise_declared;
  c.bits = !all_pass(r.bits);
  c.rule = !all_pass(r.rule);
  c.fp64 = !all_pass(r.fp64);
  for (const auto& q : r.rule) c.worst_ratio = std::max(c.worst_ratio, q.ratio);
  for (const auto& e : r.exact) {
    if (e.pass) continue;
    (e.what.rfind("mem.", 0) == 0 ? c.memory : c.comm) = true;
  }
  // Another rank differed while rank 0 matched: the exact checks still failed.
  if (r.ranks_with_mismatch && !c.memory && !c.comm) c.memory = c.comm = true;
  return c;
}

namespace {

std::string describe(const StrategyRun& s) { return strategy_for(s.spec).describe(s.spec); }

StrategyRun pipe_case(pipeline::ScheduleKind k, int pp, int v, int dp, Precision p) {
  StrategyRun r;
  TrainConfig& c = r.spec.train;
  c.model = named_model("tiny");
  c.model.L = 8;
  c.precision = p;
  c.steps = 2;
  c.microbatches = 2 * pp;
  c.batch = dp * c.microbatches;  // one sequence per microbatch
  c.seq = 8;
  c.optim.lr = 3e-3;
  r.spec.pipe.schedule = k;
  r.spec.mesh.pp = pp;
  r.spec.pipe.virtual_stages = v;
  r.spec.mesh.dp = dp;
  r.world.timeout_s = 60;
  return r;
}

}  // namespace

StrategyRun dp_case(dp::Shard shard, int micro, Precision p) {
  StrategyRun s;
  TrainConfig& c = s.spec.train;
  c.model = named_model("tiny");
  c.precision = p;
  c.steps = 3;
  c.batch = 2 * 4 * micro;
  c.seq = 16;
  c.microbatches = micro;
  c.optim.lr = 3e-3;
  s.spec.mesh.dp = 4;
  s.spec.data.shard = shard;
  s.spec.data.bucket_bytes = 4096;  // several DDP buckets even for the tiny model
  s.spec.data.shard_group = shard == dp::Shard::hsdp ? 2 : 0;
  s.spec.mesh.ranks_per_node = shard == dp::Shard::hzero ? 2 : 0;
  s.world.timeout_s = 120;
  return s;
}

std::vector<FaultCatch> dp_fault_catches(Precision p) {
  std::vector<FaultCatch> out;
  // DDP with two microbatches: sync_wrong_microbatch needs one to sync early.
  const std::pair<dp::Shard, int> cases[] = {{dp::Shard::none, 2}, {dp::Shard::zero1, 1},
                                             {dp::Shard::zero2, 1}, {dp::Shard::zero3, 1},
                                             {dp::Shard::hsdp, 1},  {dp::Shard::hzero, 1}};
  for (auto [shard, micro] : cases)
    for (dp::Fault f : dp::faults_for(shard, dp::Offload::none)) {
      StrategyRun s = dp_case(shard, micro, p);
      const std::string name = describe(s);
      s.spec.faults = {dp::fault_name(f)};
      out.push_back(classify(run_conformance(s), name, dp::fault_name(f)));
    }
  for (auto [shard, _] : cases) {  // offload's own fault, on every shard, with accumulation
    StrategyRun s = dp_case(shard, 2, p);
    s.spec.data.offload = dp::Offload::optimizer;
    const std::string name = describe(s);
    s.spec.faults = {dp::fault_name(dp::Fault::no_copy_back)};
    out.push_back(classify(run_conformance(s), name, dp::fault_name(dp::Fault::no_copy_back)));
  }
  return out;
}

std::vector<FaultCatch> pipeline_fault_catches(Precision p) {
  namespace pl = pipeline;
  const char* faults[] = {"skip_microbatch", "grad_to_wrong_stage", "tied_grad_not_summed", "drop_w"};
  std::vector<StrategyRun> runs;
  for (auto k : {pl::ScheduleKind::gpipe, pl::ScheduleKind::one_f_one_b, pl::ScheduleKind::zb_h1})
    for (int pp : {2, 3}) runs.push_back(pipe_case(k, pp, 1, 1, p));
  runs.push_back(pipe_case(pl::ScheduleKind::interleaved, 2, 2, 1, p));
  runs.push_back(pipe_case(pl::ScheduleKind::pipedream_2bw, 2, 1, 1, p));
  runs.back().spec.train.steps = 4;  // 2BW: four weight versions, three delayed updates
  runs.push_back(pipe_case(pl::ScheduleKind::one_f_one_b, 2, 1, 2, p));  // x DDP
  runs.push_back(pipe_case(pl::ScheduleKind::zb_h1, 2, 1, 2, p));
  runs.back().spec.data.shard = dp::Shard::zero1;
  std::vector<FaultCatch> out;
  // Data-parallel faults inside the stages (the data-parallel component's own;
  // pipeline validate refuses the rest), 1F1B at dp2.pp2 (HSDP F = 2 and
  // hZeRO on nodes of two: dp4.pp2), every shard, offload with ZeRO-2.
  for (auto [shard, offload] : {std::pair{dp::Shard::none, false}, {dp::Shard::zero1, false},
                                {dp::Shard::zero2, false}, {dp::Shard::zero3, false},
                                {dp::Shard::hsdp, false}, {dp::Shard::hzero, false}, {dp::Shard::zero2, true}}) {
    const bool two_level = shard == dp::Shard::hsdp || shard == dp::Shard::hzero;
    StrategyRun base = pipe_case(pl::ScheduleKind::one_f_one_b, 2, 1, two_level ? 4 : 2, p);
    base.spec.data.shard = shard;
    base.spec.data.shard_group = shard == dp::Shard::hsdp ? 2 : 0;
    base.spec.mesh.ranks_per_node = shard == dp::Shard::hzero ? 2 : 0;
    if (offload) base.spec.data.offload = dp::Offload::optimizer;
    for (dp::Fault f : dp::faults_for(shard, base.spec.data.offload)) {
      StrategyRun r = base;
      r.spec.faults = {dp::fault_name(f)};
      try {
        strategy_for(r.spec).validate(r.spec);
      } catch (const InputError&) {
        continue;  // lives in the plain data-parallel runner's hooks
      }
      out.push_back(classify(run_conformance(r), describe(base), dp::fault_name(f)));
    }
  }
  for (const StrategyRun& base : runs)
    for (const char* name : faults) {
      StrategyRun r = base;
      r.spec.faults = {name};
      try {
        strategy_for(r.spec).validate(r.spec);
      } catch (const InputError&) {
        continue;  // does not apply to this schedule (validate says why)
      }
      out.push_back(classify(run_conformance(r), describe(base), name));
    }
  return out;
}

StrategyRun tp_case(int dp, int tp, const std::string& opts, Precision p) {
  StrategyRun s;
  TrainConfig& c = s.spec.train;
  c.model = named_model("tiny-tp");
  c.precision = p;
  c.steps = 3;
  c.batch = 4 * dp;
  c.seq = 12;
  c.optim.lr = 3e-3;
  s.spec.mesh.dp = dp;
  s.spec.mesh.tp = tp;
  apply_strategy_text(s.spec, opts);
  s.world.timeout_s = 120;
  return s;
}

std::vector<FaultCatch> tp_fault_catches(Precision p) {
  std::vector<FaultCatch> out;
  const std::pair<std::pair<int, int>, const char*> cases[] = {
      {{1, 2}, ""}, {{1, 3}, ""}, {{1, 2}, "sp=on"}, {{1, 3}, "sp=on"},
      {{1, 2}, "recompute=full"}, {{1, 1}, "recompute=full"}, {{2, 2}, "shard=zero3"}, {{2, 2}, "shard=zero3,sp=on"}};
  std::vector<StrategyRun> bases;
  for (const auto& [mesh, opts] : cases) bases.push_back(tp_case(mesh.first, mesh.second, opts, p));
  for (const char* opts : {"schedule=1f1b", "schedule=interleaved,virtual_stages=2,sp=on"}) {  // inside stages
    StrategyRun s = tp_case(1, 2, opts, p);
    s.spec.mesh.pp = 2;
    s.spec.train.model.L = 4;
    s.spec.train.microbatches = 4;
    s.spec.train.batch = 4;
    bases.push_back(s);
  }
  for (const StrategyRun& base : bases) {
    const RunSpec& s = base.spec;
    for (tp::Fault f : tp::faults_for(s.mesh.tp, s.tensor.sp, s.tensor.recompute, s.train.model.V % s.mesh.tp != 0)) {
      StrategyRun r = base;
      r.spec.faults = {tp::fault_name(f)};
      out.push_back(classify(run_conformance(r), describe(base), tp::fault_name(f)));
    }
  }
  return out;
}

StrategyRun cp_case(int dp, int tp, int cp, const std::string& opts, Precision p) {
  StrategyRun s = tp_case(dp, tp, "", p);
  s.spec.mesh.cp = cp;
  s.spec.train.seq = 12 % (2 * cp) ? 16 : 12;
  apply_strategy_text(s.spec, opts);
  return s;
}

namespace {
// Ring attention inside two 1F1B stages: cp2.pp2, tiny-tp four blocks deep.
StrategyRun cp_pipeline_case(Precision p) {
  StrategyRun s = cp_case(1, 1, 2, "schedule=1f1b", p);
  s.spec.mesh.pp = 2;
  s.spec.train.model.L = 4;
  s.spec.train.microbatches = 4;
  s.spec.train.batch = 4;
  return s;
}
}  // namespace

std::vector<FaultCatch> cp_fault_catches(Precision p) {
  std::vector<FaultCatch> out;
  const std::vector<StrategyRun> bases = {
      cp_case(1, 1, 2, "cp_algo=ring", p),        cp_case(1, 1, 3, "cp_algo=ring", p),
      cp_case(1, 1, 2, "zigzag=off", p),          cp_case(1, 1, 2, "cp_algo=ulysses", p),
      cp_case(1, 2, 2, "cp_algo=ring,sp=on", p),  cp_case(2, 1, 2, "shard=zero3", p), cp_pipeline_case(p)};
  for (const StrategyRun& base : bases)
    for (cp::Fault f : cp::faults_for(tp::options_of(base.spec).context)) {
      StrategyRun r = base;
      r.spec.faults = {cp::fault_name(f)};
      out.push_back(classify(run_conformance(r), describe(base), cp::fault_name(f)));
    }
  return out;
}

namespace {
// tiny-moe at mesh dp x ep x tp x pp (pp > 1: 1F1B over two microbatches), 4
// sequences per dp rank, the data option and capacity mode given.
StrategyRun moe_case(dp::Shard shard, MoeCapacity cap, int dp, int ep, int tp, int pp, Precision p) {
  StrategyRun base = dp_case(shard, pp > 1 ? 2 : 1, p);
  base.spec.mesh.dp = dp;
  base.spec.mesh.ep = ep;
  base.spec.mesh.tp = tp;
  base.spec.mesh.pp = pp;
  base.spec.mesh.ranks_per_node = 0;
  if (pp > 1) base.spec.pipe.schedule = pipeline::ScheduleKind::one_f_one_b;
  base.spec.train.model = named_model("tiny-moe");
  base.spec.train.model.moe.capacity = cap;
  base.spec.train.batch = 4 * dp;
  return base;
}

// Each fault that bites `base`: under local capacity only the expert-parallel
// ones (the capacity faults need global capacity; the missing router
// gradient moves a rule-only local config by only 1.5x the floor in 3 steps,
// the expert outputs it weighs being near each other at init, so it is
// checked on the global ones — and on data parallel's local row, bitwise).
void add_moe_catches(std::vector<FaultCatch>& out, const StrategyRun& base, std::initializer_list<MoeFault> faults) {
  const bool local = base.spec.train.model.moe.capacity == MoeCapacity::local;
  const bool ep = base.spec.mesh.ep > 1;
  for (MoeFault f : faults) {
    const bool ep_fault = f == MoeFault::ep_combine_permuted || f == MoeFault::ep_expert_grads_dp;
    if (local && !ep_fault && !(f == MoeFault::router_grad_missing && !ep)) continue;
    StrategyRun r = base;
    r.spec.faults = {moe_fault_name(f)};
    out.push_back(classify(run_conformance(r), describe(base), moe_fault_name(f)));
  }
}
}  // namespace

std::vector<FaultCatch> moe_fault_catches(Precision p) {
  std::vector<FaultCatch> out;
  using S = dp::Shard;
  constexpr auto G = MoeCapacity::global, L = MoeCapacity::local;
  const auto moe = {MoeFault::local_capacity, MoeFault::aux_per_rank, MoeFault::router_grad_missing};
  const auto all = {MoeFault::local_capacity, MoeFault::aux_per_rank, MoeFault::router_grad_missing,
                    MoeFault::ep_combine_permuted, MoeFault::ep_expert_grads_dp};
  // Data parallel (dp2): the three MoE faults.
  for (auto [shard, cap] : {std::pair{S::none, G}, std::pair{S::zero3, G}, std::pair{S::none, L}})
    add_moe_catches(out, moe_case(shard, cap, 2, 1, 1, 1, p), moe);
  // Expert parallel (dp4.ep2: experts over ep 2, their states over edp 2):
  // every MoE fault, and the two of the dispatch and the expert reduction.
  for (auto [shard, cap] : {std::pair{S::none, G}, std::pair{S::zero3, G}, std::pair{S::zero1, L}})
    add_moe_catches(out, moe_case(shard, cap, 4, 2, 1, 1, p), all);
  // With tensor-parallel experts (dp4.ep2.tp2: experts split over ep 2 and tp 2).
  for (auto [shard, cap] : {std::pair{S::none, G}, std::pair{S::zero1, L}})
    add_moe_catches(out, moe_case(shard, cap, 4, 2, 2, 1, p), all);
  // Inside pipeline stages (dp4.ep2.pp2, 1F1B, two microbatches).
  for (auto [shard, cap] : {std::pair{S::none, G}, std::pair{S::zero2, L}})
    add_moe_catches(out, moe_case(shard, cap, 4, 2, 1, 2, p), all);
  return out;
}

std::string catch_table_markdown(const std::vector<FaultCatch>& rows) {
  std::vector<Precision> precisions;
  std::vector<std::pair<std::string, std::string>> keys;
  std::map<std::pair<std::string, std::string>, std::map<Precision, const FaultCatch*>> cell;
  for (const auto& r : rows) {
    auto key = std::pair{r.strategy, r.fault};
    if (!cell.count(key)) keys.push_back(key);
    cell[key][r.precision] = &r;
    if (std::find(precisions.begin(), precisions.end(), r.precision) == precisions.end())
      precisions.push_back(r.precision);
  }
  std::string out = "| strategy | fault |", rule = "|---|---|";
  for (Precision p : precisions) {
    out.append(" ").append(precision_name(p)).append(" |");
    rule.append("---|");
  }
  out.append("\n").append(rule).append("\n");
  for (const auto& key : keys) {
    out.append("| ").append(key.first).append(" | ").append(key.second).append(" |");
    for (Precision p : precisions) {
      auto it = cell[key].find(p);
      out.append(" ").append(it == cell[key].end() ? std::string("-") : it->second->caught_by()).append(" |");
    }
    out.append("\n");
  }
  return out;
}

}  // namespace pb
