// Communication figures of the local backend (see comm_rates.h).
#include "suites/calibrate/comm_rates.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "harness/status.h"
#include "kernels/cpu/ops.h"
#include "suites/calibrate/timing.h"
#include "suites/planner/machine.h"
#include "suites/planner/model_cost.h"

namespace pb::calibrate {
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
  return upper_median(std::move(per_call)) / (2.0 * (world - 1)) * 1e6;
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
    out.push_back({wall_us, upper_median(std::move(cost))});
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
    return upper_median(std::move(t));
  });
}

// The median of the slopes between every two points (Theil-Sen): one slow
// size does not tilt it.
double median_slope(const std::vector<std::pair<double, double>>& xt) {
  std::vector<double> s;
  for (size_t i = 0; i < xt.size(); ++i)
    for (size_t j = i + 1; j < xt.size(); ++j)
      if (xt[j].first != xt[i].first) s.push_back((xt[j].second - xt[i].second) / (xt[j].first - xt[i].first));
  return s.empty() ? 0 : upper_median(std::move(s));
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

}  // namespace pb::calibrate
