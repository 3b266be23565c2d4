// Planner rows for sweep points (see sweep_plan.h). Time model of the planner:
// suites/planner/planner.h (compute at the per-rank peak, ring alpha-beta
// communication: steps x latency + bus bytes / bandwidth).
#include "suites/sweep/sweep_plan.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <random>
#include <tuple>
#include <vector>

#include "harness/comm/runner.h"
#include "harness/status.h"
#include "harness/mesh.h"
#include "harness/memory.h"
#include "impl/context_parallel/attention.h"
#include "impl/spec/run_spec.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/peak.h"
#include "suites/planner/machine.h"
#include "suites/planner/model_cost.h"
#include "suites/planner/plan_output.h"

namespace pb::sweep {
namespace {

using clock = std::chrono::steady_clock;


}  // namespace

// One ring step of the local backend at `world` ranks: the median over
// sizes 16 B .. 4 KiB (the fixed-cost regime; a 4-byte all_reduce takes a
// fast path the model's collectives never do) of the mean all_reduce time
// (rank 0, `iters` calls after warm-up), over its 2 (world - 1) ring steps.
// At more ranks than cores this includes the wake-ups of time-shared threads.
namespace {

double step_latency_once_us(int world) {
  constexpr int warmup = 10, iters = 60;
  WorldOptions wo;
  wo.size = world;
  auto w = make_local_world(wo);
  std::vector<double> per_call;
  for (size_t bytes = 16; bytes <= 4096; bytes *= 4) {
    const size_t n = bytes / 4;
    double t = 0;
    run_ranks(*w, [&](Communicator& comm) {
      std::vector<float> x(n, 1.f), y(n);
      for (int i = 0; i < warmup; ++i) comm.all_reduce(x.data(), y.data(), n, DType::f32);
      comm.barrier();
      const auto t0 = clock::now();
      for (int i = 0; i < iters; ++i) comm.all_reduce(x.data(), y.data(), n, DType::f32);
      const double sec = std::chrono::duration<double>(clock::now() - t0).count();
      if (comm.rank() == 0) t = sec / iters;
    });
    per_call.push_back(t);
  }
  std::sort(per_call.begin(), per_call.end());
  return per_call[per_call.size() / 2] / (2.0 * (world - 1)) * 1e6;
}

}  // namespace

double local_step_latency_us(int world) {
  require(world >= 2, "local_step_latency_us: world must be >= 2");
  double best = step_latency_once_us(world);
  for (int i = 0; i < 2; ++i) best = std::min(best, step_latency_once_us(world));
  return best;
}

namespace {

volatile double g_spin_sink = 0;

// About `n` dependent floating-point steps (a fixed, cache-free amount of
// compute), kept observable.
void spin_work(int64_t n) {
  double x = 1.0;
  for (int64_t i = 0; i < n; ++i) x = x * 1.0000001 + 1e-9;
  g_spin_sink = x;
}

// spin_work steps per microsecond on this thread (the best of three).
double spin_steps_per_us() {
  constexpr int64_t n = 2'000'000;
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = clock::now();
    spin_work(n);
    const double us = std::chrono::duration<double, std::micro>(clock::now() - t0).count();
    if (us > 0) best = std::max(best, double(n) / us);
  }
  return best;
}

// One window: seconds per iteration of (start a gather, compute, wait) and of
// the compute alone, on rank 0 between barriers.
std::pair<double, double> async_window(const WorldOptions& wo, int64_t steps, int iters) {
  const int world = wo.size;
  auto w = make_local_world(wo);
  // floats: 64 KiB, between the sweep models' unit shards at dp4 (tiny about
  // 12 KB, small about 200 KB): the cost grows with the size (256 KiB: about
  // twice as much at 1 ms of compute, in one run).
  constexpr size_t per_rank = 16384;
  double with = 0, alone = 0;
  run_ranks(*w, [&](Communicator& comm) {
    std::vector<float> mine(per_rank, 1.f), all(per_rank * size_t(world));
    for (int i = 0; i < 3; ++i) comm.all_gather(mine.data(), all.data(), per_rank, DType::f32);
    comm.barrier();
    auto t0 = clock::now();
    for (int i = 0; i < iters; ++i) {
      Request r = comm.iall_gather(mine.data(), all.data(), per_rank, DType::f32);
      spin_work(steps);
      r.wait();
    }
    comm.barrier();
    const double a = std::chrono::duration<double>(clock::now() - t0).count();
    t0 = clock::now();
    for (int i = 0; i < iters; ++i) spin_work(steps);
    comm.barrier();
    const double b = std::chrono::duration<double>(clock::now() - t0).count();
    if (comm.rank() == 0) with = a / iters, alone = b / iters;
  });
  return {with, alone};
}

}  // namespace

std::vector<planner::AsyncCallCost> measure_async_call_cost(int world, int cores, WorldOptions::Progress progress) {
  std::vector<planner::AsyncCallCost> out;
  WorldOptions wo;
  wo.size = world;
  wo.progress = progress;
  if (world <= cores || cores < 1 || local_progress_deferred(wo, unsigned(cores))) return out;
  const double share = double(cores) / double(world);
  const double per_us = spin_steps_per_us();
  for (double wall_us : {50.0, 250.0, 1000.0, 4000.0}) {
    const auto steps = int64_t(wall_us * share * per_us);
    const int iters = std::clamp(int(1e5 / wall_us), 8, 2000);  // about 0.1 s
    std::vector<double> cost;
    for (int rep = 0; rep < 3; ++rep) {
      const auto [with, alone] = async_window(wo, steps, iters);
      cost.push_back(std::max(0.0, with - alone) * 1e6);
    }
    std::sort(cost.begin(), cost.end());
    out.push_back({wall_us, cost[1]});
  }
  return out;
}

namespace {

// The ranks a call's logical bytes (nccl-tests) spread over: all_reduce and
// send_recv move `count` elements, the others n x count in all.
size_t logical_ranks(const std::string& op, int n) { return op == "all_reduce" || op == "send_recv" ? 1 : size_t(n); }

// For each total logical size, every rank of `world` runs time(comm, call,
// touch), `call` making one call of `op` at that size (fp32; send_recv: a
// ring exchange, each rank sending to the next and receiving from the
// previous), `touch` reading the rank's output and rewriting its input, as a
// step's compute does around its collectives; rank 0's result per size, with
// the size.
template <class Time>
std::vector<std::pair<double, double>> time_op(World& world, const std::string& op, const std::vector<size_t>& sizes,
                                               Time time) {
  std::vector<std::pair<double, double>> xt;
  const int n = world.size();
  for (size_t total : sizes) {
    const size_t count = std::max<size_t>(1, total / 4 / logical_ranks(op, n));
    double t = 0;
    run_ranks(world, [&](Communicator& comm) {
      const size_t nn = size_t(comm.size());
      std::vector<float> x(count * nn, 1.f), y(count * nn);
      const int next = (comm.rank() + 1) % comm.size(), prev = (comm.rank() + comm.size() - 1) % comm.size();
      auto call = [&] {
        if (op == "all_reduce") comm.all_reduce(x.data(), y.data(), count, DType::f32);
        else if (op == "reduce_scatter") comm.reduce_scatter(x.data(), y.data(), count, DType::f32);
        else if (op == "all_gather") comm.all_gather(x.data(), y.data(), count, DType::f32);
        else if (op == "all_to_all") comm.all_to_all(x.data(), y.data(), count, DType::f32);
        else comm.sendrecv(x.data(), next, y.data(), prev, count, DType::f32);
      };
      auto touch = [&] { std::fill(x.begin(), x.end(), float(kernels::sum_squares(y.data(), y.size()) > 0)); };
      const double mine = time(comm, call, touch);
      if (comm.rank() == 0) t = mine;
    });
    xt.push_back({double(count * 4 * logical_ranks(op, n)), t});
  }
  return xt;
}

}  // namespace

std::vector<std::pair<double, double>> measure_collective_times(const std::string& op, int n,
                                                                const std::vector<size_t>& bytes, double seconds) {
  WorldOptions wo;
  wo.size = n;
  auto world = make_local_world(wo);
  return time_op(*world, op, bytes, [&](Communicator& comm, auto& call, auto& /*touch*/) {
    for (int i = 0; i < 3; ++i) call();
    // Rank 0 sizes the timed loop from three calls; every rank then makes
    // that many calls with nothing else in between.
    auto t0 = clock::now();
    for (int i = 0; i < 3; ++i) call();
    double calls = std::clamp(seconds / (std::chrono::duration<double>(clock::now() - t0).count() / 3), 3.0, 1e6);
    comm.broadcast(&calls, 1, DType::f64, 0);
    comm.barrier();
    t0 = clock::now();
    for (int i = 0; i < int(calls); ++i) call();
    return std::chrono::duration<double>(clock::now() - t0).count() / int(calls);
  });
}

namespace {

// Warm-up: f() (at least once) until `seconds` have passed on rank 0's
// clock, which decides for every rank, so all make as many calls (new rank
// threads can share a core until the scheduler moves one: their first calls
// are slow). The calls of f made.
template <class F>
int warm_up(Communicator& comm, F&& f, double seconds) {
  double warm = 0;
  int n = 0;
  const auto w0 = clock::now();
  while (warm < seconds) {
    f();
    ++n;
    warm = std::chrono::duration<double>(clock::now() - w0).count();
    comm.broadcast(&warm, 1, DType::f64, 0);
  }
  return n;
}

// Seconds per call of `op` at each logical size among the ranks of `world`
// as a step makes it: `calls` calls, each after the rank has read its
// previous output and rewritten its input (touch), less the same touches
// alone; the median of three such windows, after at least 5 ms of warm-up.
// A step's collectives move what its compute has just written and its next
// compute reads what they delivered, and those bytes cross between the
// cores' caches: back to back on an unchanged input they stay in every
// core's cache. A 2-rank all_reduce of 64 KB and 256 KB took 3.2 and 8.2 us
// back to back here, 13.8 and 30.6 us in this pattern (whatever the compute
// between calls, 10-150 us); the slope at 64 KB .. 4 MB back to back hid
// it (large buffers miss the caches either way).
std::vector<std::pair<double, double>> step_call_times(World& world, const std::string& op,
                                                       const std::vector<size_t>& sizes, int calls) {
  return time_op(world, op, sizes, [&](Communicator& comm, auto& call, auto& touch) {
    warm_up(comm, [&] { for (int i = 0; i < 4; ++i) touch(), call(); }, 0.005);
    auto loop = [&](bool with_call) {
      comm.barrier();
      const auto t0 = clock::now();
      for (int i = 0; i < calls; ++i) {
        touch();
        if (with_call) call();
      }
      comm.barrier();
      return std::chrono::duration<double>(clock::now() - t0).count();
    };
    std::vector<double> t;
    for (int rep = 0; rep < 3; ++rep) t.push_back(std::max(0.0, loop(true) - loop(false)) / calls);
    std::sort(t.begin(), t.end());
    return t[1];
  });
}

// The median of the slopes between every two points (Theil-Sen): one slow
// size does not tilt it.
double median_slope(const std::vector<std::pair<double, double>>& xt) {
  std::vector<double> s;
  for (size_t i = 0; i < xt.size(); ++i)
    for (size_t j = i + 1; j < xt.size(); ++j)
      if (xt[j].first != xt[i].first) s.push_back((xt[j].second - xt[i].second) / (xt[j].first - xt[i].first));
  if (s.empty()) return 0;
  std::sort(s.begin(), s.end());
  return s[s.size() / 2];
}

}  // namespace

std::map<std::string, double> measure_bus_bandwidth(int n, std::map<std::string, double>* alpha_us) {
  require(n >= 2, "measure_bus_bandwidth: needs at least 2 ranks");
  const std::vector<size_t> sizes = {size_t(16) << 10, size_t(64) << 10, size_t(256) << 10, size_t(1) << 20};
  WorldOptions wo;
  wo.size = n;
  auto world = make_local_world(wo);
  std::map<std::string, double> out;
  for (const std::string& op : planner::collective_ops()) {
    std::vector<std::pair<double, double>> fits;  // (GB/s, intercept us)
    for (int rep = 0; rep < 3; ++rep) {
      std::vector<std::pair<double, double>> bt;
      for (const auto& [x, t] : step_call_times(*world, op, sizes, 15))
        bt.push_back({planner::bus_bytes(op, n, x), t});
      const double slope = median_slope(bt);
      if (!(slope > 0)) continue;
      std::vector<double> icpt;
      for (const auto& [b, t] : bt) icpt.push_back(t - slope * b);
      std::sort(icpt.begin(), icpt.end());
      fits.push_back({1 / slope / 1e9, std::max(0.0, (icpt[1] + icpt[2]) / 2) * 1e6});
    }
    if (fits.size() < 2) continue;  // no slope: the copy bandwidth stands in
    std::sort(fits.begin(), fits.end());
    out[op] = fits[fits.size() / 2].first;
    if (alpha_us) (*alpha_us)[op] = fits[fits.size() / 2].second;
  }
  return out;
}

void measure_world(LocalHardware& h, int world) {
  if (world < 2) return;
  if (!h.latency_us_by_world.count(world)) h.latency_us_by_world[world] = local_step_latency_us(world);
  for (int g = 2; g <= world; g *= 2)
    if (!h.bus_GBps.count(g)) h.bus_GBps[g] = measure_bus_bandwidth(g, &h.bus_alpha_us[g]);
  if (world > h.cores && !h.async_call_cost_by_world.count(world))
    h.async_call_cost_by_world[world] = measure_async_call_cost(world, h.cores);
}

namespace {

double core_share(const LocalHardware& h, int world) { return std::min(1.0, double(h.cores) / double(world)); }

// A point the planner refuses: its identifying columns and why.
void reject(PlanRow& row, const SweepPoint& p, const PointResult& r, const InputError& e) {
  row.values = CsvRecord{};
  row.values.set("strategy", p.strategy).set("model", p.model).set("precision", p.precision);
  row.values.set("params", named_model(p.model).num_params());
  row.values.set("global_batch", r.global_batch).set("seq_len", r.seq);
  row.meta.status = "rejected";
  row.meta.reason = std::string("planner: ") + e.what();
}

}  // namespace

double copy_bandwidth_GBps() {
  const size_t bytes = size_t(32) << 20;
  std::vector<char> a(bytes, 1), b(bytes, 0);
  double best = 0;
  for (int rep = 0; rep < 4; ++rep) {  // the first copy also faults the pages in
    const auto t0 = clock::now();
    std::memcpy(b.data(), a.data(), bytes);
    const double s = std::chrono::duration<double>(clock::now() - t0).count();
    a[size_t(rep)] = b[bytes - 1 - size_t(rep)];  // keep the copies observable
    if (s > 0) best = std::max(best, double(bytes) / s / 1e9);
  }
  return best;
}

LocalHardware measure_local_hardware(double peak_flops_per_rank, int cores) {
  LocalHardware h;
  h.peak_flops_per_rank = peak_flops_per_rank;
  h.cores = std::max(1, cores);
  h.copy_GBps = copy_bandwidth_GBps();
  h.latency_us = local_step_latency_us(2);
  h.latency_us_by_world[2] = h.latency_us;  // measured once: the sweep's 2-rank points use it
  return h;
}

planner::Hardware planner_hardware(const LocalHardware& h, int world) {
  const double share = core_share(h, world);
  planner::Hardware hw;
  hw.peak_tflops = h.peak_flops_per_rank * share / 1e12;
  hw.bw_intra_GBps = h.copy_GBps * share;
  hw.bw_inter_GBps = hw.bw_intra_GBps;
  const auto lat = h.latency_us_by_world.find(world);
  hw.latency_us = lat != h.latency_us_by_world.end() ? lat->second : h.latency_us;
  hw.core_share = share;
  if (const auto a = h.async_call_cost_by_world.find(world); a != h.async_call_cost_by_world.end())
    hw.async_call_cost = a->second;
  for (const auto& [g, by_op] : h.bus_GBps) {
    const double own_share = std::min(1.0, double(h.cores) / double(g));
    const auto alphas = h.bus_alpha_us.find(g);
    for (const auto& [op, gbps] : by_op) {
      double alpha = hw.latency_us * planner::ring_steps(op, g);
      if (alphas != h.bus_alpha_us.end())
        if (const auto a = alphas->second.find(op); a != alphas->second.end())
          alpha = std::max(alpha, a->second * own_share / share);
      hw.collectives[op].push_back({g, alpha, gbps * share / own_share});
    }
  }
  // A copy reads and writes every byte; the traffic counts do both.
  hw.mem_bw_GBps = 2 * h.copy_GBps * share;
  return hw;
}

namespace {
using GemmRates = std::map<std::tuple<int64_t, int64_t, int64_t, bool, bool>, double>;  // GFLOP/s by shape

// The efficiency of a rank's GEMMs, each shape timed once into `rate`.
double gemm_efficiency_timed(const ModelConfig& m, int Bm, int seq, double peak_flops, double seconds, int tp, int cp,
                             bool attention_core, GemmRates& rate) {
  require(Bm > 0 && seq > 0 && peak_flops > 0, "gemm efficiency: microbatch, seq and peak must be > 0");
  require(tp >= 1 && cp >= 1 && seq % cp == 0 && m.C % tp == 0 && m.NH % tp == 0,
          "gemm efficiency: tp must divide the width and heads, cp the sequence");
  return planner::gemm_efficiency(
      planner::rank_gemms(m, Bm, seq, tp, cp, attention_core),
      [&](const planner::GemmShape& g) {
        double& r = rate[std::make_tuple(g.m, g.n, g.k, g.ta, g.tb)];
        if (r == 0) r = kernels::measure_sgemm_gflops(int(g.m), int(g.n), int(g.k), g.ta, g.tb, seconds);
        return r;
      },
      peak_flops);
}
}  // namespace

double measure_gemm_efficiency(const ModelConfig& m, int Bm, int seq, double peak_flops, double seconds, int tp,
                               int cp, bool attention_core) {
  GemmRates rate;
  return gemm_efficiency_timed(m, Bm, seq, peak_flops, seconds, tp, cp, attention_core, rate);
}

double MemoryBoundRates::GBps(int64_t microbatches) const {
  const bool split = shared_GBps() > 0;
  const double bytes = double(microbatches) * (micro_bytes - (split ? shared_bytes : 0));
  const double s = double(microbatches) * (micro_s - (split ? shared_s : 0));
  return s > 0 && bytes > 0 ? bytes / s / 1e9 : 0;
}

double MemoryBoundRates::buffer_GBps() const {
  return buffer_s > 0 && buffer_bytes > 0 ? buffer_bytes / buffer_s / 1e9 : 0;
}
double MemoryBoundRates::optimizer_GBps() const { return step_s > 0 && step_bytes > 0 ? step_bytes / step_s / 1e9 : 0; }

double MemoryBoundRates::shared_GBps() const {
  return shared_s > 0 && shared_bytes > 0 && shared_s < micro_s ? shared_bytes / shared_s / 1e9 : 0;
}

namespace {

// Median seconds of one call of f over repeats totalling at least `seconds`
// (at least 3, after one warm-up call).
template <class F>
double median_seconds(F f, double seconds) {
  f();
  std::vector<double> t;
  double total = 0;
  while (t.size() < 3 || total < seconds) {
    const auto t0 = clock::now();
    f();
    t.push_back(std::chrono::duration<double>(clock::now() - t0).count());
    total += t.back();
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

MemoryBoundRates measure_memory_bound(const ModelConfig& m, int Bm, int seq, double seconds) {
  require(Bm > 0 && seq > 0 && seconds >= 0, "memory-bound rates: microbatch and seq must be > 0");
  namespace k = kernels;
  const int N = Bm * seq, C = m.C, NH = m.NH, V = m.V, hs = m.C / m.NH;
  const size_t NC = size_t(N) * size_t(C), N4 = 4 * NC;
  auto filled = [](size_t n, float v) { return std::vector<float>(std::max<size_t>(n, 1), v); };
  std::vector<float> x = filled(N4, 0.5f), y = filled(N4, 0.25f), dy = filled(N4, 0.125f), dx = filled(N4, 0.f);
  std::vector<float> w = filled(size_t(C), 1.f), b = filled(size_t(C), 0.f), dw = filled(size_t(C), 0.f),
                     db = filled(size_t(C), 0.f), mean = filled(size_t(N), 0.f), rstd = filled(size_t(N), 0.f);
  std::vector<float> qkv = filled(3 * NC, 0.01f), att = filled(size_t(Bm) * NH * seq * seq, 0.f),
                     datt = filled(att.size(), 0.f), dqkv = filled(3 * NC, 0.f);
  std::vector<float> aws = filled(k::attention_workspace_elems<float>(seq, C, NH), 0.f);
  std::vector<float> logits = filled(size_t(N) * V, 0.01f), dlogits = filled(size_t(N) * V, 0.f);
  std::vector<float> wte = filled(size_t(V) * C, 0.02f), wpe = filled(size_t(m.maxT) * C, 0.02f),
                     dwte = filled(wte.size(), 0.f), dwpe = filled(wpe.size(), 0.f);
  std::vector<int32_t> tokens(static_cast<size_t>(N));
  for (int i = 0; i < N; ++i) tokens[size_t(i)] = i % V;
  std::vector<float> losses = filled(size_t(N), 0.f);
  auto layernorm = [&] {
    k::layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
    k::layernorm_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), mean.data(), rstd.data(),
                          N, C);
  };
  const double ln_s = median_seconds(layernorm, seconds / 8);
  const double residual_s = median_seconds([&] {
    k::residual_forward(y.data(), x.data(), dy.data(), NC);
    k::accumulate(dx.data(), dy.data(), NC);
  }, seconds / 8);
  const double gelu_s = median_seconds([&] {
    k::gelu_forward(y.data(), x.data(), N4);
    k::gelu_backward(dx.data(), x.data(), dy.data(), N4);
  }, seconds / 8);
  const double attention_s = median_seconds([&] {
    k::attention_forward(y.data(), att.data(), qkv.data(), Bm, seq, C, NH, aws.data());
    k::attention_backward(dqkv.data(), datt.data(), dy.data(), qkv.data(), att.data(), Bm, seq, C, NH, aws.data());
  }, seconds / 8);
  // The attention kernel's GEMMs (forward QK^T and PV, backward dP, dV, dS K,
  // dS^T Q per head), which measure_gemm_efficiency counts on the GEMM side.
  const double heads = double(Bm) * NH;
  auto gemm_s = [&](int a, int bb, int kk, bool ta, bool tb, double calls) {
    return calls * 2.0 * a * bb * kk / (kernels::measure_sgemm_gflops(a, bb, kk, ta, tb, seconds / 16) * 1e9);
  };
  const double attention_gemm_s = gemm_s(seq, seq, hs, false, true, 2 * heads) +
                                  gemm_s(seq, hs, seq, false, false, 2 * heads) +
                                  gemm_s(seq, hs, seq, true, false, 2 * heads);
  const double embed_s = median_seconds([&] {
    k::encoder_forward(y.data(), tokens.data(), wte.data(), wpe.data(), Bm, seq, C);
    k::encoder_backward(dwte.data(), dwpe.data(), dy.data(), tokens.data(), Bm, seq, C);
  }, seconds / 8);
  const double loss_s = median_seconds([&] {
    k::crossentropy_forward(losses.data(), dlogits.data(), logits.data(), tokens.data(), N, V);
    k::crossentropy_backward(dlogits.data(), dlogits.data(), tokens.data(), 1.0 / N, N, V);
  }, seconds / 8);
  MemoryBoundRates r;
  r.shared_s = m.L * (2 * ln_s + 2 * residual_s);
  r.micro_s = r.shared_s + m.L * (gelu_s + std::max(0.0, attention_s - attention_gemm_s)) + embed_s + ln_s + loss_s;
  const planner::ActivationShape shape{Bm, seq, C, NH, 1, 1, false, false, 4};
  r.shared_bytes = double(m.L) * double(planner::layer_shared_traffic_bytes(shape));
  r.micro_bytes = double(m.L) * double(planner::layer_traffic_bytes(shape)) +
                  double(planner::embedding_traffic_bytes(shape)) + double(planner::head_traffic_bytes(shape, V));
  const size_t P = size_t(m.num_params());
  std::vector<float> master = filled(P, 0.01f), grad = filled(P, 1e-3f), mom = filled(P, 0.f), var = filled(P, 0.f);
  double sink = 0;
  r.step_s = median_seconds([&] {
    sink += k::sum_squares(grad.data(), P);
    k::AdamWHyper hyper;
    k::adamw_step<float, float>(master.data(), master.data(), grad.data(), mom.data(), var.data(), P, hyper, true);
  }, seconds / 4);
  // Reads params, grads and both states; writes params and states (planner.cc).
  r.step_bytes = double(P) * (4 + 4 + 8 + 4 + 8);
  if (!(sink >= 0)) r.step_s = 0;  // keeps the norm observable; a sum of squares is never negative
  // The data-parallel components' own buffer traffic (dp::local_traffic_bytes),
  // as Component does it unit by unit: a tracked buffer allocated
  // (zero-filled), the unit's parameters copied in, added into the held
  // gradient, freed: one, two and three times the unit's bytes. Between two
  // units the model's states (params, grads, both moments) are read through,
  // untimed, as a step streams the rest of the model between two uses of a
  // unit. Here small's ran at 47-49 GB/s so (62 back to back), against about
  // 25 GB/s inside its ZeRO steps: the plan still charges small's ZeRO-3 at
  // dp1 about 1 ms short of its measured 3 ms over DDP.
  const std::vector<int64_t> units = planner::rank_param_units(m, 1, pipeline::partition_layers(m.L, 1, 1), 0);
  // At most 16 Mi floats of each state (256 MiB in all): far past any core's
  // caches, and a large model's rates stay quick to measure.
  const size_t streamed = std::min<size_t>(P, size_t(16) << 20);
  MemoryTracker tracker;
  std::vector<double> passes;
  double timed = 0;
  while (passes.size() < 3 || timed < seconds / 4) {
    double t = 0;
    size_t at = 0;
    for (int64_t u : units) {
      for (const auto* state : {&master, &grad, &mom, &var}) sink += k::sum_squares(state->data(), streamed);
      const auto t0 = clock::now();
      Buffer<float> buf(&tracker, MemTag::comm, size_t(u));
      std::memcpy(buf.data(), master.data() + at, size_t(u) * sizeof(float));
      k::accumulate(grad.data() + at, buf.data(), size_t(u));
      buf.reset();
      t += std::chrono::duration<double>(clock::now() - t0).count();
      at += size_t(u);
    }
    passes.push_back(t);
    timed += t;
  }
  std::sort(passes.begin(), passes.end());
  r.buffer_s = passes[passes.size() / 2];
  r.buffer_bytes = 0;
  for (int64_t u : units) r.buffer_bytes += 6.0 * sizeof(float) * double(u);
  if (!(sink >= 0)) r.buffer_s = 0;
  return r;
}

ShapeRates measure_shape_rates(const ModelConfig& m, int Bm, int seq, double peak_flops, int repeats) {
  require(repeats >= 1, "shape rates: repeats must be >= 1");
  ShapeRates r;
  r.gemm_efficiency = 0;
  for (int i = 0; i < repeats; ++i) {
    r.gemm_efficiency = std::max(r.gemm_efficiency, measure_gemm_efficiency(m, Bm, seq, peak_flops, 0.01));
    const MemoryBoundRates x = measure_memory_bound(m, Bm, seq, 0.05);
    if (i == 0) {
      r.memory = x;
      continue;
    }
    r.memory.micro_s = std::min(r.memory.micro_s, x.micro_s);
    r.memory.step_s = std::min(r.memory.step_s, x.step_s);
    r.memory.shared_s = std::min(r.memory.shared_s, x.shared_s);
    r.memory.buffer_s = std::min(r.memory.buffer_s, x.buffer_s);
  }
  return r;
}

double ShapeRates::gemm_efficiency_at(int tp, int cp) const {
  const auto it = split_gemm_efficiency.find({tp, cp});
  return it != split_gemm_efficiency.end() ? it->second : gemm_efficiency;
}

double ShapeRates::corun_at(int k, double copies) const {
  const auto it = corun_scale.find(k);
  return it == corun_scale.end() ? 1 : planner::corun_factor(it->second, k, copies);
}

double ShapeRates::linear_efficiency_at(int tp, int cp) const {
  const auto it = split_linear_efficiency.find({tp, cp});
  return it != split_linear_efficiency.end() ? it->second : gemm_efficiency_at(tp, cp);
}

void measure_split_gemm_efficiency(ShapeRates& r, const ModelConfig& m, int Bm, int seq, double peak_flops, int tp,
                                   int cp, int repeats) {
  require(repeats >= 1, "shape rates: repeats must be >= 1");
  if ((tp == 1 && cp == 1) || r.split_gemm_efficiency.count({tp, cp})) return;
  double best = 0, linear = 0;
  for (int i = 0; i < repeats; ++i) {
    GemmRates rate;
    best = std::max(best, gemm_efficiency_timed(m, Bm, seq, peak_flops, 0.01, tp, cp, true, rate));
    if (cp > 1) linear = std::max(linear, gemm_efficiency_timed(m, Bm, seq, peak_flops, 0.01, tp, cp, false, rate));
  }
  r.split_gemm_efficiency[{tp, cp}] = best;
  if (cp > 1) r.split_linear_efficiency[{tp, cp}] = linear;
}

namespace {

// One window of measure_cp_attention at element type T.
template <class T>
CpAttentionTime cp_attention_window(int Bm, int seq, int heads, int hs, int tp, int cp, CpAlgo algo, bool zigzag,
                                    double seconds) {
  using A = acc_t<T>;
  CpAttentionTime timed{0, 0, tp * cp};
  run_local(tp * cp, [&](Communicator& comm) {
    kernels::set_blas_threads(1);
    // The tp rings side by side, each over the ranks of one tp index (the
    // mesh's order: tp fastest), as a tp x cp world runs them.
    const std::unique_ptr<Communicator> ring_comm = comm.split(comm.rank() % tp, comm.rank() / tp, "cp");
    cp::CpOptions o;
    o.cp = cp;
    o.algo = algo;
    o.zigzag = zigzag;
    const int Tl = seq / cp, Ct = heads * hs;
    const size_t N = size_t(Bm) * Tl;
    std::mt19937 g(uint32_t(comm.rank() + 7));
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    auto random = [&](size_t n) {
      std::vector<T> v(n);
      for (T& x : v) x = T(u(g));
      return v;
    };
    const std::vector<T> qkv = random(N * 3 * Ct), dout = random(N * Ct);
    std::vector<T> out(N * Ct), dqkv(N * 3 * Ct);
    MemoryTracker mt;
    std::unique_ptr<cp::RingAttention<T>> ring;
    std::unique_ptr<cp::UlyssesAttention<T>> uly;
    std::vector<A> lse;
    std::vector<T> qkvh, att;
    if (algo == CpAlgo::ring) {
      ring = std::make_unique<cp::RingAttention<T>>(o, ring_comm.get(), &mt, Bm, seq, heads, hs);
      lse.resize(size_t(Bm) * heads * Tl);
    } else {
      uly = std::make_unique<cp::UlyssesAttention<T>>(o, ring_comm.get(), &mt, Bm, seq, heads, hs);
      qkvh.resize(size_t(Bm) * seq * 3 * (Ct / cp));
      att.resize(size_t(Bm) * (heads / cp) * seq * seq);
    }
    auto forward = [&] {
      if (ring) ring->forward(out.data(), lse.data(), qkv.data());
      else uly->forward(out.data(), qkvh.data(), att.data(), qkv.data());
    };
    auto backward = [&] {
      if (ring) ring->backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data());
      else uly->backward(dqkv.data(), dout.data(), qkvh.data(), att.data());
    };
    // Warm-up: pairs of calls filling 5 ms. A shape whose call takes longer
    // than a batch's share of `seconds` runs one call per batch.
    const auto w0 = clock::now();
    const int pairs = warm_up(
        comm,
        [&] {
          forward();
          backward();
        },
        0.005);
    // Back to back, as a step runs them: `calls` forwards, then as many
    // backwards (of the same forward's output), each batch the slowest rank's
    // wall time over its calls; three such pairs of batches, the least of
    // each (a batch can still catch two threads on one core).
    double calls = std::clamp(std::floor(seconds / 6 / (std::chrono::duration<double>(clock::now() - w0).count() /
                                                        pairs / 2)),
                              1.0, 20000.0);
    comm.broadcast(&calls, 1, DType::f64, 0);
    auto batch = [&](auto&& call) {
      comm.barrier();
      const auto t0 = clock::now();
      for (int i = 0; i < int(calls); ++i) call();
      double t = std::chrono::duration<double>(clock::now() - t0).count() / calls;
      comm.all_reduce(&t, &t, 1, DType::f64, ReduceOp::max);
      return t;
    };
    double f = 0, b = 0;
    for (int i = 0; i < 3; ++i) {
      const double fi = batch(forward), bi = batch(backward);
      f = i == 0 ? fi : std::min(f, fi);
      b = i == 0 ? bi : std::min(b, bi);
    }
    if (comm.rank() == 0) timed.fwd_s = f, timed.bwd_s = b;
  });
  return timed;
}

}  // namespace

CpAttentionTime measure_cp_attention(const ModelConfig& m, Precision precision, int Bm, int seq, int tp, int cp,
                                     CpAlgo algo, bool zigzag, double seconds, int repeats) {
  require(repeats >= 1 && Bm >= 1 && tp >= 1 && cp >= 2, "cp attention: repeats, Bm and tp must be >= 1, cp >= 2");
  require(seq % cp == 0, "cp attention: cp" + std::to_string(cp) + " does not divide the sequence length " +
                             std::to_string(seq));
  require(m.NH % tp == 0, "cp attention: tp" + std::to_string(tp) + " does not divide the model's " +
                              std::to_string(m.NH) + " heads");
  const int heads = m.NH / tp, hs = m.C / m.NH;
  require(algo != CpAlgo::ulysses || heads % cp == 0,
          "cp attention: Ulysses needs the " + std::to_string(heads) + " heads per tp rank to split over cp" +
              std::to_string(cp));
  CpAttentionTime best;
  for (int i = 0; i < repeats; ++i) {
    CpAttentionTime t;
    switch (precision) {
      case Precision::fp64: t = cp_attention_window<double>(Bm, seq, heads, hs, tp, cp, algo, zigzag, seconds); break;
      case Precision::fp32: t = cp_attention_window<float>(Bm, seq, heads, hs, tp, cp, algo, zigzag, seconds); break;
      case Precision::bf16_mixed: t = cp_attention_window<bf16>(Bm, seq, heads, hs, tp, cp, algo, zigzag, seconds); break;
    }
    if (i == 0 || t.fwd_s + t.bwd_s < best.fwd_s + best.bwd_s) best = t;
  }
  return best;
}

void add_cp_attention(ShapeRates& r, const ModelConfig& m, Precision precision, int Bm, int seq, int tp, int cp,
                      CpAlgo algo, bool zigzag) {
  const auto key = std::make_tuple(tp, cp, algo, zigzag);
  if (cp < 2 || r.cp_attention.count(key)) return;
  r.cp_attention[key] = measure_cp_attention(m, precision, Bm, seq, tp, cp, algo, zigzag, 0.03, 2);
}

ShapeKey shape_key(const SweepPoint& p, const PointResult& r) {
  return {p.model, p.precision, int(r.global_batch / (int64_t(p.dp) * p.microbatches)), p.microbatches};
}

SweepPoint single_rank_point(const ShapeKey& k) {
  const auto& [model, precision, Bm, microbatches] = k;
  return {"shard=none", "dp1", model, precision, "weak", 1, 1, microbatches};
}

double single_rank_compute_scale(const ShapeKey& k, int seq, const LocalHardware& h, ShapeRates r,
                                 double measured_s) {
  SweepConfig one;
  one.seq = seq;
  PointResult res;
  res.seq = seq;
  res.global_batch = int64_t(std::get<2>(k)) * std::get<3>(k);
  r.compute_scale = 1;
  return planner::compute_scale_for(planner::plan(plan_input(one, single_rank_point(k), res, h, r)), measured_s);
}

namespace {
// in's compute_scale times ShapeRates::corun_at for `together` of its ranks
// computing at once, with a 1 / (tp x pp) slice of the model's weights each.
void scale_for_corun(planner::PlanInput& in, const ShapeRates& rates, int together) {
  in.hw.compute_scale *= rates.corun_at(together, double(together) / double(in.tp * in.pp));
}

// The point's mesh and strategy, as run_point builds its spec.
RunSpec point_run_spec(const SweepPoint& p) {
  RunSpec spec;
  spec.mesh = parse_mesh(p.mesh, "sweep.meshes");
  apply_strategy_text(spec, p.strategy, "sweep.strategies");
  return spec;
}

// The measured memory-bound rates (none: the memcpy figure planner_hardware
// set stays), at the rank's core share.
void set_memory_rates(planner::PlanInput& in, const MemoryBoundRates& m, int64_t microbatches, double share) {
  const double mem = m.GBps(microbatches);
  if (!(mem > 0)) return;
  in.hw.mem_bw_GBps = mem * share;
  in.hw.shared_mem_bw_GBps = m.shared_GBps() * share;
  in.hw.optimizer_mem_bw_GBps = m.optimizer_GBps() * share;
  in.hw.buffer_mem_bw_GBps = m.buffer_GBps() * share;
}

// Whether run_point's DDP overlaps its buckets with backward: not inside
// pipeline stages, which sync after the flush.
bool ddp_overlaps(const RunSpec& spec) {
  return spec.data.shard == dp::Shard::none && spec.data.overlap && spec.mesh.pp == 1 && !spec.pipe.schedule;
}

// A context-parallel plan's measured attention core (ShapeRates::cp_attention),
// at the world's core share: it ran on its own tp x cp threads, which shared
// the cores as those ranks do, and runs among `world` ranks. The rest of the rank's
// GEMMs then run at the split's linear efficiency.
void set_cp_attention(planner::PlanInput& in, const ShapeRates& rates, const LocalHardware& h, int world) {
  if (in.cp < 2) return;
  const auto it = rates.cp_attention.find({in.tp, in.cp, in.cp_algo, in.zigzag});
  if (it == rates.cp_attention.end() || it->second.fwd_s <= 0 || it->second.bwd_s <= 0) return;
  const double slower = core_share(h, it->second.threads) / core_share(h, world);
  in.hw.attention_fwd_s = it->second.fwd_s * slower;
  in.hw.attention_bwd_s = it->second.bwd_s * slower;
  in.hw.gemm_efficiency = rates.linear_efficiency_at(in.tp, in.cp);  // the core's own GEMMs are in its time
}
}  // namespace

planner::PlanInput plan_input(const SweepConfig& c, const SweepPoint& p, const PointResult& r,
                              const LocalHardware& h, const ShapeRates& rates) {
  const RunSpec spec = point_run_spec(p);
  planner::PlanInput in;
  in.shape = planner::planner_model(p.model);
  in.seq = r.seq;
  in.dp = spec.mesh.dp;
  in.ep = spec.mesh.ep;
  in.tp = spec.mesh.tp;
  in.cp = spec.mesh.cp;
  in.cp_algo = spec.context.algo;
  in.zigzag = spec.context.zigzag;
  in.sp = spec.tensor.sp;
  in.recompute = spec.tensor.recompute;
  in.pp = spec.mesh.pp;
  in.schedule = spec.pipe.schedule.value_or(pipeline::ScheduleKind::one_f_one_b);
  in.virtual_stages = spec.pipe.virtual_stages;
  in.shard = spec.data.shard;
  in.hsdp_group = spec.data.shard_group;
  in.prefetch = spec.data.prefetch;
  in.offload = spec.data.offload;
  in.precision = parse_precision(p.precision);
  in.global_batch = r.global_batch;
  in.microbatch_size = r.global_batch / (int64_t(p.dp) * p.microbatches);
  // Only where the local backend runs its collectives on progress threads:
  // with fewer than two cores per rank it runs them at the wait
  // (WorldOptions::Progress), so the buckets are exposed.
  WorldOptions wo;
  wo.size = p.world;
  in.overlap = ddp_overlaps(spec) && !local_progress_deferred(wo, unsigned(h.cores));
  in.ranks_per_node = spec.mesh.ranks_per_node ? spec.mesh.ranks_per_node : c.ranks_per_node;
  in.hw = planner_hardware(h, p.world);
  in.hw.gemm_efficiency = rates.gemm_efficiency_at(in.tp, in.cp);
  in.hw.compute_scale = rates.compute_scale;
  set_memory_rates(in, rates.memory, p.microbatches, core_share(h, p.world));
  set_cp_attention(in, rates, h, p.world);
  scale_for_corun(in, rates, std::min(p.world, h.cores));
  return in;
}

PlanRow plan_row(const SweepConfig& c, const SweepPoint& p, const PointResult& r, const LocalHardware& h,
                 const RunMeta& point_meta, const ShapeRates& rates) {
  PlanRow row;
  row.meta = point_meta;
  row.meta.kind = "plan";
  row.meta.backend = "analytic";
  try {
    const planner::PlanInput in = plan_input(c, p, r, h, rates);
    const planner::PlanResult pr = planner::plan(in);
    row.values = planner::plan_record(in, pr);
    // The sweep's spelling of the point (the strategy text), so the report
    // pairs the two rows.
    row.values.set("strategy", p.strategy);
    char split[96] = "";
    if (in.tp > 1 || in.cp > 1)
      std::snprintf(split, sizeof split, " (at a tp%d cp%d rank's shapes%s)", in.tp, in.cp,
                    in.hw.attention_fwd_s > 0 ? ", the attention core's left out" : "");
    char note[600];
    std::string shared_note = "2 x memcpy";
    if (rates.memory.GBps(p.microbatches) > 0) {
      std::snprintf(note, sizeof note,
                    "measured at the model's shapes; its LayerNorms and residual adds at %.4g GB/s, the optimizer "
                    "step at %.4g GB/s, the data-parallel buffers at %.4g GB/s",
                    rates.memory.shared_GBps(), rates.memory.optimizer_GBps(), rates.memory.buffer_GBps());
      shared_note = note;
    }
    std::snprintf(note, sizeof note,
                  "measured hardware: %.4g GFLOP/s sgemm x %.3g core share, the model's GEMMs at %.3g of it%s, "
                  "memory-bound kernels at %.4g GB/s (%s), compute x %.3g (%s), latency %.4g us per ring step at "
                  "%d ranks%s",
                  h.peak_flops_per_rank / 1e9, core_share(h, p.world), in.hw.gemm_efficiency, split,
                  in.hw.mem_bw_GBps / core_share(h, p.world), shared_note.c_str(),
                  rates.compute_scale,
                  rates.step_measured ? "a measured single-rank step of the shape over the kernels' estimate"
                                      : "no single-rank step measured: it did not fit this machine on one rank or failed",
                  planner_hardware(h, p.world).latency_us, std::max(2, p.world),
                  p.world < 2 ? " (unused: one rank)" : "");
    std::string reason = note;
    const int together = std::min(p.world, h.cores);
    if (const auto it = rates.corun_scale.find(together); together > 1 && it != rates.corun_scale.end()) {
      std::snprintf(note, sizeof note,
                    ", x %.3g for %d ranks computing at once (the single-rank step ran x %.3g as %d copies side by "
                    "side, meeting after every step; taken at the copies of the weights these ranks hold)",
                    in.hw.compute_scale / rates.compute_scale, together, it->second, together);
      reason += note;
    }
    if (in.hw.attention_fwd_s > 0) {
      std::snprintf(note, sizeof note,
                    "; the attention core measured (%s%s at this rank's shape, cp traffic included): %.3g + %.3g us "
                    "forward + backward per block and microbatch",
                    std::string(cp_algo_name(in.cp_algo)).c_str(),
                    in.cp_algo == CpAlgo::ring ? (in.zigzag ? " zigzag" : " contiguous") : "",
                    in.hw.attention_fwd_s * 1e6, in.hw.attention_bwd_s * 1e6);
      reason += note;
    }
    if (p.world > 1 && !in.hw.collectives.empty()) {
      reason += "; bus bandwidth per op, measured";
      const char* sep = ": ";
      for (const auto& [op, fits] : in.hw.collectives)
        for (const planner::CollectiveFit& f : fits)
          if (f.group_size <= p.world) {
            std::snprintf(note, sizeof note, "%s%s %.3g GB/s at %lld", sep, op.c_str(), f.GBps,
                          (long long)f.group_size);
            reason += note;
            sep = ", ";
          }
      reason += " ranks (at this world's core share)";
    }
    if (pr.async_cost_s > 0) {
      std::snprintf(note, sizeof note,
                    "; %lld collectives per step issued without waiting cost %.3g ms on time-shared cores (measured: ",
                    (long long)pr.async_calls, pr.async_cost_s * 1e3);
      reason += note;
      for (size_t i = 0; i < in.hw.async_call_cost.size(); ++i) {
        const planner::AsyncCallCost& a = in.hw.async_call_cost[i];
        std::snprintf(note, sizeof note, "%s%.3g us per call at %.3g us of compute between calls", i ? ", " : "",
                      a.cost_us, a.compute_us);
        reason += note;
      }
      reason += ")";
    }
    row.meta.status = "ok";
    row.meta.reason = reason;
  } catch (const InputError& e) {
    reject(row, p, r, e);
  }
  return row;
}

std::vector<PlanRow> extrapolated_plan_rows(const SweepConfig& c, const std::vector<MeasuredPoint>& measured,
                                            const LocalHardware& h,
                                            const std::map<ShapeKey, ShapeRates>& rates) {
  // The largest measured point of each series.
  std::map<std::string, const MeasuredPoint*> largest;
  for (const MeasuredPoint& m : measured) {
    MeshShape other = parse_mesh(m.point.mesh, "sweep point");
    other.dp = 1;
    const std::string series = m.point.strategy + "|" + mesh_text(other) + "|" + m.point.model + "|" +
                               m.point.precision + "|" + std::to_string(m.point.microbatches) + "|" + m.point.scaling;
    const MeasuredPoint*& best = largest[series];
    if (!best || m.point.world > best->point.world) best = &m;
  }
  std::optional<planner::MachineProfile> profile;
  if (!c.machine.empty()) profile = planner::load_machine(c.machine);
  // This machine's figures for one rank per core: the latency at the largest
  // world measured (the fixed cost at full occupancy).
  LocalHardware local = h;
  if (!h.latency_us_by_world.empty()) local.latency_us = h.latency_us_by_world.rbegin()->second;
  local.latency_us_by_world.clear();
  local.async_call_cost_by_world.clear();  // one rank per core: no time-shared cores
  std::vector<PlanRow> rows;
  for (const auto& [series, m] : largest) {
    for (int64_t target : c.extrapolate) {
      if (target <= m->point.world) continue;
      const int other = m->point.world / m->point.dp;
      SweepPoint p = m->point;
      PointResult r = m->result;
      PlanRow row;
      row.meta = m->meta;
      row.meta.kind = "plan";
      row.meta.backend = "analytic";
      row.meta.world = int(target);
      try {
        require(target % other == 0, "extrapolate: " + std::to_string(target) + " ranks is not a multiple of the " +
                                         std::to_string(other) + " ranks of the series' other axes");
        MeshShape ms = parse_mesh(p.mesh, "sweep point");
        ms.dp = int(target / other);
        p.mesh = mesh_text(ms);
        p.world = int(target);
        p.dp = ms.dp;
        if (p.scaling == "weak") r.global_batch = r.global_batch / m->point.dp * p.dp;
        require(r.global_batch % (int64_t(p.dp) * p.microbatches) == 0,
                "extrapolate: a global batch of " + std::to_string(r.global_batch) + " does not split over dp " +
                    std::to_string(p.dp) + " x " + std::to_string(p.microbatches) + " microbatches");
        row.meta.mesh = p.mesh;
        const auto found = rates.find(shape_key(m->point, m->result));
        const ShapeRates shape_rates = found != rates.end() ? found->second : ShapeRates{};
        planner::PlanInput in = plan_input(c, p, r, local, shape_rates);
        char note[320];
        if (profile) {
          in.hw = planner::hardware_for(*profile, in);
          in.ranks_per_node = profile->ranks_per_node;
          in.overlap = ddp_overlaps(point_run_spec(p));  // the profile's devices overlap on their own streams
          std::snprintf(note, sizeof note, "extrapolated from %d measured ranks with machine profile %s (%s)",
                        m->point.world, profile->name.c_str(), profile->source.c_str());
        } else {
          in.hw = planner_hardware(local, 1);  // one rank per core
          in.hw.gemm_efficiency = shape_rates.gemm_efficiency_at(in.tp, in.cp);
          in.hw.compute_scale = shape_rates.compute_scale;
          set_memory_rates(in, shape_rates.memory, p.microbatches, 1);
          set_cp_attention(in, shape_rates, local, 1);
          scale_for_corun(in, shape_rates, local.cores);  // one rank per core: every core busy
          in.ranks_per_node = local.cores;
          std::snprintf(note, sizeof note,
                        "extrapolated from %d measured ranks with this machine's figures: one rank per core, %d "
                        "per node, inter-node links as fast as intra-node (no profile given), latency %.4g us",
                        m->point.world, local.cores, local.latency_us);
        }
        const planner::PlanResult pr = planner::plan(in);
        row.values = planner::plan_record(in, pr);
        row.values.set("strategy", p.strategy);
        row.meta.status = "ok";
        row.meta.reason = note;
        if (in.hw.attention_fwd_s > 0)
          row.meta.reason += "; the attention core as measured at the series' cp rank, at a whole core";
      } catch (const InputError& e) {
        reject(row, p, r, e);
        row.meta.reason = "extrapolated: " + row.meta.reason;  // every extrapolated row's reason says so
      }
      rows.push_back(std::move(row));
    }
  }
  return rows;
}

std::vector<ProfilePoint> plan_against(const planner::MachineProfile& m, const std::string& sweep_csv) {
  CsvTable t;
  try {
    t = read_csv(sweep_csv, {/*drop_partial_tail=*/true});
  } catch (const InputError& e) {
    throw InputError(std::string("--against: ") + e.what());
  }
  size_t ck = 0, cs = 0, cst = 0, cme = 0, cmo = 0, cpr = 0, csc = 0, cw = 0, cmb = 0, cgb = 0, csq = 0, cts = 0,
         chash = 0;
  try {
    ck = t.column("kind"), cs = t.column("status"), cst = t.column("strategy"), cme = t.column("mesh");
    cmo = t.column("model"), cpr = t.column("precision"), csc = t.column("scaling"), cw = t.column("world");
    cmb = t.column("microbatches"), cgb = t.column("global_batch"), csq = t.column("seq_len");
    cts = t.column("step_time_s"), chash = t.column("config_hash");
  } catch (const std::out_of_range& e) {
    throw InputError("--against: " + sweep_csv + " is not a sweep CSV (" + e.what() + ")");
  }
  LocalHardware h;  // the measured runs' progress rule at the profile's cores; its figures are replaced
  h.cores = m.ranks_per_node;
  h.peak_flops_per_rank = h.copy_GBps = 1;
  std::vector<ProfilePoint> out;
  for (size_t i = 0; i < t.rows.size(); ++i) {
    const auto& row = t.rows[i];
    if (row[ck] != "sweep" || row[cs] != "ok") continue;
    ProfilePoint pt;
    pt.label = row[cme] + " " + row[cst] + " " + row[cmo] + " " + row[cpr];
    try {
      auto number = [&](size_t c) {
        const std::string& text = row[c];
        double v = 0;
        const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
        require(ec == std::errc() && end == text.data() + text.size() && std::isfinite(v) && v > 0 && v < 1e15,
                "--against: " + sweep_csv + " line " + std::to_string(t.row_lines[i]) + ": " + t.header[c] +
                    " '" + text + "' is not a number > 0");
        return v;
      };
      SweepPoint p{row[cst], row[cme], row[cmo], row[cpr], row[csc], int(number(cw)), 1, int(number(cmb))};
      pt.mesh = parse_mesh(p.mesh, "--against");
      p.dp = pt.mesh.dp;
      PointResult r;
      r.global_batch = int64_t(number(cgb));
      r.seq = int64_t(number(csq));
      pt.measured_s = number(cts);
      if (p.world > m.ranks_per_node) {
        pt.why = std::to_string(p.world) + " ranks on a node of " + std::to_string(m.ranks_per_node) +
                 " cores: time-shared here, " + std::to_string((p.world + m.ranks_per_node - 1) / m.ranks_per_node) +
                 " nodes in the profile's plan";
      } else {
        planner::PlanInput in = plan_input(SweepConfig{}, p, r, h);
        in.hw = planner::hardware_for(m, in);
        in.hw.memory_GB = m.memory_GB;
        in.hw.machine = m.name;
        in.ranks_per_node = m.ranks_per_node;
        const planner::PlanResult pr = planner::plan(in);
        pt.planned_s = pr.step_s;
        pt.compared = pt.planned_s > 0;
        if (!pt.compared) pt.why = "the profile gives no time (no peak)";
        pt.plan = planner::plan_record(in, pr);
        pt.plan.set("strategy", p.strategy);
        pt.world = p.world;
        pt.config_hash = row[chash];
      }
    } catch (const InputError& e) {
      pt.why = std::string("not planned: ") + e.what();
    }
    out.push_back(pt);
  }
  require(!out.empty(), "--against: " + sweep_csv + " has no ok sweep rows");
  return out;
}

}  // namespace pb::sweep
