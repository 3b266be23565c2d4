// One sweep point trained and measured: warm-up, then the measured steps
// through the one Rank interface on every rank, the figures combined over
// ranks into the point's result. Figures (definitions in results/SCHEMA.md):
// step time = median over the measured steps of the job's pace (the time
// from the last rank finishing the step before to the last rank finishing
// this one); memory peaks restart after warm-up (they cover the measured
// steps only); MFU = model FLOPs per step (model_flops_per_step, PaLM/llm.c
// accounting) / step time / (world x per-rank peak); communication per step
// = logged bytes after warm-up / steps.
#include "suites/sweep/sweep.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

#include "harness/comm/runner.h"
#include "harness/status.h"
#include "impl/registry.h"
#include "suites/sweep/sweep_internal.h"

namespace pb::sweep {

using internal::median;
using internal::measured_steps;

namespace internal {

int measured_steps(const SweepConfig& c, Communicator& world, double last_warmup_s) {
  if (c.min_seconds <= 0) return c.steps;
  world.all_reduce(&last_warmup_s, &last_warmup_s, 1, DType::f64, ReduceOp::max);
  const double want = std::ceil(c.min_seconds / std::max(last_warmup_s, 1e-9));
  return int(std::clamp(want, double(c.steps), double(c.steps) * SweepConfig::kMaxStepsFactor));
}

}  // namespace internal

namespace {

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

// A point's figures from its ranks' combined ones (rank 0's): step time and
// its spread over the measured steps (step_times), memory, communication,
// routing, exposed communication, bubble, throughput and MFU at the world's
// peak FLOP/s.
void set_figures(PointResult& res, const RankOut& all, const std::vector<double>& bubble, bool pipelined,
                 const TrainConfig& cfg, double peak_flops) {
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
  res.tokens_per_s = double(cfg.tokens_per_step()) / res.step_time_s;
  res.model_flops_per_s = model_flops_per_step(cfg.model, cfg.batch, cfg.seq) / res.step_time_s;
  res.peak_flops = peak_flops;
  res.mfu = res.peak_flops > 0 ? res.model_flops_per_s / res.peak_flops : 0;
}

}  // namespace

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
    wo.size = p.world();
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
      require(world->size() == p.world(), "sweep: the point's world (" + std::to_string(p.world()) +
                                            ") is not mpirun's (" + std::to_string(world->size()) + ")");
      started = true;
      run_ranks(*world, body);
    } else {
      run_ranks(*make_local_world(wo), body);
    }
    if (world && !hosts_rank(*world, 0)) return res;  // rank 0 reports
    set_figures(res, all, bubble, pipelined, cfg, peak_flops_per_rank * p.world());
    res.oversubscribed = p.world() > int(std::max(1u, std::thread::hardware_concurrency()));
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

}  // namespace pb::sweep
