#include "suites/conformance/engine.h"

#include <algorithm>
#include <map>
#include <mutex>

#include "harness/status.h"
#include "impl/data_parallel/cost.h"
#include "impl/data_parallel/dp_rank.h"
#include "impl/data_parallel/replay.h"

namespace pb {

bool ConformanceResult::pass() const {
  auto ok = [](const auto& v) {
    return std::all_of(v.begin(), v.end(), [](const auto& c) { return c.pass; });
  };
  return ok(rule) && ok(bits) && ok(exact) && ranks_with_mismatch == 0;
}

std::string describe_failures(const ConformanceResult& r) {
  std::string out;
  for (const auto& c : r.rule)
    if (!c.pass) out += " [" + c.quantity + "@" + std::to_string(c.step) + " ratio " + std::to_string(c.ratio) + "]";
  for (const auto& c : r.bits)
    if (!c.pass) out += " [bits " + c.quantity + "@" + std::to_string(c.step) + "]";
  for (const auto& c : r.exact)
    if (!c.pass) out += " [" + c.what + " " + std::to_string(c.measured) + " != " + std::to_string(c.declared) + "]";
  if (r.ranks_with_mismatch) out += " [" + std::to_string(r.ranks_with_mismatch) + " ranks differ from declared]";
  return out;
}

bool declares_bitwise(const StrategyRun& s) {
  return dp::declares_bitwise(s.dp, s.cfg, s.world.backend == BackendKind::local);
}

SplitPlan replay_plan(const StrategyRun& s) { return dp::replay_plan(s.dp, s.cfg); }

namespace {

Trace reference_trace(const TrainConfig& cfg, const SplitPlan& plan) {
  auto t = make_reference_trainer(cfg, plan);
  Trace tr;
  for (int s = 0; s < cfg.steps; ++s) {
    StepStats st = t->step();
    tr.loss.push_back(st.loss);
    tr.grad_norm.push_back(st.grad_norm);
    if (s == 0) tr.grads1 = t->grads_f64();
  }
  tr.params = t->params_f64();
  return tr;
}

std::vector<int64_t> unit_sizes(const ParamLayout& l) {
  std::vector<int64_t> u;
  for (int i = 0; i < l.num_units(); ++i) u.push_back(l.unit_size(i));
  return u;
}

// Memory and communication of this rank against the declared figures.
std::vector<ExactCheck> exact_checks(const StrategyRun& s, const ParamLayout& l,
                                     const MemoryTracker& mem, CommLog& log) {
  std::vector<ExactCheck> out;
  const auto units = unit_sizes(l);
  dp::DataAxis axis = dp::data_axis(s.dp, s.cfg.precision, s.cfg.microbatches);
  dp::ModelStateBytes d = dp::model_state_bytes(units, axis);
  auto add = [&](std::string what, int64_t measured, int64_t declared) {
    out.push_back({std::move(what), measured, declared, measured == declared});
  };
  add("mem.params", int64_t(mem.peak(MemTag::params)), d.params);
  add("mem.grads", int64_t(mem.peak(MemTag::grads)), d.grads);
  add("mem.optimizer", int64_t(mem.peak(MemTag::optimizer)), d.optimizer);
  add("mem.optimizer.host", int64_t(mem.peak(MemTag::optimizer, Place::host)), d.optimizer_host);
  add("mem.comm", int64_t(mem.peak(MemTag::comm)), dp::comm_buffer_peak_bytes(units, axis));

  std::map<std::pair<std::string, CommOp>, int64_t> declared;
  auto op_of = [](dp::Coll c) {
    return c == dp::Coll::all_reduce ? CommOp::all_reduce
           : c == dp::Coll::reduce_scatter ? CommOp::reduce_scatter : CommOp::all_gather;
  };
  for (const auto& c : dp::comm_per_step(units, axis))
    declared[{c.group, op_of(c.op)}] += c.bytes * s.cfg.steps;
  // Scalars: the loss every step; the squared-norm partial sums when sharded.
  if (s.dp.dp > 1) {
    bool sharded = s.dp.shard != dp::Shard::none;
    bool hsdp_one_group = s.dp.shard == dp::Shard::hsdp && dp::shard_group(s.dp) == 1;
    declared[{"dp_scalar", CommOp::all_reduce}] +=
        8 * s.cfg.steps * (1 + (sharded && !hsdp_one_group ? 1 : 0));
  }
  for (const auto& g : log.groups()) {
    if (g == "check" || g == "world") continue;
    for (CommOp op : {CommOp::all_reduce, CommOp::reduce_scatter, CommOp::all_gather}) {
      int64_t m = int64_t(log.get(g, op).bytes);
      if (m || declared.count({g, op}))
        add("comm." + g + "." + std::string(comm_op_name(op)), m, declared[{g, op}]);
      declared.erase({g, op});
    }
  }
  for (const auto& [k, v] : declared)
    if (v) add("comm." + k.first + "." + std::string(comm_op_name(k.second)), 0, v);
  return out;
}

template <class T>
void run_rank(const StrategyRun& s, Communicator& world, ConformanceResult& res, Trace& trace,
              std::mutex& mu) {
  dp::DpRank<T> rank(s.cfg, s.dp, world);
  std::vector<StepStats> steps;
  std::vector<double> grads1;
  for (int i = 0; i < s.cfg.steps; ++i) {
    steps.push_back(rank.step());
    if (i == 0) grads1 = rank.full_grads();
  }
  std::vector<double> params = rank.full_params();
  auto exact = exact_checks(s, rank.layout(), rank.memory(), world.log());
  double bad = std::any_of(exact.begin(), exact.end(), [](auto& c) { return !c.pass; }) ? 1 : 0;
  world.all_reduce(&bad, &bad, 1, DType::f64);
  if (world.rank() != 0) return;
  std::lock_guard lk(mu);
  res.steps = steps;
  res.exact = std::move(exact);
  res.ranks_with_mismatch = int(bad);
  for (const auto& st : steps) {
    trace.loss.push_back(st.loss);
    trace.grad_norm.push_back(st.grad_norm);
  }
  trace.grads1 = std::move(grads1);
  trace.params = std::move(params);
}

}  // namespace

ConformanceResult run_conformance(const StrategyRun& s, World& world) {
  dp::validate(s.dp, s.cfg);
  require(world.size() == s.dp.dp, "strategy.dp: must equal the world size (" +
                                       std::to_string(world.size()) + "), got " +
                                       std::to_string(s.dp.dp));
  ConformanceResult res;
  res.strategy = s.dp.describe();
  if (s.cfg.microbatches > 1) res.strategy += " accum" + std::to_string(s.cfg.microbatches);
  res.precision = s.cfg.precision;
  res.world = world.size();
  res.backend = std::string(backend_name(world.backend()));
  res.bitwise_declared = declares_bitwise(s);
  Trace strat;
  std::mutex mu;
  run_ranks(world, [&](Communicator& c) {
    dispatch_dtype(storage_dtype(s.cfg.precision),
                   [&](auto t) { run_rank<decltype(t)>(s, c, res, strat, mu); });
  });
  res.hosts_rank0 = hosts_rank(world, 0);
  if (!res.hosts_rank0) return res;

  TrainConfig truth_cfg = s.cfg;
  truth_cfg.precision = Precision::fp64;
  const Trace truth = reference_trace(truth_cfg, {});
  const Trace ref = reference_trace(s.cfg, {});
  const Trace replay = reference_trace(s.cfg, replay_plan(s));
  res.rule = check_rule(strat, {&ref, &replay}, truth, storage_dtype(s.cfg.precision), s.rule);
  if (res.bitwise_declared) res.bits = check_bitwise(strat, replay);
  return res;
}

ConformanceResult run_conformance(const StrategyRun& s) {
  WorldOptions w = s.world;
  w.size = s.dp.dp;
  auto world = make_local_world(w);
  return run_conformance(s, *world);
}

}  // namespace pb
