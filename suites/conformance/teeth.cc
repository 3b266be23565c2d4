#include "suites/conformance/teeth.h"

#include <algorithm>
#include <functional>
#include <map>
#include <tuple>

#include "harness/status.h"
#include "impl/data_parallel/options.h"
#include "impl/registry.h"

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

std::vector<FaultCatch> fault_catches(const std::vector<TeethCase>& cases) {
  std::vector<FaultCatch> out;
  for (const TeethCase& c : cases) {
    const Strategy& st = strategy_for(c.base.spec);
    // The mesh first: cases differing only in it (a pipeline at dp1 and dp2) stay apart.
    const std::string name = mesh_text(c.base.spec.mesh) + " " + conformance_label(c.base.spec);
    for (const FaultDecl& f : st.faults) {
      if (std::find(c.axes.begin(), c.axes.end(), f.axis) == c.axes.end() || !f.applies(c.base.spec)) continue;
      StrategyRun r = c.base;
      r.spec.faults = {&f};  // the strategy's own (static) row
      try {
        st.validate(r.spec);
      } catch (const InputError&) {
        continue;  // refused on this case (validate says why): lives in another runner's code
      }
      out.push_back(classify(run_conformance(r), name, std::string(f.name)));
    }
  }
  return out;
}

std::vector<FaultDecl> declared_faults(FaultAxis axis) {
  std::vector<FaultDecl> out;
  for (const Strategy* st : strategies())
    for (const FaultDecl& f : st->faults)
      if (f.axis == axis && std::none_of(out.begin(), out.end(), [&](const FaultDecl& g) { return g.name == f.name; }))
        out.push_back(f);
  return out;
}

namespace {

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

std::vector<TeethCase> dp_teeth_cases(Precision p) {
  std::vector<TeethCase> out;
  // DDP with two microbatches: sync_wrong_microbatch needs one to sync early.
  const std::pair<dp::Shard, int> cases[] = {{dp::Shard::none, 2}, {dp::Shard::zero1, 1},
                                             {dp::Shard::zero2, 1}, {dp::Shard::zero3, 1},
                                             {dp::Shard::hsdp, 1},  {dp::Shard::hzero, 1}};
  for (auto [shard, micro] : cases) out.push_back({dp_case(shard, micro, p), {FaultAxis::data}});
  for (auto [shard, _] : cases) {  // offload's own fault, on every shard, with accumulation
    StrategyRun s = dp_case(shard, 2, p);
    s.spec.data.offload = dp::Offload::optimizer;
    out.push_back({s, {FaultAxis::offload}});
  }
  return out;
}

std::vector<TeethCase> pipeline_teeth_cases(Precision p) {
  namespace pl = pipeline;
  std::vector<TeethCase> out;
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
    out.push_back({base, {FaultAxis::data, FaultAxis::offload}});
  }
  // The pipeline's own faults on every schedule they apply to.
  std::vector<StrategyRun> runs;
  for (auto k : {pl::ScheduleKind::gpipe, pl::ScheduleKind::one_f_one_b, pl::ScheduleKind::zb_h1})
    for (int pp : {2, 3}) runs.push_back(pipe_case(k, pp, 1, 1, p));
  runs.push_back(pipe_case(pl::ScheduleKind::interleaved, 2, 2, 1, p));
  runs.push_back(pipe_case(pl::ScheduleKind::pipedream_2bw, 2, 1, 1, p));
  runs.back().spec.train.steps = 4;  // 2BW: four weight versions, three delayed updates
  runs.push_back(pipe_case(pl::ScheduleKind::one_f_one_b, 2, 1, 2, p));  // x DDP
  runs.push_back(pipe_case(pl::ScheduleKind::zb_h1, 2, 1, 2, p));
  runs.back().spec.data.shard = dp::Shard::zero1;
  for (const StrategyRun& r : llama_pipe_cases(p)) runs.push_back(r);
  for (const StrategyRun& r : runs) out.push_back({r, {FaultAxis::pipeline}});
  return out;
}

std::vector<StrategyRun> llama_pipe_cases(Precision p) {
  namespace pl = pipeline;
  std::vector<StrategyRun> out;
  for (StrategyRun r : {pipe_case(pl::ScheduleKind::one_f_one_b, 2, 1, 1, p),
                        pipe_case(pl::ScheduleKind::interleaved, 2, 2, 1, p),
                        pipe_case(pl::ScheduleKind::pipedream_2bw, 2, 1, 1, p),
                        pipe_case(pl::ScheduleKind::zb_h1, 2, 1, 1, p),
                        pipe_case(pl::ScheduleKind::gpipe, 2, 1, 2, p)}) {
    r.spec.train.model = named_model("tiny-llama");
    r.spec.train.model.L = 4;  // interleaved: two chunks of one block on each of two stages
    if (r.spec.mesh.dp == 2) r.spec.data.shard = dp::Shard::zero3;
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<StrategyRun> mixtral_pipe_cases(Precision p) {
  namespace pl = pipeline;
  struct Case { pl::ScheduleKind k; int v, dp, ep, tp; dp::Shard shard; };
  const Case cases[] = {{pl::ScheduleKind::gpipe, 1, 1, 1, 1, dp::Shard::none},
                        {pl::ScheduleKind::one_f_one_b, 1, 2, 2, 1, dp::Shard::none},
                        {pl::ScheduleKind::interleaved, 2, 2, 2, 1, dp::Shard::zero3},
                        {pl::ScheduleKind::one_f_one_b, 1, 2, 2, 2, dp::Shard::none}};
  std::vector<StrategyRun> out;
  for (const Case& c : cases) {
    StrategyRun r = pipe_case(c.k, 2, c.v, c.dp, p);
    r.spec.train.model = named_model("tiny-mixtral");
    r.spec.train.model.L = 4;  // interleaved: two chunks of one block on each of two stages
    r.spec.mesh.ep = c.ep;
    r.spec.mesh.tp = c.tp;
    r.spec.data.shard = c.shard;
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<StrategyRun> mixtral_2bw_cases(Precision p) {
  std::vector<StrategyRun> out;
  for (int dp : {1, 2}) {
    StrategyRun r = pipe_case(pipeline::ScheduleKind::pipedream_2bw, 2, 1, dp, p);
    r.spec.train.model = named_model("tiny-mixtral");
    r.spec.train.model.L = 4;
    r.spec.train.model.moe.capacity = MoeCapacity::local;
    r.spec.mesh.ep = dp;
    if (dp == 2) r.spec.data.shard = dp::Shard::zero1;
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<FaultCatch> dp_fault_catches(Precision p) { return fault_catches(dp_teeth_cases(p)); }

std::vector<FaultCatch> pipeline_fault_catches(Precision p) { return fault_catches(pipeline_teeth_cases(p)); }

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
  apply_strategy_text(s.spec, opts, fault_catalogue());
  s.world.timeout_s = 120;
  return s;
}

StrategyRun llama_tp_case(int dp, int tp, const std::string& opts, Precision p) {
  StrategyRun s = tp_case(dp, tp, opts, p);
  s.spec.train.model = named_model("tiny-llama");
  return s;
}

std::vector<TeethCase> tp_teeth_cases(Precision p) {
  const std::pair<std::pair<int, int>, const char*> cases[] = {
      {{1, 2}, ""}, {{1, 3}, ""}, {{1, 2}, "sp=on"}, {{1, 3}, "sp=on"},
      {{1, 2}, "recompute=full"}, {{1, 1}, "recompute=full"}, {{2, 2}, "shard=zero3"}, {{2, 2}, "shard=zero3,sp=on"}};
  std::vector<TeethCase> out;
  for (const auto& [mesh, opts] : cases) out.push_back({tp_case(mesh.first, mesh.second, opts, p), {FaultAxis::tensor}});
  for (const char* opts : {"schedule=1f1b", "schedule=interleaved,virtual_stages=2,sp=on",
                           "schedule=zb-h1,sp=on"}) {  // inside stages (zb-h1: zb_w_wrong_rows too)
    StrategyRun s = tp_case(1, 2, opts, p);
    s.spec.mesh.pp = 2;
    s.spec.train.model.L = 4;
    s.spec.train.microbatches = 4;
    s.spec.train.batch = 4;
    out.push_back({s, {FaultAxis::tensor}});
  }
  for (const char* opts : {"", "sp=on"}) out.push_back({llama_tp_case(1, 4, opts, p), {FaultAxis::tensor}});
  return out;
}

std::vector<FaultCatch> tp_fault_catches(Precision p) { return fault_catches(tp_teeth_cases(p)); }

StrategyRun cp_case(int dp, int tp, int cp, const std::string& opts, Precision p) {
  StrategyRun s = tp_case(dp, tp, "", p);
  s.spec.mesh.cp = cp;
  s.spec.train.seq = 12 % (2 * cp) ? 16 : 12;
  apply_strategy_text(s.spec, opts, fault_catalogue());
  return s;
}

StrategyRun in_two_stages(StrategyRun s) {
  s.spec.mesh.pp = 2;
  s.spec.train.model.L = 4;
  s.spec.train.microbatches = 4;
  s.spec.train.batch = 4;
  return s;
}

namespace {
// Ring attention inside two 1F1B stages: cp2.pp2, tiny-tp four blocks deep.
StrategyRun cp_pipeline_case(Precision p) { return in_two_stages(cp_case(1, 1, 2, "schedule=1f1b", p)); }
}  // namespace

StrategyRun llama_cp_case(int dp, int tp, int cp, const std::string& opts, Precision p) {
  StrategyRun s = cp_case(dp, tp, cp, "", p);
  s.spec.train.model = named_model("tiny-llama");
  apply_strategy_text(s.spec, opts, fault_catalogue());
  return s;
}

// The llama family inside context-parallel pipeline stages: cp2.pp2, 1F1B.
static StrategyRun llama_cp_pipeline_case(Precision p) {
  return in_two_stages(llama_cp_case(1, 1, 2, "schedule=1f1b,cp_algo=ring", p));
}

std::vector<TeethCase> cp_teeth_cases(Precision p) {
  std::vector<TeethCase> out;
  for (StrategyRun r : {cp_case(1, 1, 2, "cp_algo=ring", p), cp_case(1, 1, 3, "cp_algo=ring", p),
                        cp_case(1, 1, 2, "zigzag=off", p), cp_case(1, 1, 2, "cp_algo=ulysses", p),
                        cp_case(1, 2, 2, "cp_algo=ring,sp=on", p), cp_case(2, 1, 2, "shard=zero3", p),
                        cp_pipeline_case(p),
                        // the llama family: RoPE by true position on the ring (kv heads wide) and
                        // under Ulysses with kv heads replicated over cp (tp2: one kv head per rank)
                        llama_cp_case(1, 1, 2, "cp_algo=ring", p), llama_cp_case(1, 2, 2, "cp_algo=ulysses", p),
                        llama_cp_pipeline_case(p)})
    out.push_back({std::move(r), {FaultAxis::context}});
  return out;
}

std::vector<FaultCatch> cp_fault_catches(Precision p) { return fault_catches(cp_teeth_cases(p)); }

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

}  // namespace

std::vector<TeethCase> moe_teeth_cases(Precision p) {
  std::vector<TeethCase> out;
  using S = dp::Shard;
  constexpr auto G = MoeCapacity::global, L = MoeCapacity::local;
  auto add = [&](StrategyRun r) { out.push_back({std::move(r), {FaultAxis::moe}}); };
  // Data parallel (dp2): the MoE layer's faults (ep's need ep >= 2).
  for (auto [shard, cap] : {std::pair{S::none, G}, std::pair{S::zero3, G}, std::pair{S::none, L}})
    add(moe_case(shard, cap, 2, 1, 1, 1, p));
  // Expert parallel (dp4.ep2: experts over ep 2, their states over edp 2):
  // every MoE fault, the dispatch's and the expert reduction's too.
  for (auto [shard, cap] : {std::pair{S::none, G}, std::pair{S::zero3, G}, std::pair{S::zero1, L}})
    add(moe_case(shard, cap, 4, 2, 1, 1, p));
  // With tensor-parallel experts (dp4.ep2.tp2: experts split over ep 2 and tp 2).
  for (auto [shard, cap] : {std::pair{S::none, G}, std::pair{S::zero1, L}}) add(moe_case(shard, cap, 4, 2, 2, 1, p));
  // Inside pipeline stages (dp4.ep2.pp2, 1F1B, two microbatches).
  for (auto [shard, cap] : {std::pair{S::none, G}, std::pair{S::zero2, L}}) add(moe_case(shard, cap, 4, 2, 1, 2, p));
  // Composed (issue 49 item 3): full recompute at dp2.tp2 (the backward's
  // rerun of the routing); sequence parallel at dp2.tp2; context parallel at cp2 and dp2.cp2 (the cp ranks
  // share the capacity and the load-balancing statistics).
  StrategyRun rc = moe_case(S::none, G, 2, 1, 2, 1, p);
  rc.spec.tensor.recompute = Recompute::full;
  add(rc);
  StrategyRun sp = moe_case(S::none, G, 2, 1, 2, 1, p);  // sequence parallel at dp2.tp2
  sp.spec.tensor.sp = true;
  add(sp);
  for (auto [shard, cap, dp] : {std::tuple{S::none, G, 1}, std::tuple{S::zero1, L, 2}}) {
    StrategyRun c = moe_case(shard, cap, dp, 1, 1, 1, p);
    c.spec.mesh.cp = 2;
    add(c);
  }
  // Expert and context parallel together, the ep group folded over dp x cp:
  // dp2.cp2.ep2 (a data rank's cp ranks) and dp2.cp2.ep4 (data and cp ranks).
  for (auto [shard, cap, ep] : {std::tuple{S::none, G, 2}, std::tuple{S::zero3, L, 4}}) {
    StrategyRun c = moe_case(shard, cap, 2, ep, 1, 1, p);
    c.spec.mesh.cp = 2;
    add(c);
  }
  // ... inside pipeline stages (1F1B, two microbatches): dp2.cp2.ep2.pp2 and
  // dp2.cp2.ep4.pp2, ep folded over each stage's dp x cp ranks.
  for (auto [shard, ep] : {std::pair{S::none, 2}, std::pair{S::zero1, 4}}) {
    StrategyRun c = moe_case(shard, G, 2, ep, 1, 2, p);
    c.spec.mesh.cp = 2;
    add(c);
  }
  return out;
}

std::vector<FaultCatch> moe_fault_catches(Precision p) { return fault_catches(moe_teeth_cases(p)); }

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
  // Where a bug class shipped (FaultDecl::source), for the faults that have one.
  auto source = [](const std::string& fault) {
    for (const FaultDecl& d : fault_catalogue())
      if (d.name == fault) return std::string(d.source);
    return std::string();
  };
  std::string out = "| strategy | fault |", rule = "|---|---|";
  for (Precision p : precisions) {
    out.append(" ").append(precision_name(p)).append(" |");
    rule.append("---|");
  }
  out.append(" source |\n").append(rule).append("---|\n");
  for (const auto& key : keys) {
    out.append("| ").append(key.first).append(" | ").append(key.second).append(" |");
    for (Precision p : precisions) {
      auto it = cell[key].find(p);
      out.append(" ").append(it == cell[key].end() ? std::string("-") : it->second->caught_by()).append(" |");
    }
    out.append(" ").append(source(key.second)).append(" |\n");
  }
  return out;
}

}  // namespace pb
