// The scaling sweep: config, points, one training run per point, its row.
// Figures (definitions in results/SCHEMA.md): step time = median over the
// measured steps of the job's pace (the time from the last rank finishing the
// step before to the last rank finishing this one); memory peaks restart after
// warm-up (they cover the measured steps only); MFU = model FLOPs per step
// (model_flops_per_step, PaLM/llm.c accounting) / step time / (world x
// per-rank peak); communication per step = logged bytes after warm-up / steps.
#include "suites/sweep/sweep.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <ostream>
#include <map>
#include <set>
#include <memory>
#include <stdexcept>
#include <thread>

#include "harness/io/csv.h"
#include "harness/io/csv_schema.h"
#include "harness/comm/runner.h"
#include "harness/status.h"
#include "harness/mesh.h"
#include "impl/registry.h"
#include "impl/spec/run_spec.h"
#include "kernels/cpu/peak.h"
#include "reference/model_config.h"
#include "suites/planner/machine.h"
#include "suites/planner/preflight.h"
#include "suites/sweep/sweep_plan.h"

namespace pb::sweep {
namespace {

std::vector<std::string> read_scaling(ConfigReader& r) {
  std::vector<std::string> v;
  try {
    v = r.get<std::vector<std::string>>("sweep.scaling", {"weak"});
  } catch (const InputError&) {
    v = {r.get<std::string>("sweep.scaling", "weak")};
  }
  require(!v.empty(), "sweep.scaling: must not be empty");
  for (const auto& s : v)
    require(s == "weak" || s == "strong", "sweep.scaling: must be weak or strong, got '" + s + "'");
  return v;
}

template <class T>
void non_empty(const std::vector<T>& v, const char* key) {
  require(!v.empty(), std::string(key) + ": must not be empty");
}

// Per-rank figures of one point, combined over ranks afterwards.
struct RankOut {
  // Per measured step: `ends` the seconds from the common start (a barrier
  // after warm-up) to the end of this rank's step; wall and busy its RankTimes.
  std::vector<double> ends, wall, busy;
  int64_t mem[6] = {}, mem_total = 0, mem_host_total = 0;
  int64_t dp_bytes = 0, pp_bytes = 0, inter_bytes = 0, tp_bytes = 0, cp_bytes = 0, ep_bytes = 0;
  MoeLoad moe;  // over the measured steps
  double blocked_s = 0;
  std::string device = "cpu";  // what this rank trained on (its device's name)
};

// The measured steps: c.steps, or under c.min_seconds as many as the slowest
// rank's last warm-up step says fill it (every rank takes the same max).
int measured_steps(const SweepConfig& c, Communicator& world, double last_warmup_s) {
  if (c.min_seconds <= 0) return c.steps;
  world.all_reduce(&last_warmup_s, &last_warmup_s, 1, DType::f64, ReduceOp::max);
  const double want = std::ceil(c.min_seconds / std::max(last_warmup_s, 1e-9));
  return int(std::clamp(want, double(c.steps), double(c.steps) * SweepConfig::kMaxStepsFactor));
}

void run_rank(const RunSpec& spec, const SweepConfig& sc, Communicator& world, RankOut& out,
              const DeviceOpener& open_device) {
  const RankDevice device(world, spec.train.device, open_device);  // outlives the rank
  std::unique_ptr<Rank> rank = strategy_for(spec).make_rank(spec, world, device.get());
  if (device.get()) out.device = device.get()->name;
  double last = 0;
  for (int i = 0; i < sc.warmup; ++i) last = rank->step().seconds;
  const int steps = measured_steps(sc, world, last);
  world.log().reset();
  rank->reset_memory_peaks();
  rank->reset_moe_load();
  // Each rank's clock from the same moment (the barrier's end, up to its
  // wake-up jitter), so clocks of different hosts need not agree.
  world.barrier();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) {
    rank->step();
    out.ends.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    const RankTimes t = rank->times();
    out.wall.push_back(t.wall_s);
    out.busy.push_back(t.busy_s);
  }
  const int n = int(out.ends.size());
  out.moe = rank->moe_load();
  for (int t = 0; t < 6; ++t) out.mem[t] = int64_t(rank->memory().peak(MemTag(t), Place::device));
  out.mem_total = int64_t(rank->memory().peak_total(Place::device));
  out.mem_host_total = int64_t(rank->memory().peak_total(Place::host));
  const CommLog& log = world.log();
  for (const auto& g : log.groups()) {
    if (g == "check") continue;
    CommCounters c = log.by_group(g);
    if (g.rfind("dp", 0) == 0 || g.rfind("edp", 0) == 0) out.dp_bytes += int64_t(c.bytes);  // experts' too
    if (g == "ep") out.ep_bytes += int64_t(c.bytes);
    if (g == "tp") out.tp_bytes += int64_t(c.bytes);
    if (g == "cp") out.cp_bytes += int64_t(c.bytes - log.get(g, CommOp::recv).bytes);  // sends, as the pp bytes
    out.inter_bytes += int64_t(c.inter_node_bytes);
    out.blocked_s += c.blocked_s;
  }
  out.pp_bytes = int64_t(log.get("pp", CommOp::send).bytes + log.get("pp_tied", CommOp::all_reduce).bytes);
  out.dp_bytes /= n;
  out.tp_bytes /= n;
  out.cp_bytes /= n;
  out.ep_bytes /= n;
  out.pp_bytes /= n;
  out.inter_bytes /= n;
  out.blocked_s /= n;
}

}  // namespace

std::vector<double> step_times(const std::vector<double>& last_ends) {
  std::vector<double> t;
  t.reserve(last_ends.size());
  double prev = 0;
  for (double e : last_ends) {
    require(std::isfinite(e) && e >= prev, "step_times: step end times must be finite and non-decreasing");
    t.push_back(e - prev);
    prev = e;
  }
  return t;
}

namespace {

// The point's figures over all ranks, on rank 0 of `comm`: each step's time
// as the job's pace (the last rank's end of each, for step_times), the max of
// every other figure, and the pipeline bubble per step from every rank's wall
// and busy time. Two all-reduces (max, sum)
// over the world, so it works alike for threads and for processes (doubles:
// byte counts stay exact below 2^53).
RankOut combine_over_ranks(Communicator& comm, const RankOut& mine, std::vector<double>* bubble) {
  std::vector<double> v(mine.ends);
  v.insert(v.end(), mine.wall.begin(), mine.wall.end());
  for (int64_t m : mine.mem) v.push_back(double(m));
  for (int64_t x : {mine.mem_total, mine.mem_host_total, mine.dp_bytes, mine.pp_bytes, mine.inter_bytes, mine.tp_bytes,
                    mine.cp_bytes, mine.ep_bytes, mine.moe.max_expert_rows})
    v.push_back(double(x));
  v.push_back(mine.blocked_s);
  comm.all_reduce(v.data(), v.data(), v.size(), DType::f64, ReduceOp::max);
  std::vector<double> busy(mine.busy);  // and the routing counts, summed over ranks
  const MoeLoad& l = mine.moe;
  for (int64_t x : {l.calls, l.choices, l.dropped, l.sent_rows, l.owner_rows, l.expert_calls}) busy.push_back(double(x));
  comm.all_reduce(busy.data(), busy.data(), busy.size(), DType::f64, ReduceOp::sum);
  RankOut out;
  out.device = mine.device;  // rank 0's, where rank 0 keeps the result
  const size_t n = mine.ends.size();
  out.ends.assign(v.begin(), v.begin() + std::ptrdiff_t(n));
  const double* T = v.data() + n;  // max wall per step
  bubble->clear();
  for (size_t i = 0; i < n; ++i)
    if (T[i] > 0) bubble->push_back(1.0 - busy[i] / (double(comm.size()) * T[i]));
  const double* rest = v.data() + 2 * n;
  for (size_t t = 0; t < 6; ++t) out.mem[t] = int64_t(rest[t]);
  out.mem_total = int64_t(rest[6]);
  out.mem_host_total = int64_t(rest[7]);
  out.dp_bytes = int64_t(rest[8]);
  out.pp_bytes = int64_t(rest[9]);
  out.inter_bytes = int64_t(rest[10]);
  out.tp_bytes = int64_t(rest[11]);
  out.cp_bytes = int64_t(rest[12]);
  out.ep_bytes = int64_t(rest[13]);
  out.moe.max_expert_rows = int64_t(rest[14]);
  out.blocked_s = rest[15];
  const double* counts = busy.data() + n;
  for (int64_t* x : {&out.moe.calls, &out.moe.choices, &out.moe.dropped, &out.moe.sent_rows, &out.moe.owner_rows,
                     &out.moe.expert_calls})
    *x = int64_t(*counts++);
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

namespace {
// The canonical text of a strategy / mesh entry (InputError naming the key).
std::string canonical_strategy(const std::string& text) {
  RunSpec s;
  apply_strategy_text(s, text, "sweep.strategies");
  return strategy_text(s);
}

// A sweep.points entry, "<mesh> <strategy> [model]", in its parts (model:
// empty when the point runs on every sweep.models entry).
struct PointText {
  std::string mesh, strategy, model;
};
PointText split_point(const std::string& p) {
  const size_t sp = p.find(' ');
  require(sp != std::string::npos && sp > 0 && sp + 1 < p.size(),
          "sweep.points: '" + p + "' is not \"<mesh> <strategy> [model]\" (e.g. \"tp2 shard=none,sp=on\")");
  const size_t sp2 = p.find(' ', sp + 1);
  PointText t{p.substr(0, sp), p.substr(sp + 1, sp2 == std::string::npos ? std::string::npos : sp2 - sp - 1), ""};
  if (sp2 != std::string::npos) {
    t.model = p.substr(sp2 + 1);
    require(!t.model.empty() && t.model.find(' ') == std::string::npos,
            "sweep.points: '" + p + "' is not \"<mesh> <strategy> [model]\"");
  }
  return t;
}
}  // namespace

SweepConfig read_sweep_config(ConfigReader& r) {
  SweepConfig c;
  c.strategies = r.get<std::vector<std::string>>("sweep.strategies", c.strategies);
  c.worlds = r.get<std::vector<int64_t>>("sweep.worlds", c.worlds, Bounds::positive());
  c.meshes = r.get<std::vector<std::string>>("sweep.meshes", {});
  c.models = r.get<std::vector<std::string>>("sweep.models", c.models);
  c.precisions = r.get<std::vector<std::string>>("sweep.precisions", c.precisions);
  c.microbatches = r.get<std::vector<int64_t>>("sweep.microbatches", c.microbatches, Bounds::positive());
  c.scaling = read_scaling(r);
  c.batch_per_rank = r.get<int>("sweep.batch_per_rank", c.batch_per_rank, Bounds::positive());
  // Strong scaling's default batch: batch_per_rank x the largest dp.
  int64_t max_dp = c.worlds.empty() ? 1 : *std::max_element(c.worlds.begin(), c.worlds.end());
  if (!c.meshes.empty()) max_dp = 1;
  for (auto& m : c.meshes) {
    const MeshShape ms = parse_mesh(m, "sweep.meshes");
    m = mesh_text(ms);  // canonical: the row's spelling and the resume key
    max_dp = std::max<int64_t>(max_dp, ms.dp);
  }
  c.points = r.get<std::vector<std::string>>("sweep.points", {});
  for (auto& p : c.points) {
    const PointText t = split_point(p);
    const MeshShape ms = parse_mesh(t.mesh, "sweep.points");
    max_dp = std::max<int64_t>(max_dp, ms.dp);
    if (!t.model.empty()) named_model(t.model);  // InputError naming the model when unknown
    p = mesh_text(ms) + " " + canonical_strategy(t.strategy) + (t.model.empty() ? "" : " " + t.model);
  }
  c.global_batch = r.get<int>("sweep.global_batch", int(c.batch_per_rank * max_dp), Bounds::positive());
  c.seq = r.get<int>("sweep.seq", c.seq, Bounds::positive());
  c.steps = r.get<int>("sweep.steps", c.steps, Bounds::positive());
  c.warmup = r.get<int>("sweep.warmup", c.warmup, Bounds::non_negative());
  c.min_seconds = r.get<double>("sweep.min_seconds", 0.0, Bounds::non_negative());
  require(c.min_seconds <= 3600, "sweep.min_seconds: at most 3600 seconds per point (got " +
                                     std::to_string(c.min_seconds) + ")");
  require(c.min_seconds == 0 || c.warmup >= 1,
          "sweep.min_seconds: needs sweep.warmup >= 1 (the last warm-up step sets the number of measured steps)");
  require(c.min_seconds == 0 || c.steps <= INT32_MAX / SweepConfig::kMaxStepsFactor - c.warmup,
          "sweep.steps: too many with sweep.min_seconds (at most " +
              std::to_string(INT32_MAX / SweepConfig::kMaxStepsFactor - c.warmup) + ")");
  c.rounds = r.get<int>("sweep.rounds", c.rounds, Bounds::positive());
  require(c.rounds <= SweepConfig::kMaxRounds, "sweep.rounds: at most " + std::to_string(SweepConfig::kMaxRounds) +
                                                   " windows per point (got " + std::to_string(c.rounds) + ")");
  c.ranks_per_node = r.get<int>("sweep.ranks_per_node", c.ranks_per_node, Bounds::non_negative());
  c.peak_gflops = r.get<double>("sweep.peak_gflops", 0.0, Bounds::non_negative());
  c.extrapolate = r.get<std::vector<int64_t>>("sweep.extrapolate", {}, Bounds::positive());
  c.machine = r.get<std::string>("sweep.machine", "");
  c.device = parse_device(r.get_enum("sweep.device", "cpu", {"cpu", "cuda"}));
  r.check_no_unknown_keys();
  require(c.device == Device::cpu || c.extrapolate.empty(),
          "sweep.extrapolate: plan rows come from a sweep on the CPU's local backend; on sweep.device = cuda give "
          "`parabench plan --machine` the GPU's profile instead");
  for (int64_t w : c.extrapolate)
    require(w <= (int64_t(1) << 24), "sweep.extrapolate: " + std::to_string(w) + " ranks is beyond 2^24");
  require(c.machine.empty() || !c.extrapolate.empty(), "sweep.machine: only used with sweep.extrapolate");
  if (!c.machine.empty()) {  // an unknown name or a bad file: named as this config key
    try {
      planner::load_machine(c.machine);
    } catch (const InputError& e) {
      std::string msg = e.what();
      if (msg.rfind("--machine: ", 0) == 0) msg = msg.substr(11);
      throw InputError("sweep.machine: " + msg);
    }
  }
  non_empty(c.strategies, "sweep.strategies");
  non_empty(c.worlds, "sweep.worlds");
  non_empty(c.models, "sweep.models");
  non_empty(c.precisions, "sweep.precisions");
  non_empty(c.microbatches, "sweep.microbatches");
  for (auto& s : c.strategies) s = canonical_strategy(s);
  for (const auto& m : c.models) named_model(m);
  for (const auto& p : c.precisions) parse_precision(p);
  return c;
}

std::string SweepPoint::key() const {
  return strategy + "|" + mesh + "|" + model + "|" + precision + "|" + std::to_string(microbatches) + "|" + scaling;
}

std::string SweepPoint::label() const {
  return mesh + " " + strategy + " " + model + " " + precision + " mb" + std::to_string(microbatches) + " " + scaling;
}

std::vector<SweepPoint> expand(const SweepConfig& c) {
  std::vector<SweepPoint> v;
  for (const auto& sc : c.scaling)
    for (const auto& m : c.models)
      for (const auto& p : c.precisions)
        for (int64_t mb : c.microbatches)
          for (const auto& s : c.strategies) {
            std::vector<std::string> meshes = c.meshes;
            if (meshes.empty())
              for (int64_t w : c.worlds) meshes.push_back("dp" + std::to_string(w));
            for (const auto& mesh : meshes) {
              const MeshShape ms = parse_mesh(mesh, "sweep.meshes");
              v.push_back({s, mesh, m, p, sc, world_size(ms), ms.dp, int(mb)});
            }
          }
  for (const auto& sc : c.scaling)
    for (const auto& m : c.models)
      for (const auto& p : c.precisions)
        for (int64_t mb : c.microbatches)
          for (const auto& pt : c.points) {
            const PointText t = split_point(pt);
            if (!t.model.empty() && m != c.models.front()) continue;  // a point naming its model runs once
            const MeshShape ms = parse_mesh(t.mesh, "sweep.points");
            v.push_back({t.strategy, t.mesh, t.model.empty() ? m : t.model, p, sc, world_size(ms), ms.dp, int(mb)});
          }
  return v;
}

int64_t point_global_batch(const SweepConfig& c, const SweepPoint& p) {
  return p.scaling == "weak" ? int64_t(c.batch_per_rank) * p.dp : int64_t(c.global_batch);
}

RunSpec point_spec(const SweepConfig& c, const SweepPoint& p) {
  const int64_t global_batch = point_global_batch(c, p);
  const char* bkey = p.scaling == "weak" ? "sweep.batch_per_rank" : "sweep.global_batch";
  require(global_batch <= (int64_t(1) << 30),
          std::string(bkey) + ": the global batch " + std::to_string(global_batch) + " is more than 2^30 sequences");
  RunSpec spec;
  TrainConfig& cfg = spec.train;
  cfg.model = named_model(p.model);
  cfg.precision = parse_precision(p.precision);
  cfg.seq = c.seq;
  cfg.batch = int(global_batch);
  cfg.microbatches = p.microbatches;
  // The most steps the point may run (sweep.min_seconds raises the measured ones).
  cfg.steps = c.warmup + (c.min_seconds > 0 ? c.steps * SweepConfig::kMaxStepsFactor : c.steps);
  cfg.threads = 1;
  cfg.device = c.device;
  cfg.validate();
  spec.mesh = parse_mesh(p.mesh, "sweep.meshes");
  if (!spec.mesh.ranks_per_node) spec.mesh.ranks_per_node = c.ranks_per_node;
  apply_strategy_text(spec, p.strategy, "sweep.strategies");
  require(cfg.batch % (p.dp * p.microbatches) == 0,
          std::string(bkey) + ": global batch " + std::to_string(cfg.batch) + " must be divisible by dp x microbatches (" +
              std::to_string(p.dp) + " x " + std::to_string(p.microbatches) + ")");
  validate(spec);
  const Strategy& strat = strategy_for(spec);
  strat.validate(spec);  // bad input is found here, alike on every rank, before any communication
  require(spec.pipe.schedule != pipeline::ScheduleKind::pipedream_2bw,
          "sweep.strategies: 2bw trains its whole window at once; the sweep times optimizer steps one by one");
  return spec;
}

PointResult run_point(const SweepConfig& c, const SweepPoint& p, double peak_flops_per_rank, World* world,
                      const DeviceOpener& open_device) {
  PointResult res;
  bool started = false;  // ranks are running: under MPI no error can be a row any more
  res.device = std::string(device_name(c.device));  // until rank 0's device says its name
  res.seq = c.seq;
  res.global_batch = point_global_batch(c, p);
  try {
    const RunSpec spec = point_spec(c, p);
    const TrainConfig& cfg = spec.train;
    WorldOptions wo;
    wo.size = p.world;
    wo.ranks_per_node = spec.mesh.ranks_per_node;
    validate(wo);
    const bool pipelined = spec.mesh.pp > 1 || spec.pipe.schedule.has_value();
    require(c.device == Device::cpu || (world && open_device),
            "sweep.device: cuda runs a point's ranks one per GPU over nccl (parabench sweep, under mpirun for "
            "several), not as threads");

    RankOut all;  // written by rank 0 of the point's world only
    std::vector<double> bubble;
    auto body = [&](Communicator& comm) {
      RankOut mine;
      run_rank(spec, c, comm, mine, open_device);
      std::vector<double> b;
      RankOut m = combine_over_ranks(comm, mine, &b);
      if (comm.rank() == 0) {
        all = std::move(m);
        bubble = std::move(b);
      }
    };
    if (world) {
      require(world->size() == p.world, "sweep: the point's world (" + std::to_string(p.world) +
                                            ") is not mpirun's (" + std::to_string(world->size()) + ")");
      started = true;
      run_ranks(*world, body);
    } else {
      run_ranks(*make_local_world(wo), body);
    }
    if (world && !hosts_rank(*world, 0)) return res;  // rank 0 reports
    const std::vector<double> paced = step_times(all.ends);
    res.device = all.device;
    for (int t = 0; t < 6; ++t) res.mem[t] = all.mem[t];
    res.mem_total = all.mem_total;
    res.mem_host_total = all.mem_host_total;
    res.comm_dp_bytes = all.dp_bytes;
    res.comm_tp_bytes = all.tp_bytes;
    res.comm_cp_bytes = all.cp_bytes;
    res.comm_pp_bytes = all.pp_bytes;
    res.comm_ep_bytes = all.ep_bytes;
    res.moe_dropped = all.moe.dropped_fraction();
    res.moe_load_max_mean = all.moe.max_over_mean();
    res.comm_inter_node_bytes = all.inter_bytes;
    res.exposed_comm_s = all.blocked_s;
    if (pipelined && !bubble.empty()) {
      double sum = 0;
      for (double x : bubble) sum += x;
      res.bubble = sum / double(bubble.size());
    }
    res.step_time_s = median(paced);
    if (!(res.step_time_s > 0)) throw std::runtime_error("measured step time is not positive");
    res.step_time_min_s = *std::min_element(paced.begin(), paced.end());
    res.step_time_max_s = *std::max_element(paced.begin(), paced.end());
    double mean = 0, var = 0;
    for (double x : paced) mean += x / double(paced.size());
    for (double x : paced) var += (x - mean) * (x - mean);
    res.step_time_cv = paced.size() > 1 ? std::sqrt(var / double(paced.size() - 1)) / mean : 0;
    res.step_time_mean_s = mean;
    res.measured_steps = int(paced.size());
    res.oversubscribed = p.world > int(std::max(1u, std::thread::hardware_concurrency()));
    res.tokens_per_s = double(cfg.tokens_per_step()) / res.step_time_s;
    res.model_flops_per_s = model_flops_per_step(cfg.model, cfg.batch, cfg.seq) / res.step_time_s;
    res.peak_flops = peak_flops_per_rank * p.world;
    res.mfu = res.peak_flops > 0 ? res.model_flops_per_s / res.peak_flops : 0;
  } catch (const InputError& e) {
    if (world && started) throw;  // from inside the ranks: see below
    res.status = "rejected";
    res.reason = e.what();
  } catch (const std::exception& e) {
    if (world) throw;  // a rank error leaves MPI's communicators unusable
    res.status = "failed";
    res.reason = e.what();
  }
  return res;
}

SweepConfig round_config(const SweepConfig& c) {
  SweepConfig one = c;
  one.steps = (c.steps + c.rounds - 1) / c.rounds;
  one.min_seconds = c.min_seconds / c.rounds;
  one.rounds = 1;
  return one;
}

size_t round_offset(int round, int rounds, size_t points) {
  if (round >= rounds - 1 || points == 0) return 0;
  return size_t(round + 1) * points / size_t(rounds) % points;
}

PointResult combine_rounds(const std::vector<PointResult>& rounds) {
  require(!rounds.empty(), "combine_rounds: no rounds");
  PointResult out = rounds.back();
  if (rounds.size() == 1) return out;
  std::vector<double> medians;
  double n = 0, sum = 0, bubble = 0, exposed = 0;
  for (const PointResult& r : rounds) {
    require(r.status == "ok" && r.measured_steps > 0 && r.step_time_s > 0,
            "combine_rounds: every round must be ok with measured steps");
    medians.push_back(r.step_time_s);
    out.step_time_min_s = std::min(out.step_time_min_s, r.step_time_min_s);
    out.step_time_max_s = std::max(out.step_time_max_s, r.step_time_max_s);
    n += r.measured_steps;
    sum += r.measured_steps * r.step_time_mean_s;
    bubble += r.measured_steps * r.bubble;
    exposed += r.measured_steps * r.exposed_comm_s;
  }
  const double mean = sum / n;
  double ss = 0;  // the pooled sum of squares: each round's own, plus its mean's offset
  for (const PointResult& r : rounds) {
    const double sd = r.step_time_cv * r.step_time_mean_s;
    ss += (r.measured_steps - 1) * sd * sd + r.measured_steps * (r.step_time_mean_s - mean) * (r.step_time_mean_s - mean);
  }
  const double t = median(medians);
  const double speed = rounds.back().step_time_s / t;  // the rates scale with 1 / step time
  out.step_time_s = t;
  out.tokens_per_s *= speed;
  out.model_flops_per_s *= speed;
  out.mfu *= speed;
  out.step_time_mean_s = mean;
  out.step_time_cv = n > 1 ? std::sqrt(ss / (n - 1)) / mean : 0;
  out.measured_steps = int(n);
  out.bubble = bubble / n;
  out.exposed_comm_s = exposed / n;
  return out;
}

CsvRecord to_record(const SweepPoint& p, const PointResult& r) {
  CsvRecord rec;
  rec.set("strategy", p.strategy).set("model", p.model).set("precision", p.precision).set("device", r.device);
  rec.set("microbatches", p.microbatches).set("global_batch", r.global_batch).set("seq_len", r.seq);
  rec.set("scaling", p.scaling);
  if (r.status != "ok") return rec;
  rec.set("step_time_s", r.step_time_s).set("tokens_per_s", r.tokens_per_s);
  rec.set("step_time_min_s", r.step_time_min_s).set("step_time_max_s", r.step_time_max_s);
  rec.set("step_time_cv", r.step_time_cv).set("measured_steps", int64_t(r.measured_steps));
  rec.set("oversubscribed", r.oversubscribed);
  rec.set("model_flops_per_s", r.model_flops_per_s).set("peak_flops", r.peak_flops);
  if (r.peak_flops > 0) rec.set("mfu", r.mfu);
  static constexpr const char* kMemCols[6] = {"mem_params", "mem_grads", "mem_optimizer",
                                              "mem_activations", "mem_comm", "mem_workspace"};
  for (int t = 0; t < 6; ++t) rec.set(kMemCols[t], r.mem[t]);
  rec.set("mem_total", r.mem_total).set("mem_host_total", r.mem_host_total);
  rec.set("comm_dp_bytes", r.comm_dp_bytes).set("comm_tp_bytes", r.comm_tp_bytes);
  rec.set("comm_cp_bytes", r.comm_cp_bytes).set("comm_pp_bytes", r.comm_pp_bytes).set("comm_ep_bytes", r.comm_ep_bytes);
  rec.set("comm_inter_node_bytes", r.comm_inter_node_bytes);
  rec.set("exposed_comm_s", r.exposed_comm_s).set("bubble", r.bubble);
  rec.set("moe_dropped", r.moe_dropped).set("moe_load_max_mean", r.moe_load_max_mean);
  return rec;
}

std::string point_config_hash(const SweepConfig& c, const SweepPoint& p) {
  ConfigReader h;  // every setting that changes the point's figures, hashed
  h.set("strategy", p.strategy);
  h.set("mesh", p.mesh);
  h.set("model", p.model);
  h.set("precision", p.precision);
  h.set("world", int64_t(p.world));
  h.set("microbatches", int64_t(p.microbatches));
  h.set("scaling", p.scaling);
  h.set("global_batch", point_global_batch(c, p));
  h.set("seq", int64_t(c.seq));
  h.set("steps", int64_t(c.steps));
  h.set("warmup", int64_t(c.warmup));
  if (c.min_seconds > 0) h.set("min_seconds", c.min_seconds);  // absent: the hash of earlier runs
  if (c.rounds > 1) h.set("rounds", int64_t(c.rounds));           // likewise
  if (c.device != Device::cpu) h.set("device", device_name(c.device));
  h.set("ranks_per_node", int64_t(c.ranks_per_node));
  h.set("peak_gflops", c.peak_gflops);
  return h.config_hash();
}

RunMeta point_meta(const SweepConfig& c, const SweepPoint& p, const PointResult& r, const RunMeta& base) {
  RunMeta m = base;
  m.timestamp = iso8601_utc(std::chrono::system_clock::now());
  m.world = p.world;
  m.mesh = p.mesh;
  m.status = r.status;
  m.reason = r.reason;
  m.config_hash = point_config_hash(c, p);
  return m;
}

namespace {

// A sweep CSV row's point key, as SweepPoint::key() spells it (an empty
// microbatches cell is 1).
struct RowKey {
  size_t strategy, mesh, model, precision, microbatches, scaling;
  explicit RowKey(const CsvTable& t)
      : strategy(t.column("strategy")), mesh(t.column("mesh")), model(t.column("model")),
        precision(t.column("precision")), microbatches(t.column("microbatches")), scaling(t.column("scaling")) {}
  std::string operator()(const std::vector<std::string>& row) const {
    return row[strategy] + "|" + row[mesh] + "|" + row[model] + "|" + row[precision] + "|" +
           (row[microbatches].empty() ? "1" : row[microbatches]) + "|" + row[scaling];
  }
};

}  // namespace

std::set<std::string> done_keys(const std::string& csv_path, const SweepConfig& c) {
  // The file is a results CSV first: anything the schema refuses is refused
  // here too (a torn last row is the one thing a killed sweep leaves, and is
  // dropped below).
  const std::vector<std::string> problems = validate_csv_against_schema(csv_path, ResultsSchema::builtin());
  for (const std::string& e : problems)
    require(e.find("torn") != std::string::npos || e.find("no terminating newline") != std::string::npos,
            "--resume: " + e + (problems.size() > 1 ? " (and " + std::to_string(problems.size() - 1) + " more)" : ""));
  CsvTable t = read_csv(csv_path, {/*drop_partial_tail=*/true});
  std::map<std::string, std::string> hash_of;  // key -> the hash this config gives the point
  for (const SweepPoint& p : expand(c)) hash_of[p.key()] = point_config_hash(c, p);
  std::set<std::string> keys;
  try {
    const size_t ck = t.column("kind"), cs = t.column("strategy"), cm = t.column("model"),
                 cp = t.column("precision"), cw = t.column("mesh"), ch = t.column("config_hash");
    const RowKey key_of(t);
    for (size_t i = 0; i < t.rows.size(); ++i) {
      const auto& row = t.rows[i];
      const std::string where = csv_path + ":" + std::to_string(t.row_lines[i]);
      require(row[ck] == "sweep", where + ": not a sweep CSV (kind '" + row[ck] + "')");
      const std::string key = key_of(row);
      // A point this config also runs counts as done only if it was run
      // with the same settings (steps, warm-up, batch, seq, ...).
      const auto it = hash_of.find(key);
      require(it == hash_of.end() || it->second == row[ch],
              where + ": --resume: this point (" + row[cw] + " " + row[cs] + " " + row[cm] + " " + row[cp] +
                  ") was run with other settings than the config gives it now (config_hash " + row[ch] + ", now " +
                  (it == hash_of.end() ? "" : it->second) +
                  "; steps, warmup, batch, seq, ranks_per_node or peak_gflops differ): resume with the config "
                  "the sweep started with, or start a new run");
      keys.insert(key);
    }
  } catch (const std::out_of_range& e) {
    throw InputError(csv_path + ": not a sweep CSV: " + e.what());
  }
  return keys;
}

namespace {

// The rounds file's columns (SweepRun::rounds_csv_path): a point's key and
// config_hash, the round (0-based), and the figures combine_rounds pools.
const std::vector<std::string>& round_columns() {
  static const std::vector<std::string> cols = {
      "key", "config_hash", "round", "step_time_s", "step_time_min_s", "step_time_max_s", "step_time_mean_s",
      "step_time_cv", "measured_steps", "bubble", "exposed_comm_s"};
  return cols;
}

std::vector<std::string> round_row(const SweepConfig& c, const SweepPoint& p, int round, const PointResult& r) {
  return {p.key(), point_config_hash(c, p), std::to_string(round), csv_number(r.step_time_s),
          csv_number(r.step_time_min_s), csv_number(r.step_time_max_s), csv_number(r.step_time_mean_s),
          csv_number(r.step_time_cv), std::to_string(r.measured_steps), csv_number(r.bubble),
          csv_number(r.exposed_comm_s)};
}

// A finite number >= 0 in cell `col` of a rounds-file row (InputError naming where).
double round_cell(const std::vector<std::string>& row, size_t col, const std::string& where) {
  const std::string& text = row[col];
  double v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  require(ec == std::errc() && end == text.data() + text.size() && std::isfinite(v) && v >= 0,
          where + ": " + round_columns()[col] + " '" + text + "' is not a finite number >= 0");
  return v;
}

}  // namespace

std::map<std::string, std::vector<PointResult>> done_rounds(const std::string& rounds_path, const SweepConfig& c) {
  std::map<std::string, std::vector<PointResult>> out;
  if (!std::filesystem::exists(rounds_path)) return out;
  const CsvTable t = read_csv(rounds_path, {/*drop_partial_tail=*/true});
  require(t.header == round_columns(), rounds_path + ": not a sweep rounds file (its header is not " +
                                           csv_format_row(round_columns()).substr(0, 200) + ")");
  std::map<std::string, std::string> hash_of;
  for (const SweepPoint& p : expand(c)) hash_of[p.key()] = point_config_hash(c, p);
  for (size_t i = 0; i < t.rows.size(); ++i) {
    const auto& row = t.rows[i];
    const std::string where = rounds_path + ":" + std::to_string(t.row_lines[i]);
    const auto it = hash_of.find(row[0]);
    if (it == hash_of.end()) continue;  // a point this config does not run
    require(it->second == row[1], where + ": --resume: point " + row[0] +
                                      " was run with other settings than the config gives it now (config_hash " +
                                      row[1] + ", now " + it->second + "): resume with the config the sweep "
                                      "started with, or start a new run");
    const double round = round_cell(row, 2, where), steps = round_cell(row, 8, where);
    require(round < SweepConfig::kMaxRounds && round == std::floor(round), where + ": round '" + row[2] +
                                                                               "' is not a round number below " +
                                                                               std::to_string(SweepConfig::kMaxRounds));
    require(steps >= 1 && steps <= INT32_MAX && steps == std::floor(steps),
            where + ": measured_steps '" + row[8] + "' is not a positive whole number");
    PointResult r;
    r.step_time_s = round_cell(row, 3, where);
    r.step_time_min_s = round_cell(row, 4, where);
    r.step_time_max_s = round_cell(row, 5, where);
    r.step_time_mean_s = round_cell(row, 6, where);
    r.step_time_cv = round_cell(row, 7, where);
    r.measured_steps = int(steps);
    r.bubble = round_cell(row, 9, where);
    r.exposed_comm_s = round_cell(row, 10, where);
    require(r.step_time_s > 0 && r.step_time_mean_s > 0 && r.step_time_min_s <= r.step_time_s &&
                r.step_time_s <= r.step_time_max_s,
            where + ": the step times are not positive with min <= median <= max");
    std::vector<PointResult>& rounds = out[row[0]];
    if (size_t(round) == rounds.size()) rounds.push_back(r);  // after a gap or a repeat: not the next round
  }
  return out;
}

namespace {

// A resumed sweep replaces the extrapolated plan rows an earlier run of it
// wrote (they came from the largest points measured then): the rows whose
// reason starts with "extrapolated" leave plan.csv (rewritten through a
// temporary file; rows are single lines, csv_escape folds line breaks), and
// so does a torn last row.
void drop_extrapolated_rows(const std::string& plan_path) {
  if (!std::filesystem::exists(plan_path)) return;
  const CsvTable t = read_csv(plan_path, {/*drop_partial_tail=*/true});
  const size_t cr = t.column("reason");
  std::set<size_t> drop;
  for (size_t i = 0; i < t.rows.size(); ++i)
    if (t.rows[i][cr].rfind("extrapolated", 0) == 0) drop.insert(t.row_lines[i]);
  if (drop.empty() && !t.dropped_partial_tail) return;
  std::ifstream in(plan_path, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string kept;
  size_t line = 1, at = 0;
  for (size_t nl; (nl = text.find('\n', at)) != std::string::npos; at = nl + 1, ++line)
    if (!drop.count(line)) kept.append(text, at, nl + 1 - at);
  const std::string tmp = plan_path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << kept;
    require(bool(out.flush()), "--resume: cannot rewrite '" + plan_path + "' (writing " + tmp + ")");
  }
  std::filesystem::rename(tmp, plan_path);
}

// The ok points an earlier run of a resumed sweep measured (rows of its CSV
// this config also runs), for the extrapolation over every measured point.
std::vector<MeasuredPoint> earlier_points(const SweepRun& run, const SweepConfig& c, const std::set<std::string>& skip) {
  std::map<std::string, SweepPoint> by_key;
  for (const SweepPoint& p : expand(c)) by_key[p.key()] = p;
  const CsvTable t = read_csv(run.csv_path, {/*drop_partial_tail=*/true});
  const size_t cst = t.column("status"), cg = t.column("global_batch"), cq = t.column("seq_len");
  const RowKey key_of(t);
  std::vector<MeasuredPoint> out;
  for (const auto& row : t.rows) {
    const std::string key = key_of(row);
    const auto it = by_key.find(key);
    if (row[cst] != "ok" || !skip.count(key) || it == by_key.end()) continue;
    PointResult r;
    r.global_batch = std::stoll(row[cg]);
    r.seq = std::stoll(row[cq]);
    out.push_back({it->second, r, point_meta(c, it->second, r, run.meta)});
  }
  return out;
}


}  // namespace

PointResult single_rank_step(const SweepConfig& c, const ShapeKey& k, double peak_flops_per_rank,
                             const Limits& limits) {
  SweepConfig one = c;
  one.batch_per_rank = std::get<2>(k) * std::get<3>(k);
  const SweepPoint p = single_rank_point(k);
  PointResult step;
  try {
    require_fits(planner::run_need(point_spec(one, p), 1, true, /*conformance=*/false), limits, "calibration step");
  } catch (const InputError& e) {
    step.status = "skipped";
    step.reason = e.what();
    return step;
  }
  std::vector<PointResult> rounds;
  const SweepConfig window = round_config(one);
  for (int i = 0; i < c.rounds; ++i) {
    rounds.push_back(run_point(window, p, peak_flops_per_rank, nullptr));
    if (rounds.back().status != "ok") break;
  }
  return rounds.back().status == "ok" ? combine_rounds(rounds) : rounds.back();
}

namespace {

// The plan rows' figures for shape k: its kernels' rates (measure_shape_rates)
// and compute_scale, from a single-rank step of the shape run as a sweep point
// (dp1, no sharding: the reference's step, at c's seq, warm-up and measuring
// time) over the planner's estimate of it. That step is `same`, the sweep's
// own result of that very point when it has one (the median of its rounds),
// or else single_rank_step. A step that cannot run, or would not fit this
// machine's limits on one rank (a model the sweep only runs sharded), leaves
// 1 (the row's reason says so).
ShapeRates measure_rates(const SweepConfig& c, const ShapeKey& k, const LocalHardware& hw, double peak_rank,
                         const Limits& limits, const PointResult* same) {
  ShapeRates r = measure_shape_rates(named_model(std::get<0>(k)), std::get<2>(k), c.seq, peak_rank, 3);
  const PointResult step = same ? *same : single_rank_step(c, k, peak_rank, limits);
  if (step.status == "ok") {
    r.compute_scale = single_rank_compute_scale(k, c.seq, hw, r, step.step_time_s);
    r.step_measured = true;
  }
  return r;
}

// The step alone (paced_copies of one) on each of the first k cores this
// thread may run on (where paced_copies' k copies go when bound), each from
// a thread of its own bound there; the slowest.
double slowest_core_alone(const SweepConfig& c, const RunSpec& spec, int k) {
  std::vector<int> cores = allowed_cores();
  if (cores.size() > size_t(k)) cores.resize(size_t(k));
  if (cores.empty()) return paced_copies(c, spec, 1)[0];
  double slowest = 0;
  for (int core : cores) {
    double t = 0;
    std::exception_ptr failed;
    std::thread alone([&] {
      bind_to_core(core);
      try {
        t = paced_copies(c, spec, 1)[0];
      } catch (...) {
        failed = std::current_exception();
      }
    });
    alone.join();
    if (failed) std::rethrow_exception(failed);
    slowest = std::max(slowest, t);
  }
  return slowest;
}

}  // namespace

double corun_ratio(const SweepConfig& c, const ShapeKey& k, int ranks, const Limits& limits) {
  SweepConfig one = c;
  one.batch_per_rank = std::get<2>(k) * std::get<3>(k);
  const SweepPoint p = single_rank_point(k);
  try {
    const RunSpec spec = point_spec(one, p);
    require_fits(planner::run_need(spec, ranks, true, /*conformance=*/false), limits,
                 "calibration step side by side");
    const double alone = slowest_core_alone(one, spec, ranks);
    const double side = median(paced_copies(one, spec, ranks));
    return alone > 0 && side > 0 ? side / alone : 0;
  } catch (const std::exception&) {  // does not fit, or a step failed: not measured
    return 0;
  }
}

double corun_scale(const SweepConfig& c, const ShapeKey& k, int ranks, const Limits& limits,
                   std::vector<double>& windows) {
  while (int(windows.size()) < c.rounds) windows.push_back(corun_ratio(round_config(c), k, ranks, limits));
  if (windows.empty() || std::find(windows.begin(), windows.end(), 0.0) != windows.end()) return 1;
  return median(windows);
}

std::vector<double> paced_copies(const SweepConfig& c, const RunSpec& spec, int copies) {
  require(copies >= 1, "paced copies: copies must be >= 1");
  WorldOptions po;
  po.size = copies;
  const std::unique_ptr<World> pace = make_local_world(po);
  std::vector<double> out(size_t(copies), 0.0);
  run_ranks(*pace, [&](Communicator& together) {
    const std::unique_ptr<World> own = make_local_world(WorldOptions{});
    run_ranks(*own, [&](Communicator& comm) {  // on this thread (one rank): it keeps this one's core
      std::unique_ptr<Rank> rank = strategy_for(spec).make_rank(spec, comm, nullptr);
      double last = 0;
      for (int i = 0; i < std::max(1, c.warmup); ++i) last = rank->step().seconds;
      const int steps = std::max(1, measured_steps(c, together, last));
      together.barrier();
      std::vector<double> t;
      for (int i = 0; i < steps; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        rank->step();
        together.barrier();
        t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
      out[size_t(together.rank())] = median(t);
    });
  });
  return out;
}

SweepSummary run_sweep(const SweepConfig& c, const SweepRun& run, const std::set<std::string>& skip,
                       const std::map<std::string, std::vector<PointResult>>& rounds_done) {
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  SweepSummary sum;
  const bool writer = !run.world || hosts_rank(*run.world, 0);
  std::vector<SweepPoint> points;
  for (auto& p : expand(c))
    if (!run.world || p.world == run.world->size()) points.push_back(p);
  if (run.world)
    require(!points.empty(), "sweep.worlds: no point has world " + std::to_string(run.world->size()) +
                                 ", the size mpirun launched");
  // Preflight: every point this process will host fits, before the first
  // runs. A point that is not valid is left to run_point (a rejected row).
  for (const SweepPoint& p : points) {
    RunSpec spec;
    try {
      spec = point_spec(c, p);
    } catch (const InputError&) {
      continue;
    }
    const int64_t hosted = run.world ? int64_t(run.world->local_ranks().size()) : p.world;
    require_fits(planner::run_need(spec, hosted, !run.world, /*conformance=*/false), run.limits,
                 "sweep point " + p.label());
  }
  // Which points are done, and how many rounds of the others, is the
  // writer's to say (it holds the CSV and the rounds file): under mpirun every
  // process follows its list. -1: done.
  std::vector<double> done(points.size(), 0.0);
  if (writer)
    for (size_t k = 0; k < points.size(); ++k) {
      const auto it = rounds_done.find(points[k].key());
      done[k] = skip.count(points[k].key())   ? -1.0
                : it == rounds_done.end() ? 0.0
                                          : double(std::min<size_t>(it->second.size(), size_t(c.rounds - 1)));
    }
  if (run.world) run_ranks(*run.world, [&](Communicator& comm) { comm.broadcast(done.data(), done.size(), DType::f64, 0); });
  std::vector<SweepPoint> todo;
  std::vector<int> first_round;                // of each todo point: the rounds an earlier run measured
  std::vector<std::vector<PointResult>> got;  // its rounds so far (the writer's)
  for (size_t k = 0; k < points.size(); ++k) {
    if (done[k] < 0) {
      ++sum.skipped;
    } else {
      ++sum.points;
      todo.push_back(points[k]);
      first_round.push_back(int(done[k]));
      got.emplace_back();
      if (writer && done[k] > 0) {
        const std::vector<PointResult>& earlier = rounds_done.at(points[k].key());
        got.back().assign(earlier.begin(), earlier.begin() + std::ptrdiff_t(done[k]));
      }
    }
  }
  std::unique_ptr<ResultWriter> csv;
  if (writer) csv = std::make_unique<ResultWriter>(run.csv_path, "sweep");
  double peak_rank = c.peak_gflops * 1e9;
  if (writer && peak_rank == 0 && !todo.empty() && !run.peak_flops)
    peak_rank = kernels::measure_sgemm_gflops(512, 0.3) * 1e9;
  auto peak_of = [&](const SweepPoint& p) { return c.peak_gflops > 0 || !run.peak_flops ? peak_rank : run.peak_flops(p); };
  const bool extrapolates = writer && !run.world && !run.plan_csv_path.empty() && !c.extrapolate.empty();
  if (extrapolates && !skip.empty()) drop_extrapolated_rows(run.plan_csv_path);
  std::unique_ptr<ResultWriter> plan_csv;
  LocalHardware hw;
  std::map<ShapeKey, ShapeRates> rates;
  // What a plan row of point p needs, each measured once: its shape's rates
  // and its world's figures (into hw).
  // Ranks computing side by side (ShapeRates::corun_scale), once per shape
  // and count: the median of c.rounds windows (corun_ratio), taken one at the
  // start of each of the sweep's rounds for the shapes and counts its points
  // need (corun_windows), as a point's own rounds are spread over the sweep;
  // a single window caught whole by a slow spell of the host once measured
  // 1.85 where the other runs measured 1.05-1.08. Others (a resumed run's
  // earlier points): the c.rounds windows back to back, now.
  std::map<std::pair<ShapeKey, int>, std::vector<double>> corun_windows;
  auto corun_for = [&](const ShapeKey& key, int together) {
    if (together < 2 || !rates[key].step_measured || rates[key].corun_scale.count(together)) return;
    rates[key].corun_scale[together] = corun_scale(c, key, together, run.limits, corun_windows[{key, together}]);
  };
  // The ok rows of this run by point key: a shape's single-rank step, when
  // the sweep measured that very point (same batch and seq: weak scaling at
  // dp1 gives it the shape's batch).
  std::map<std::string, PointResult> done_ok;
  auto same_point = [&](const ShapeKey& key) -> const PointResult* {
    const auto it = done_ok.find(single_rank_point(key).key());
    if (it == done_ok.end() || it->second.seq != c.seq ||
        it->second.global_batch != int64_t(std::get<2>(key)) * std::get<3>(key))
      return nullptr;
    return &it->second;
  };
  auto figures_for = [&](const SweepPoint& p, const PointResult& r) -> const ShapeRates& {
    const ShapeKey key = shape_key(p, r);
    if (!rates.count(key)) rates[key] = measure_rates(c, key, hw, peak_rank, run.limits, same_point(key));
    corun_for(key, std::min(p.world, hw.cores));
    const MeshShape mesh = parse_mesh(p.mesh, "sweep point");
    if (mesh.tp > 1 || mesh.cp > 1) {
      const ModelConfig m = named_model(p.model);
      if (r.seq % mesh.cp == 0 && m.C % mesh.tp == 0 && m.NH % mesh.tp == 0) {
        measure_split_gemm_efficiency(rates[key], m, std::get<2>(key), r.seq, peak_rank, mesh.tp, mesh.cp, 3);
        RunSpec spec;
        apply_strategy_text(spec, p.strategy, "sweep point");
        try {
          add_cp_attention(rates[key], m, parse_precision(p.precision), std::get<2>(key), int(r.seq), mesh.tp,
                           mesh.cp, spec.context.algo, spec.context.zigzag);
        } catch (const InputError&) {
          // A split the attention cannot run (Ulysses' heads not splitting
          // over cp): the planner rejects its row too.
        }
      }
    }
    measure_world(hw, p.world);
    return rates[key];
  };
  if (writer && !run.world && !run.plan_csv_path.empty() && !todo.empty()) {
    plan_csv = std::make_unique<ResultWriter>(run.plan_csv_path, "plan");
    hw = measure_local_hardware(peak_rank, int(std::max(1u, std::thread::hardware_concurrency())));
  }
  std::vector<MeasuredPoint> measured;  // ok points with plan rows, for the extrapolation
  // The shapes and counts of ranks computing at once the plan rows will need
  // a corun factor for (corun_for), one window of each per round.
  std::set<std::pair<ShapeKey, int>> corun_need;
  if (plan_csv)
    for (const SweepPoint& p : todo) {
      PointResult r;
      r.seq = c.seq;
      r.global_batch = point_global_batch(c, p);
      if (p.world >= 2 && hw.cores >= 2) corun_need.insert({shape_key(p, r), std::min(p.world, hw.cores)});
      if (extrapolates && hw.cores >= 2) corun_need.insert({shape_key(p, r), hw.cores});
    }
  // Round-major: round 0 of every point, then round 1, ...; a point's row
  // (and plan row) when its last round ends, or its first fails.
  const SweepConfig window = round_config(c);
  std::unique_ptr<CsvWriter> rounds_csv;
  if (writer && c.rounds > 1 && !run.rounds_csv_path.empty())
    rounds_csv = std::make_unique<CsvWriter>(run.rounds_csv_path, round_columns());
  std::vector<bool> finished(todo.size(), false);
  size_t runs = 0, run_no = 0;
  for (int first : first_round) runs += size_t(c.rounds - first);
  const auto t1 = clock::now();
  for (int round = 0; round < c.rounds; ++round) {
    for (const auto& need : corun_need)
      corun_windows[need].push_back(corun_ratio(window, need.first, need.second, run.limits));
    for (size_t j = 0; j < todo.size(); ++j) {
      const size_t k = (j + round_offset(round, c.rounds, todo.size())) % todo.size();
      if (finished[k] || round < first_round[k]) continue;
      const SweepPoint& p = todo[k];
      if (writer && run.progress) {
        const double el = std::chrono::duration<double>(clock::now() - t1).count();
        char eta[32] = "?";
        if (run_no) std::snprintf(eta, sizeof eta, "%.0fs", el / double(run_no) * double(runs - run_no));
        *run.progress << "[" << run_no + 1 << "/" << runs << "] " << p.label();
        if (c.rounds > 1) *run.progress << " round " << round + 1 << "/" << c.rounds;
        *run.progress << " ... ETA " << eta << std::endl;
      }
      ++run_no;
      PointResult r = run_point(window, p, writer ? peak_of(p) : 0, run.world, run.open_device);
      // Not ok (rejected alike on every process; under mpirun a failure
      // throws): its row now, no more rounds.
      if (r.status != "ok" || round == c.rounds - 1) finished[k] = true;
      if (!writer) continue;
      if (r.status == "ok") got[k].push_back(r);
      if (!finished[k]) {
        if (rounds_csv) rounds_csv->write_row(round_row(c, p, round, r));
        continue;
      }
      if (r.status == "ok") r = combine_rounds(got[k]);
      const RunMeta meta = point_meta(c, p, r, run.meta);
      csv->write(meta, to_record(p, r));
      if (r.status == "ok") done_ok[p.key()] = r;
      if (plan_csv && r.status == "ok") {
        measured.push_back({p, r, meta});
        const PlanRow pr = plan_row(c, p, r, hw, meta, figures_for(p, r));
        plan_csv->write(pr.meta, pr.values);
      }
      (r.status == "ok" ? sum.ok : r.status == "rejected" ? sum.rejected : sum.failed) += 1;
      if (run.table) {
        char line[256];
        if (r.status == "ok")
          std::snprintf(line, sizeof line, "%-44s %10.4f s %12.0f tok/s  MFU %6.2f%%  dp %10lld B/step  bubble %.3f",
                        p.label().c_str(), r.step_time_s, r.tokens_per_s, 100 * r.mfu,
                        (long long)r.comm_dp_bytes, r.bubble);
        else
          std::snprintf(line, sizeof line, "%-44s %s: %.180s", p.label().c_str(), r.status.c_str(),
                        r.reason.c_str());
        *run.table << line << std::endl;
      }
    }
  }
  // Every series continued from its largest measured point, a resumed run's
  // earlier points included (their shapes' figures and ring steps measured
  // now if this run did not).
  std::vector<MeasuredPoint> all = extrapolates && !skip.empty() ? earlier_points(run, c, skip) : std::vector<MeasuredPoint>{};
  if (extrapolates) all.insert(all.end(), measured.begin(), measured.end());
  if (!all.empty()) {
    if (!plan_csv) {
      if (peak_rank == 0) peak_rank = kernels::measure_sgemm_gflops(512, 0.3) * 1e9;
      plan_csv = std::make_unique<ResultWriter>(run.plan_csv_path, "plan");
      hw = measure_local_hardware(peak_rank, int(std::max(1u, std::thread::hardware_concurrency())));
    }
    for (const MeasuredPoint& m : all) {
      figures_for(m.point, m.result);
      corun_for(shape_key(m.point, m.result), hw.cores);  // extrapolated: one rank per core, every core busy
    }
    for (const PlanRow& row : extrapolated_plan_rows(c, all, hw, rates)) plan_csv->write(row.meta, row.values);
  }
  sum.seconds = std::chrono::duration<double>(clock::now() - t0).count();
  return sum;
}

}  // namespace pb::sweep
