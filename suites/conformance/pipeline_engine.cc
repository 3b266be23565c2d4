#include "suites/conformance/pipeline_engine.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "harness/status.h"
#include "impl/pipeline/delayed_reference.h"

namespace pb {

namespace pl = pipeline;

bool pipeline_declares_bitwise(const PipelineRun& r) {
  if (r.world.backend != BackendKind::local) return false;
  if (r.pipe.kind == pl::ScheduleKind::pipedream_2bw) return true;  // against its delayed replay
  return pl::accumulates_in_microbatch_order(pl::make_schedule(r.pipe.kind, pl::schedule_config(r.pipe, r.cfg)));
}

std::string describe_bubble(const PipelineReport& rep) {
  auto f = [](double x, int prec = 3) {
    char b[32];
    std::snprintf(b, sizeof b, "%.*f", prec, x);
    return std::string(b);
  };
  const auto& c = rep.measured_costs;
  std::string s = "bubble fraction measured " + f(rep.measured_bubble_fraction) + ", simulated " +
                  f(rep.simulated_bubble_fraction) + " (measured costs F " + f(c.f * 1e3) + " B " +
                  f(c.b * 1e3) + " W " + f(c.w * 1e3) + " ms per stage)";
  if (rep.declared.over_ideal)
    s += "; declared " + rep.declared.formula + " = " + f(*rep.declared.over_ideal) + " over ideal (" +
         f(*rep.declared.fraction) + " fraction) at equal costs";
  return s;
}

namespace {

Trace trace_of(const std::vector<StepStats>& st, std::vector<double> grads1, std::vector<double> params) {
  Trace t;
  for (const auto& s : st) {
    t.loss.push_back(s.loss);
    t.grad_norm.push_back(s.grad_norm);
  }
  t.grads1 = std::move(grads1);
  t.params = std::move(params);
  return t;
}

Trace reference_trace(const TrainConfig& cfg, const SplitPlan& plan, bool delayed) {
  if (delayed) {
    pl::DelayedResult d = pl::run_delayed_reference(cfg, plan);
    return trace_of(d.steps, std::move(d.grads1), std::move(d.params));
  }
  auto t = make_reference_trainer(cfg, plan);
  std::vector<StepStats> st;
  std::vector<double> g1;
  for (int s = 0; s < cfg.steps; ++s) {
    st.push_back(t->step());
    if (s == 0) g1 = t->grads_f64();
  }
  return trace_of(st, std::move(g1), t->params_f64());
}

template <class T>
std::vector<ExactCheck> exact_checks(const PipelineRun& r, pl::PipelineRank<T>& rank, Communicator& world) {
  std::vector<ExactCheck> out;
  auto add = [&](std::string what, int64_t measured, int64_t declared) {
    out.push_back({std::move(what), measured, declared, measured == declared});
  };
  const pl::ScheduleConfig sc = pl::schedule_config(r.pipe, r.cfg);
  const int pr = rank.pp_rank();
  const auto bytes = rank.chunk_bytes();
  int64_t act = 0;
  if (r.pipe.virtual_stages == 1) {
    act = int64_t(pl::declared_peak_in_flight(r.pipe.kind, sc)[size_t(pr)]) * bytes[0];
  } else {  // chunks differ in size: the peak of live bytes in the generated order
    std::vector<std::vector<int64_t>> per(size_t(r.pipe.pp), bytes);
    act = pl::peak_activation_bytes(pl::make_schedule(r.pipe.kind, sc), per)[size_t(pr)];  // row pr: ours
  }
  add("mem.activations", int64_t(rank.memory().peak(MemTag::activations)), act);
  const int64_t db = int64_t(sizeof(T));
  const int Bm = r.cfg.batch / (r.pipe.dp * r.cfg.microbatches);
  const int64_t a = pl::boundary_bytes(Bm, r.cfg.seq, r.cfg.model.C, db);
  CommLog& log = world.log();
  add("comm.pp.send", int64_t(log.get("pp", CommOp::send).bytes),
      pl::p2p_per_step(sc, a).send_bytes[size_t(pr)] * r.cfg.steps);
  const bool ends = pr == 0 || pr == r.pipe.pp - 1;
  add("comm.pp_tied.all_reduce", int64_t(log.get("pp_tied", CommOp::all_reduce).bytes),
      ends ? pl::tied_embedding_grad_bytes(r.cfg.model.V, r.cfg.model.C, db, r.pipe.pp) * r.cfg.steps : 0);
  return out;
}

std::string pack(const std::vector<double>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(double));
}
std::vector<double> unpack(const std::string& s) {
  std::vector<double> v(s.size() / sizeof(double));
  std::memcpy(v.data(), s.data(), v.size() * sizeof(double));
  return v;
}

template <class T>
void run_rank(const PipelineRun& r, Communicator& world, ConformanceResult& res, PipelineReport& rep,
              std::mutex& mu) {
  pl::PipelineRank<T> rank(r.cfg, r.pipe, world);
  std::vector<StepStats> steps;
  std::vector<double> grads1;
  if (rank.schedule().async_weights) {
    steps = rank.run_window();
    grads1 = rank.full_grads();
  } else {
    for (int i = 0; i < r.cfg.steps; ++i) {
      steps.push_back(rank.step());
      if (i == 0) grads1 = rank.full_grads();
    }
  }
  std::vector<double> params = rank.full_params();
  auto exact = exact_checks(r, rank, world);
  double bad = std::any_of(exact.begin(), exact.end(), [](auto& c) { return !c.pass; }) ? 1 : 0;
  world.all_reduce(&bad, &bad, 1, DType::f64);
  // Timing of pipeline replica 0: busy, wall, then (op, mb, chunk, start, end) per action.
  std::vector<double> mine;
  if (rank.dp_rank() == 0) {
    mine = {rank.timing().busy_s, rank.timing().wall_s};
    for (const auto& e : rank.timing().timeline)
      mine.insert(mine.end(), {double(e.op), double(e.microbatch), double(e.chunk), e.start, e.end});
  }
  const auto all = all_gather_strings(world, pack(mine));
  if (world.rank() != 0) return;
  std::lock_guard lk(mu);
  res.steps = steps;
  res.exact = std::move(exact);
  res.ranks_with_mismatch = int(bad);
  rep.trace = trace_of(steps, std::move(grads1), std::move(params));
  for (const auto& s : all) {
    const auto v = unpack(s);
    if (v.empty()) continue;
    rep.busy_s.push_back(v[0]);
    rep.wall_s.push_back(v[1]);
    auto& tl = rep.timeline.emplace_back();
    for (size_t i = 2; i + 4 < v.size(); i += 5)
      tl.push_back({pl::Op(int(v[i])), int(v[i + 1]), int(v[i + 2]), v[i + 3], v[i + 4]});
  }
}

void fill_bubble(const PipelineRun& r, PipelineReport& rep) {
  const int p = int(rep.wall_s.size());
  const double T = *std::max_element(rep.wall_s.begin(), rep.wall_s.end());
  const double ideal = *std::max_element(rep.busy_s.begin(), rep.busy_s.end());
  double idle = 0;
  for (double b : rep.busy_s) idle += T - b;
  rep.makespan_s = T;
  rep.measured_bubble_fraction = idle / (p * T);
  rep.measured_bubble_over_ideal = (T - ideal) / ideal;
  double sum[4] = {0, 0, 0, 0};  // F, B, W, BW
  int n[4] = {0, 0, 0, 0};
  for (const auto& tl : rep.timeline)
    for (const auto& e : tl) {
      const int i = e.op == pl::Op::forward ? 0 : e.op == pl::Op::backward_input ? 1
                    : e.op == pl::Op::backward_weight ? 2 : 3;
      sum[i] += e.end - e.start;
      ++n[i];
    }
  auto mean = [&](int i) { return n[i] ? sum[i] / n[i] * r.pipe.virtual_stages : 0.0; };
  pl::Costs c{mean(0), n[1] ? mean(1) : mean(3) / 2, n[2] ? mean(2) : mean(3) / 2, 0};
  rep.measured_costs = c;
  const pl::ScheduleConfig sc = pl::schedule_config(r.pipe, r.cfg);
  if (c.f + c.b + c.w > 0) {
    const pl::SimResult sim = pl::simulate(pl::make_schedule(r.pipe.kind, sc), c);
    rep.simulated_bubble_fraction = sim.bubble_fraction;
    rep.simulated_bubble_over_ideal = sim.bubble_over_ideal;
  }
  rep.declared = pl::declared_bubble(r.pipe.kind, sc, pl::Costs{});
}

}  // namespace

ConformanceResult run_pipeline_conformance(const PipelineRun& r, World& world, PipelineReport* report) {
  pl::validate(r.pipe, r.cfg, world.size());
  ConformanceResult res;
  res.strategy = r.pipe.describe(r.cfg.microbatches);
  res.precision = r.cfg.precision;
  res.world = world.size();
  res.backend = std::string(backend_name(world.backend()));
  res.bitwise_declared = pipeline_declares_bitwise(r);
  PipelineReport rep;
  std::mutex mu;
  run_ranks(world, [&](Communicator& c) {
    dispatch_dtype(storage_dtype(r.cfg.precision), [&](auto t) { run_rank<decltype(t)>(r, c, res, rep, mu); });
  });
  res.hosts_rank0 = hosts_rank(world, 0);
  if (!res.hosts_rank0) return res;

  const bool delayed = r.pipe.kind == pl::ScheduleKind::pipedream_2bw;
  TrainConfig truth_cfg = r.cfg;
  truth_cfg.precision = Precision::fp64;
  const Trace truth = reference_trace(truth_cfg, {}, delayed);
  const Trace ref = reference_trace(r.cfg, {}, delayed);
  const Trace replay = reference_trace(r.cfg, pl::pipeline_replay_plan(r.pipe, r.cfg), delayed);
  res.rule = check_rule(rep.trace, {&ref, &replay}, truth, storage_dtype(r.cfg.precision), r.rule);
  if (res.bitwise_declared) res.bits = check_bitwise(rep.trace, replay);
  fill_bubble(r, rep);
  if (report) *report = std::move(rep);
  return res;
}

ConformanceResult run_pipeline_conformance(const PipelineRun& r, PipelineReport* report) {
  WorldOptions w = r.world;
  w.size = r.pipe.dp * r.pipe.pp;
  auto world = make_local_world(w);
  return run_pipeline_conformance(r, *world, report);
}

}  // namespace pb
