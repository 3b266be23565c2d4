#include "suites/conformance/engine.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <stdexcept>

#include "harness/status.h"
#include "impl/pipeline/delayed_reference.h"
#include "impl/registry.h"

namespace pb {

const ExactCheck& ConformanceResult::exact_of(const std::string& what) const {
  for (const auto& e : exact)
    if (e.what == what) return e;
  throw std::out_of_range("no exact check " + what + " in " + strategy);
}

bool ConformanceResult::pass() const {
  auto ok = [](const auto& v) {
    return std::all_of(v.begin(), v.end(), [](const auto& c) { return c.pass; });
  };
  return ok(rule) && ok(bits) && ok(fp64) && ok(exact) && ranks_with_mismatch == 0;
}

std::string conformance_label(const RunSpec& s) {
  std::string l = strategy_text(s);
  if (s.train.model.moe.experts > 0) l += " model=" + s.train.model.name;
  if (s.train.microbatches > 1) l += " microbatches=" + std::to_string(s.train.microbatches);
  return l;
}

std::string describe_failures(const ConformanceResult& r) {
  std::string out;
  for (const auto& c : r.rule)
    if (!c.pass) out += " [" + c.quantity + "@" + std::to_string(c.step) + " ratio " + std::to_string(c.ratio) + "]";
  for (const auto& c : r.bits)
    if (!c.pass) out += " [bits " + c.quantity + "@" + std::to_string(c.step) + "]";
  for (const auto& c : r.fp64)
    if (!c.pass)
      out += " [at fp64 " + c.quantity + "@" + std::to_string(c.step) + " ratio " + std::to_string(c.ratio) + "]";
  for (const auto& c : r.exact)
    if (!c.pass) out += " [" + c.what + " " + std::to_string(c.measured) + " != " + std::to_string(c.declared) + "]";
  if (r.ranks_with_mismatch) out += " [" + std::to_string(r.ranks_with_mismatch) + " ranks differ from declared]";
  return out;
}

std::vector<ExactCheck> exact_checks(const Declared& d, const MemoryTracker& mem, const CommLog& log) {
  std::vector<ExactCheck> out;
  auto add = [&](std::string what, int64_t measured, int64_t declared) {
    out.push_back({std::move(what), measured, declared, measured == declared});
  };
  for (const auto& m : d.memory) add(m.item, int64_t(mem.peak(m.tag, m.place)), m.bytes);
  std::map<std::pair<std::string, CommOp>, int64_t> declared;
  for (const auto& c : d.comm) declared[{c.group, c.op}] += c.bytes;
  auto exempt = [](CommOp op) { return op == CommOp::recv || op == CommOp::sendrecv || op == CommOp::barrier; };
  auto name = [](const std::string& g, CommOp op) { return "comm." + g + "." + std::string(comm_op_name(op)); };
  for (const auto& g : log.groups()) {
    if (g == "check" || g == "world") continue;  // the checks' own gathers and the engine's verdict
    for (int i = 0; i < kNumCommOps; ++i) {
      const CommOp op = CommOp(i);
      if (exempt(op)) continue;
      const int64_t m = int64_t(log.get(g, op).bytes);
      auto it = declared.find({g, op});
      if (m || it != declared.end()) add(name(g, op), m, it == declared.end() ? 0 : it->second);
      if (it != declared.end()) declared.erase(it);
    }
  }
  for (const auto& [k, v] : declared)
    if (v) add(name(k.first, k.second), 0, v);
  return out;
}

namespace {
// The strategy's claim, on the CPU only: a device's kernels round differently
// from the replay's (host code).
bool bitwise_on(const Strategy& st, const RunSpec& s, BackendKind b) {
  return s.train.device == Device::cpu && st.bitwise(s, b);
}
}  // namespace

bool declares_bitwise(const StrategyRun& s) { return bitwise_on(strategy_for(s.spec), s.spec, s.world.backend); }

Replay replay_of(const StrategyRun& s) { return strategy_for(s.spec).replay(s.spec); }

namespace {

Trace trace_of(const std::vector<StepStats>& st, std::vector<double> grads1, std::vector<double> params) {
  Trace t;
  for (const auto& s : st) {
    t.loss.push_back(s.loss);
    t.grad_norm.push_back(s.grad_norm);
    if (!s.moe_tokens.empty()) {
      t.moe_tokens.push_back(s.moe_tokens);
      t.moe_aux.push_back(s.moe_aux);
      std::vector<double> margins;
      for (const auto& m : s.moe_margins) margins.insert(margins.end(), m.begin(), m.end());
      t.moe_margins.push_back(std::move(margins));
    }
  }
  t.grads1 = std::move(grads1);
  t.params = std::move(params);
  return t;
}


}  // namespace

Trace scaled_distance(const Trace& x, const Trace& truth, double k) {
  auto scale = [&](const std::vector<double>& a, const std::vector<double>& t) {
    std::vector<double> out(t.size());
    for (size_t i = 0; i < t.size() && i < a.size(); ++i) out[i] = t[i] + k * (a[i] - t[i]);
    return out;
  };
  Trace out;
  out.loss = scale(x.loss, truth.loss);
  out.grad_norm = scale(x.grad_norm, truth.grad_norm);
  out.grads1 = scale(x.grads1, truth.grads1);
  out.params = scale(x.params, truth.params);
  for (size_t s = 0; s < truth.moe_aux.size() && s < x.moe_aux.size(); ++s)
    out.moe_aux.push_back(scale(x.moe_aux[s], truth.moe_aux[s]));
  return out;
}

namespace {

std::string pack(const RankTimes& t) {
  std::vector<double> v = {t.wall_s, t.busy_s};
  v.insert(v.end(), t.timeline.begin(), t.timeline.end());
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(double));
}
RankTimes unpack(const std::string& s) {
  std::vector<double> v(s.size() / sizeof(double));
  std::copy_n(reinterpret_cast<const char*>(s.data()), v.size() * sizeof(double),
              reinterpret_cast<char*>(v.data()));
  RankTimes t;
  if (v.size() >= 2) {
    t.wall_s = v[0];
    t.busy_s = v[1];
    t.timeline.assign(v.begin() + 2, v.end());
  }
  return t;
}

void run_rank(const StrategyRun& s, const Strategy& strat, Communicator& world, ConformanceResult& res,
              std::mutex& mu) {
  const RankDevice device(world, s.spec.train.device, s.open_device);  // outlives the rank
  std::unique_ptr<Rank> rank = strat.make_rank(s.spec, world, device.get());
  std::vector<double> grads1;
  std::vector<StepStats> steps = rank->train(s.spec.train.steps, &grads1);
  std::vector<double> params = rank->full_params();
  auto exact = exact_checks(rank->declared(s.spec.train.steps), rank->memory(), world.log());
  double bad = std::any_of(exact.begin(), exact.end(), [](auto& c) { return !c.pass; }) ? 1 : 0;
  world.all_reduce(&bad, &bad, 1, DType::f64);
  // A step takes as long as its slowest rank (the step rows' step_time_s).
  std::vector<double> seconds;
  for (const StepStats& st : steps) seconds.push_back(st.seconds);
  world.all_reduce(seconds.data(), seconds.data(), seconds.size(), DType::f64, ReduceOp::max);
  for (size_t i = 0; i < steps.size(); ++i) steps[i].seconds = seconds[i];
  const auto times = all_gather_strings(world, pack(rank->times()));
  if (world.rank() != 0) return;
  std::lock_guard lk(mu);
  res.steps = steps;
  res.exact = std::move(exact);
  res.ranks_with_mismatch = int(bad);
  res.trace = trace_of(steps, std::move(grads1), std::move(params));
  if (device.get()) res.device = device.get()->name;
  for (const auto& t : times) res.times.push_back(unpack(t));
}

}  // namespace

Trace reference_trace(const TrainConfig& cfg, const Replay& replay, const TrainDevice* device,
                      std::shared_ptr<const kernels::DeviceOps<double>> f64_ops) {
  if (replay.delayed_weights) {
    pipeline::DelayedResult d = pipeline::run_delayed_reference(cfg, replay.plan, device, f64_ops);
    return trace_of(d.steps, std::move(d.grads1), std::move(d.params));
  }
  std::unique_ptr<TrainerBase> t;
  if (f64_ops) {
    require(cfg.precision == Precision::fp64 && cfg.device == Device::cpu && f64_ops->is_host(),
            "reference trace: fp64 ops are for an fp64 run on the host");
    t = std::make_unique<ReferenceTrainer<double>>(cfg, replay.plan, std::move(f64_ops), nullptr);
  } else {
    t = make_reference_trainer(cfg, replay.plan, device);
  }
  std::vector<StepStats> st;
  std::vector<double> g1;
  for (int s = 0; s < cfg.steps; ++s) {
    st.push_back(t->step());
    if (s == 0) g1 = t->grads_f64();
  }
  return trace_of(st, std::move(g1), t->params_f64());
}

ConformanceResult run_conformance(const StrategyRun& s, World& world) {
  validate(s.spec);
  const Strategy& strat = strategy_for(s.spec);
  strat.validate(s.spec);
  require(s.spec.train.device == Device::cpu || s.open_device != nullptr,  // before any rank starts
          "train.device: cuda: the run was given no way to open a device");
  require(world.size() == s.spec.world(),
          "mesh: " + mesh_text(s.spec.mesh) + " needs " + std::to_string(s.spec.world()) +
              " ranks, the world has " + std::to_string(world.size()));
  ConformanceResult res;
  res.strategy = conformance_label(s.spec);
  res.mesh = mesh_text(s.spec.mesh);
  res.precision = s.spec.train.precision;
  res.world = world.size();
  res.backend = std::string(backend_name(world.backend()));
  const bool bitwise = bitwise_on(strat, s.spec, world.backend());
  res.bitwise_declared = bitwise;
  std::mutex mu;
  run_ranks(world, [&](Communicator& c) { run_rank(s, strat, c, res, mu); });
  // A twin the strategy declares bit-identical (e.g. recomputation against
  // none) runs on the same world; only its trace is used.
  const std::optional<RunSpec> twin = strat.bitwise_twin ? strat.bitwise_twin(s.spec) : std::nullopt;
  ConformanceResult twin_res;
  if (twin) {
    const StrategyRun t{*twin, s.world, s.rule, s.open_device};
    run_ranks(world, [&](Communicator& c) { run_rank(t, strat, c, twin_res, mu); });  // the same implementation
    res.bitwise_declared = true;
  }
  const bool at_fp64 = !bitwise && s.spec.train.precision != Precision::fp64;
  ConformanceResult fp64_res;
  if (at_fp64) {
    StrategyRun t = s;
    t.spec.train.precision = Precision::fp64;
    t.spec.train.device = Device::cpu;  // fp64 is the CPU's
    run_ranks(world, [&](Communicator& c) { run_rank(t, strat, c, fp64_res, mu); });
  }
  res.hosts_rank0 = hosts_rank(world, 0);
  if (!res.hosts_rank0) return res;

  const Replay replay = strat.replay(s.spec);
  TrainConfig host = s.spec.train;  // the references on the CPU
  host.device = Device::cpu;
  TrainConfig truth_cfg = host;
  truth_cfg.precision = Precision::fp64;
  Replay plain;
  plain.delayed_weights = replay.delayed_weights;
  // Routing is defined per capacity group (capacity, dropped tokens and the
  // load-balancing loss are not sums over tokens): for a mixture of experts
  // the truth and the plain reference train the run's network, grouped and
  // microbatched like it (the replay's order of summation left out).
  // Otherwise, with `local` capacity or microbatches, the truth would be
  // another network and the floor (the replay's distance to it) would hide
  // any error smaller than that gap: ratios of exactly 1.
  if (s.spec.train.model.moe.experts > 0) {
    plain.plan.groups = replay.plan.groups;
    plain.plan.micro = replay.plan.micro;
    plain.plan.moe_joint = replay.plan.moe_joint;
  }
  const Trace truth = reference_trace(truth_cfg, plain);
  const Trace ref = reference_trace(host, plain);
  const Trace rep = reference_trace(host, replay);
  std::vector<const Trace*> floors = {&ref, &rep};
  Trace on_device;  // the same reference on rank 0's device: its kernels' rounding is a floor too
  if (const std::shared_ptr<TrainDevice> device = open_device(s.spec.train.device, s.open_device)) {
    // A device runs the plain plan or joint MoE microbatches (trainer.h):
    // local capacity's groups are the same network as consecutive
    // microbatches (each its own capacity scope), the gradient summed in
    // microbatch order instead of per group.
    Replay dev = plain;
    if (dev.plan.groups > 1 && !dev.plan.moe_joint) {
      dev.plan.micro *= dev.plan.groups;
      dev.plan.groups = 1;
    }
    on_device = reference_trace(s.spec.train, dev, device.get());
    floors.push_back(&on_device);
  }
  const DType dt = storage_dtype(s.spec.train.precision);
  res.rule = check_rule(res.trace, floors, truth, dt, s.rule);
  // The global gradient norm before clipping, every step, by the same rule:
  // a norm reduced over the wrong ranks moves loss and parameters only
  // through the clip factor (docs/numerics.md). Not in the fp64 rerun: no
  // fp64 reference there sums the squares in another order, so its floor is
  // the 4-ulp minimum, below a correct per-rank order's rounding.
  for (QuantityCheck& c : check_grad_norm(res.trace, floors, truth, dt, s.rule)) res.rule.push_back(std::move(c));
  if (at_fp64) {
    // The fp64 floor. At fp64 the truth is the reference, so the floor needs
    // correct references that round differently: a few fp64 ulps alone are
    // too tight for a strategy that reorders inner products, because Adam's
    // normalization lifts the rounding noise of gradients near its epsilon
    // (an expert that saw few tokens) far above an ulp of the parameters.
    //  - the replay (the strategy's order of the data-parallel sums);
    //  - the reference with every matmul's inner sums in 2, 3 and 4 slices
    //    (kernels::cpu_ops_sliced): the same network in three other orders
    //    of its inner products, the kind of order a tensor, sequence or
    //    expert split changes, so their distances sample the noise that
    //    order alone brings at fp64 on this machine's BLAS (one sample can
    //    be small by luck: the noise of one weight whose gradient sits near
    //    Adam's epsilon can dominate the whole vector's);
    //  - the fp32 reference's distance scaled by the ratio of the unit
    //    roundoffs (rounding noise is first order in epsilon).
    std::vector<Trace> refs64 = {reference_trace(truth_cfg, replay)};
    for (int parts : kFp64FloorSlices)
      refs64.push_back(reference_trace(truth_cfg, plain, nullptr, kernels::cpu_ops_sliced<double>(parts)));
    TrainConfig fp32_cfg = host;
    fp32_cfg.precision = Precision::fp32;
    refs64.push_back(scaled_distance(reference_trace(fp32_cfg, plain), truth,
                                     dtype_eps(DType::f64) / dtype_eps(DType::f32)));
    std::vector<const Trace*> floors64 = {&truth};
    for (const Trace& t : refs64) floors64.push_back(&t);
    res.fp64 = check_rule(fp64_res.trace, floors64, truth, DType::f64, s.rule);
  }
  if (twin) res.bits = check_bitwise(res.trace, twin_res.trace);
  else if (res.bitwise_declared) res.bits = check_bitwise(res.trace, rep);
  return res;
}

ConformanceResult run_conformance(const StrategyRun& s) {
  WorldOptions w = s.world;
  w.size = s.spec.world();
  if (!w.ranks_per_node) w.ranks_per_node = s.spec.mesh.ranks_per_node;
  auto world = make_local_world(w);
  return run_conformance(s, *world);
}

}  // namespace pb
