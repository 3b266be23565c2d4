#include "suites/conformance/reshard.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <mutex>
#include <sstream>

#include "harness/comm/runner.h"
#include "harness/io/config.h"
#include "harness/status.h"
#include "impl/registry.h"
#include "suites/conformance/engine.h"

namespace pb {

RunSpec parse_reshard_side(const std::string& text, const std::string& field, std::vector<CkptFault>* ckpt_faults) {
  // The side's faults resolve against every axis's rows and the checkpoint's
  // (a load's fault is typed like any other, then taken off the spec: the
  // strategy does not inject it, the load does).
  static const std::vector<FaultDecl> catalogue = fault_decls({fault_catalogue(), ckpt_fault_decls()});
  const size_t comma = text.find(',');
  RunSpec s;
  s.mesh = parse_mesh(text.substr(0, comma), field);
  if (comma != std::string::npos) apply_strategy_text(s, text.substr(comma + 1), catalogue, field);
  Faults kept;
  for (const FaultDecl* d : s.faults) {
    if (d->axis != FaultAxis::checkpoint) {
      kept.push_back(d);
      continue;
    }
    require(ckpt_faults != nullptr,
            field + ": " + std::string(d->name) + " is a checkpoint fault; it applies to the side that loads (B)");
    ckpt_faults->push_back(CkptFault(d->value));
  }
  s.faults = kept;
  return s;
}

namespace {

template <class V>
std::string str(const V& v) {
  std::ostringstream o;
  o << v;
  return o.str();
}

std::string model_text(const ModelConfig& m) {
  return m.name + " (V " + std::to_string(m.V) + ", C " + std::to_string(m.C) + ", L " + std::to_string(m.L) +
         ", heads " + std::to_string(m.NH) + ", experts " + std::to_string(m.moe.experts) + ")";
}

std::string spec_toml(const RunSpec& s) {
  ConfigReader r;
  write_run_spec(s, r);
  return r.dump();
}

}  // namespace

void check_same_training(const TrainConfig& w, const TrainConfig& r, const std::string& what) {
  auto differ = [&](const std::string& field, const std::string& a, const std::string& b) {
    throw InputError(what + ": written by another " + field + " (" + a + "; this run: " + b + ")");
  };
  ModelConfig shape = w.model;  // the name is a label: a named model with its depth changed reads back "custom"
  shape.name = r.model.name;
  if (!(shape == r.model)) differ("model", model_text(w.model), model_text(r.model));
  if (w.precision != r.precision) differ("precision", precision_name(w.precision), precision_name(r.precision));
  if (w.seed != r.seed) differ("init seed", str(w.seed), str(r.seed));
  if (w.steps != r.steps) differ("run length (train.steps)", str(w.steps), str(r.steps));
  if (w.batch != r.batch) differ("global batch", str(w.batch), str(r.batch));
  if (w.seq != r.seq) differ("sequence length", str(w.seq), str(r.seq));
  if (!(w.optim == r.optim)) differ("optimizer config", "lr " + str(w.optim.lr), "lr " + str(r.optim.lr));
  if (!(w.data == r.data)) differ("data config", "seed " + str(w.data.seed), "seed " + str(r.data.seed));
}

void require_checkpoints(const RunSpec& s, const std::string& what) {
  const Strategy& st = strategy_for(s);
  require(st.name == "data_parallel" || st.name == "expert_parallel" || st.name == "tensor_parallel" ||
              st.name == "context_parallel" || st.name == "pipeline",
          what + ": " + spec_label(s) + " cannot be resharded to or from yet: checkpoints are written and read by "
                 "the data-parallel family (DDP, ZeRO-1/2/3, HSDP, hZeRO, offload), expert, tensor, context "
                 "parallel and pipelines; this mesh runs " + st.name + " (docs/checkpoint.md)");
  require(s.pipe.schedule != pipeline::ScheduleKind::pipedream_2bw,
          what + ": " + spec_label(s) + " cannot be resharded to or from: a 2bw window (the whole run, "
                 "train.steps) has no flush before its end; inside it a rank holds two weight versions and the "
                 "gradient of a group still in flight on other stages (docs/checkpoint.md#pipelines)");
}

namespace {

std::mutex g_mu;

struct Saved {
  std::vector<std::vector<CheckpointTensor>> pieces;
  int64_t step = -1, data_position = -1;
};

// Each rank's state of `rank` into dir; the counters and pieces into `saved`.
void save_rank(Rank& rank, const ParamLayout& layout, int r, const std::string& dir, Saved& saved) {
  RankCheckpointOut out(layout, r);
  rank.save_state(out);
  if (!out.shard().empty()) out.shard().write(dir);
  std::lock_guard lk(g_mu);
  saved.pieces[size_t(r)] = out.shard().pieces();
  require(saved.step < 0 || saved.step == out.step, "checkpoint: ranks disagree on the step count");
  require(saved.data_position < 0 || saved.data_position == out.data_position,
          "checkpoint: ranks disagree on the data position");
  saved.step = out.step;
  saved.data_position = out.data_position;
}

void write_index(const RunSpec& s, const Saved& saved, const std::string& dir) {
  CheckpointRun run;
  run.spec_toml = spec_toml(s);
  run.spec_hash = checkpoint_hash(run.spec_toml);
  run.spec_label = spec_label(s);
  run.model = s.train.model.name;
  run.world = s.world();
  run.step = saved.step;
  run.data_position = saved.data_position;
  run.seed = s.train.seed;
  run.data_seed = s.train.data.seed;
  write_checkpoint_index(dir, make_checkpoint_index(run, saved.pieces));
}

void validate_spec(const RunSpec& s, const std::string& what) {
  validate(s);
  strategy_for(s).validate(s);
  require_checkpoints(s, what);
}

}  // namespace

namespace {
// The run spec of an opened checkpoint. A named model whose shape was
// changed (check --reshard's pipelines: 8 blocks) reads back as "custom";
// it keeps the name it was written under (the index's `model`), so a
// checkpoint resharded from it names a model its reader knows.
RunSpec spec_of(const CheckpointReader& r, const std::string& dir) {
  ConfigReader c = ConfigReader::from_string(r.index().run.spec_toml, "checkpoint " + dir + " run spec");
  RunSpec s = read_run_spec(c, fault_catalogue());
  if (s.train.model.name == "custom") s.train.model.name = r.index().run.model;
  return s;
}
}  // namespace

RunSpec checkpoint_spec(const std::string& dir) { return spec_of(*CheckpointReader::open(dir), dir); }

void train_and_save(const RunSpec& s, int steps, const std::string& dir) {
  validate_spec(s, "checkpoint");
  require(s.train.device == Device::cpu, "checkpoint: train_and_save runs on the CPU (check --reshard opens devices)");
  const ParamLayout layout(s.train.model);
  Saved saved;
  saved.pieces.resize(size_t(s.world()));
  run_local(s.world(), [&](Communicator& c) {
    std::unique_ptr<Rank> rank = strategy_for(s).make_rank(s, c, nullptr);
    rank->train(steps, nullptr);
    save_rank(*rank, layout, c.rank(), dir, saved);
  });
  write_index(s, saved, dir);
}

namespace {

// The checkpoint at `dir`, checked to fit `to` (InputError naming what differs).
std::shared_ptr<const CheckpointReader> open_for(const std::string& dir, const RunSpec& to) {
  auto reader = CheckpointReader::open(dir);
  const CheckpointRun& run = reader->index().run;
  const RunSpec written = spec_of(*reader, dir);
  const std::string what = "checkpoint " + dir + " (written by " + run.spec_label + ")";
  check_same_training(written.train, to.train, what);
  require(run.step >= 0 && run.step < to.train.steps && run.data_position >= 0,
          what + ": step " + std::to_string(run.step) + " is not inside a run of " + std::to_string(to.train.steps) +
              " steps");
  require(run.seed == to.train.seed && run.data_seed == to.train.data.seed,
          what + ": its RNG keys (seeds) are not this run's");
  return reader;
}

}  // namespace

void reshard_checkpoint(const std::string& dir, const RunSpec& to, const std::string& out) {
  validate_spec(to, "reshard --mesh");
  require(to.train.device == Device::cpu, "reshard --mesh: rewrites a checkpoint on the CPU (train.device = cpu)");
  auto reader = open_for(dir, to);
  const ParamLayout layout(to.train.model);
  Saved saved;
  saved.pieces.resize(size_t(to.world()));
  run_local(to.world(), [&](Communicator& c) {
    std::unique_ptr<Rank> rank = strategy_for(to).make_rank(to, c, nullptr);
    rank->load_state(RankCheckpointIn(reader, layout));
    save_rank(*rank, layout, c.rank(), out, saved);
  });
  write_index(to, saved, out);
}

namespace {

// A's plan for `at` steps, then B's from the same state: the replay of a
// resharded run whose A and B are each bitwise to their own replay.
template <class T>
Trace switched_replay(const TrainConfig& ca, const SplitPlan& a, const TrainConfig& cb, const SplitPlan& b, int at) {
  Trace t;
  ReferenceTrainer<T> ta(ca, a);
  for (int s = 0; s < at; ++s) {
    const StepStats st = ta.step();
    t.loss.push_back(st.loss);
    t.grad_norm.push_back(st.grad_norm);
    if (s == 0) t.grads1 = ta.grads_f64();
  }
  ReferenceTrainer<T> tb(cb, b);
  const size_t n = size_t(ta.layout().total());
  std::copy_n(ta.params(), n, tb.mutable_params());
  AdamW<T>& oa = ta.optimizer();
  AdamW<T>& ob = tb.optimizer();
  std::copy_n(oa.m_data(), n, ob.m_data());
  std::copy_n(oa.v_data(), n, ob.v_data());
  if (oa.master_data()) std::copy_n(oa.master_data(), n, ob.master_data());
  tb.set_steps_done(ta.steps_done());
  for (int s = at; s < cb.steps; ++s) {
    const StepStats st = tb.step();
    t.loss.push_back(st.loss);
    t.grad_norm.push_back(st.grad_norm);
  }
  t.params = tb.params_f64();
  return t;
}

std::string fault_names(const std::vector<CkptFault>& fs) {
  std::string out;
  for (CkptFault f : fs) {
    if (!out.empty()) out += '+';
    out += fault_name_of(ckpt_fault_decls(), FaultAxis::checkpoint, uint8_t(f));
  }
  return out;
}

// A directory of its own under the system's temporary directory, removed when done.
struct ScratchDir {
  std::filesystem::path path;
  ScratchDir() {
    static std::atomic<int> n{0};
    path = std::filesystem::temp_directory_path() /
           ("parabench-reshard-" + std::to_string(::getpid()) + "-" + std::to_string(n++));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

}  // namespace

namespace {

// Train `at` steps at a, save, load at b (with the load's faults), finish:
// rank 0's losses and norms of every step, step 1's gradients, the final
// parameters.
Trace resharded_trace(const RunSpec& a, const RunSpec& b, int at, const std::vector<CkptFault>& faults,
                      const DeviceOpener& open_device, const std::function<void(const std::string&)>& keep = {}) {
  ScratchDir dir;
  const ParamLayout layout(a.train.model);
  const int steps = a.train.steps;
  Saved saved;
  saved.pieces.resize(size_t(a.world()));
  std::vector<StepStats> steps_a, steps_b;
  Trace t;
  run_local(a.world(), [&](Communicator& c) {
    const RankDevice device(c, a.train.device, open_device);  // outlives the rank
    std::unique_ptr<Rank> rank = strategy_for(a).make_rank(a, c, device.get());
    std::vector<double> g1;
    std::vector<StepStats> st = rank->train(at, &g1);
    save_rank(*rank, layout, c.rank(), dir.path.string(), saved);
    if (c.rank() != 0) return;
    std::lock_guard lk(g_mu);
    steps_a = std::move(st);
    t.grads1 = std::move(g1);
  });
  write_index(a, saved, dir.path.string());
  if (keep) keep(dir.path.string());
  auto reader = open_for(dir.path.string(), b);
  run_local(b.world(), [&](Communicator& c) {
    const RankDevice device(c, b.train.device, open_device);
    std::unique_ptr<Rank> rank = strategy_for(b).make_rank(b, c, device.get());
    rank->load_state(RankCheckpointIn(reader, layout, faults));
    std::vector<StepStats> st = rank->train(steps - at, nullptr);
    std::vector<double> p = rank->full_params();
    if (c.rank() != 0) return;
    std::lock_guard lk(g_mu);
    steps_b = std::move(st);
    t.params = std::move(p);
  });
  for (const auto* part : {&steps_a, &steps_b})
    for (const StepStats& s : *part) {
      t.loss.push_back(s.loss);
      t.grad_norm.push_back(s.grad_norm);
    }
  return t;
}

Trace switched(const RunSpec& a, const Replay& ra, const RunSpec& b, const Replay& rb, int at) {
  Trace replay;
  dispatch_dtype(storage_dtype(a.train.precision),
                 [&](auto t) { replay = switched_replay<decltype(t)>(a.train, ra.plan, b.train, rb.plan, at); });
  return replay;
}

RunSpec at_fp64(RunSpec s) {
  s.train.precision = Precision::fp64;
  s.train.device = Device::cpu;  // fp64 is the CPU's
  return s;
}

RunSpec on_cpu(RunSpec s) {
  s.train.device = Device::cpu;
  return s;
}

}  // namespace

ReshardResult run_reshard(const ReshardRun& r) {
  const RunSpec& a = r.from;
  const RunSpec& b = r.to;
  validate_spec(a, "--reshard A");
  validate_spec(b, "--reshard B");
  for (CkptFault f : r.faults) {
    const std::string name = fault_name_of(ckpt_fault_decls(), FaultAxis::checkpoint, uint8_t(f));
    const FaultDecl& row = parse_fault(ckpt_fault_decls(), name, "--reshard B");
    const FaultDecl* d = &row;
    require(d->applies(b), "--reshard B: " + name + " does not apply to " + spec_label(b) +
                                    " (it breaks sharded optimizer state: shard other than none)");
  }
  check_same_training(a.train, b.train, "--reshard: B");
  const int steps = a.train.steps;
  require(r.at >= 1 && r.at < steps, "--reshard-at: " + std::to_string(r.at) + " is not in [1, " +
                                         std::to_string(steps - 1) + "] (steps before the checkpoint, of " +
                                         std::to_string(steps) + ")");
  ReshardResult res;
  res.label = spec_label(a) + " -> " + spec_label(b) + " at " + std::to_string(r.at) + " of " +
              std::to_string(steps) + (r.faults.empty() ? "" : " faults=" + fault_names(r.faults));
  res.precision = a.train.precision;
  for (const RunSpec* side : {&a, &b})
    require(side->train.device == Device::cpu || r.open_device != nullptr,  // before any rank starts
            "train.device: cuda: the resharded run was given no way to open a device");
  res.trace = resharded_trace(a, b, r.at, r.faults, r.open_device, r.keep);

  // The judges, uninterrupted: the fp64 truth and the reference at the
  // precision under test; and the replay of A's order then B's.
  // The references run on the CPU; a side on a device adds the reference on
  // that device as a floor (its kernels' rounding), as the engine does.
  TrainConfig host = on_cpu(a).train;
  TrainConfig truth_cfg = host;
  truth_cfg.precision = Precision::fp64;
  const Trace truth = reference_trace(truth_cfg, Replay{});
  const Trace plain = reference_trace(host, Replay{});
  const StrategyRun sa{a, {}, r.rule, r.open_device}, sb{b, {}, r.rule, r.open_device};
  const Replay ra = replay_of(sa), rb = replay_of(sb);
  require(!ra.delayed_weights && !rb.delayed_weights, "--reshard: delayed-weight schedules do not checkpoint");
  const Trace replay = switched(on_cpu(a), ra, on_cpu(b), rb, r.at);
  std::vector<const Trace*> floors = {&plain, &replay};
  std::vector<Trace> on_device;
  on_device.reserve(2);
  for (const RunSpec* side : {&a, &b})
    if (const std::shared_ptr<TrainDevice> device = open_device(side->train.device, r.open_device))
      floors.push_back(&on_device.emplace_back(reference_trace(side->train, Replay{}, device.get())));
  const DType dt = storage_dtype(a.train.precision);
  res.rule = check_rule(res.trace, floors, truth, dt, r.rule);
  res.bitwise_declared = declares_bitwise(sa) && declares_bitwise(sb);
  if (res.bitwise_declared) res.bits = check_bitwise(res.trace, replay);
  if (!res.bitwise_declared && a.train.precision != Precision::fp64) {
    // Not bitwise and below fp64: the resharded run again at fp64, held to
    // the engine's fp64 floor (docs/numerics.md#the-fp64-rerun): the
    // switched replay, the reference in other orders of its inner sums, the
    // fp32 reference's distance scaled to fp64.
    const Trace again = resharded_trace(at_fp64(a), at_fp64(b), r.at, r.faults, r.open_device);
    std::vector<Trace> refs64 = {switched(at_fp64(a), ra, at_fp64(b), rb, r.at)};
    for (int parts : kFp64FloorSlices)
      refs64.push_back(reference_trace(truth_cfg, Replay{}, nullptr, kernels::cpu_ops_sliced<double>(parts)));
    TrainConfig fp32_cfg = host;
    fp32_cfg.precision = Precision::fp32;
    refs64.push_back(scaled_distance(reference_trace(fp32_cfg, Replay{}), truth,
                                     dtype_eps(DType::f64) / dtype_eps(DType::f32)));
    std::vector<const Trace*> floors64 = {&truth};
    for (const Trace& t : refs64) floors64.push_back(&t);
    res.fp64 = check_rule(again, floors64, truth, DType::f64, r.rule);
  }
  require(!res.rule.empty(), "--reshard: nothing was compared");
  return res;
}

}  // namespace pb
