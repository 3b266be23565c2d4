// parabench calibrate --device cuda's measurements (device_rates.h).
#include "suites/calibrate/device_rates.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <stdexcept>
#include <tuple>

#include "harness/status.h"
#include "suites/calibrate/timing.h"
#include "suites/collectives/coll.h"
#include "suites/collectives/driver.h"
#include "suites/planner/model_cost.h"

namespace pb::calibrate {
namespace {

// A device buffer of n elements of T, freed on scope exit.
template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer(DeviceMemory& m, size_t n) : m_(m), p_(static_cast<T*>(m.allocate(std::max<size_t>(1, n) * sizeof(T)))) {}
  ~DeviceBuffer() { m_.deallocate(p_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  T* get() const { return p_; }

 private:
  DeviceMemory& m_;
  T* p_;
};

// One GEMM of the table or a probe (out m x n = inp (m x k) W^T + b,
// matmul_forward) and its operands on the device; the caller fills them.
template <class T>
struct DeviceGemm {
  const kernels::DeviceOps<T>& ops;
  int m, n, k;
  DeviceBuffer<T> out, inp, w, b;
  DeviceGemm(const kernels::DeviceOps<T>& o, DeviceMemory& memory, int m_, int n_, int k_)
      : ops(o), m(m_), n(n_), k(k_), out(memory, size_t(m_) * n_), inp(memory, size_t(m_) * k_),
        w(memory, size_t(n_) * k_), b(memory, size_t(n_)) {}
  void operator()() const { ops.matmul_forward(out.get(), inp.get(), w.get(), b.get(), m, k, n, nullptr); }
};

// Small values (not the allocator's zeros, which a GPU multiplies at a
// lower power than data), no overflow or denormal: filled from the host.
template <class T>
void fill(const kernels::DeviceOps<T>& ops, T* dst, size_t n, float v) {
  const std::vector<T> host(std::min<size_t>(n, size_t(1) << 22), T(v));  // 16 MiB at most, copied in pieces
  for (size_t at = 0; at < n; at += host.size())
    ops.to_device(dst + at, host.data(), std::min(host.size(), n - at) * sizeof(T));
}

// Uniform [-1, 1] values (a fixed seed): NVIDIA's fill for GEMMs timed at the
// power limit, whose draw, and so clock, depends on the data (CUTLASS
// media/docs/cpp/gemm_performance_measurement_methodology_guidelines.md,
// "Matrix Fill Methodology"; a constant fill draws less).
template <class T>
void fill_uniform(const kernels::DeviceOps<T>& ops, T* dst, size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<T> host(std::min<size_t>(n, size_t(1) << 22));
  for (size_t at = 0; at < n; at += host.size()) {
    const size_t k = std::min(host.size(), n - at);
    for (size_t i = 0; i < k; ++i) host[i] = T(u(rng));
    ops.to_device(dst + at, host.data(), k * sizeof(T));
  }
}

template <class T>
std::vector<planner::GemmRate> gemm_table(const kernels::DeviceOps<T>& ops, DeviceMemory& mem, const DeviceGrid& g) {
  std::vector<planner::GemmRate> t;
  auto timeline = ops.timeline();
  for (int m : g.gemm_m)
    for (int n : g.gemm_nk)
      for (int k : g.gemm_nk) {
        const DeviceGemm<T> gemm(ops, mem, m, n, k);
        fill(ops, gemm.inp.get(), size_t(m) * k, 0.5f);
        fill(ops, gemm.w.get(), size_t(n) * k, 0.25f);
        const double s = device_seconds_per_call(*timeline, gemm, g.seconds);
        t.push_back({m, n, k, 2.0 * double(m) * double(n) * double(k) / s / 1e9});
      }
  return t;
}

// The memory-bound kernels by kind (device_rates.h KindRates), bf16, each
// kernel's bytes the planner's own count (model_cost.h) for it at this shape.
KindRates kind_rates(const kernels::DeviceOps<bf16>& ops, DeviceMemory& memory, const DeviceGrid& g) {
  const DeviceGrid::KindShape& k = g.kinds;
  require(k.norm_N >= 0 && k.C > 0 && k.loss_N >= 0 && k.V > 0,
          "calibrate: the kinds' shapes must be positive (0 rows: that kind not measured)");
  KindRates r;
  r.shape = k;
  auto timeline = ops.timeline();
  // The planner's per-token counts at bf16 (2-byte elements), one sequence
  // of the shape's rows, no tensor parallelism or dropout.
  planner::ActivationShape x;
  x.b = 1;
  x.h = k.C;
  x.a = 1;
  x.elem_bytes = int(sizeof(bf16));
  if (k.norm_N > 0) {
    x.s = k.norm_N;
    const size_t n = size_t(k.norm_N) * size_t(k.C), h4 = 4 * n;
    {  // the norms: one LayerNorm forward and backward (the head's final norm's count)
      DeviceBuffer<bf16> inp(memory, n), out(memory, n), w(memory, k.C), b(memory, k.C), dout(memory, n),
          dinp(memory, n), dw(memory, k.C), db(memory, k.C);
      DeviceBuffer<float> mean(memory, size_t(k.norm_N)), rstd(memory, size_t(k.norm_N));
      fill(ops, inp.get(), n, 0.5f);
      fill(ops, w.get(), size_t(k.C), 1.0f);
      fill(ops, dout.get(), n, 0.01f);
      const double fwd = device_seconds_per_call(
          *timeline,
          [&] { ops.layernorm_forward(out.get(), mean.get(), rstd.get(), inp.get(), w.get(), b.get(), k.norm_N, k.C); },
          g.seconds);
      // Backward accumulates into dinp, dweight and dbias: repeated calls
      // change their values, not the kernels' work.
      const double bwd = device_seconds_per_call(
          *timeline,
          [&] {
            ops.layernorm_backward(dinp.get(), dw.get(), db.get(), dout.get(), inp.get(), w.get(), mean.get(),
                                   rstd.get(), k.norm_N, k.C);
          },
          g.seconds);
      r.norm.bytes = double(planner::head_norm_traffic_bytes(x));
      r.norm.seconds = fwd + bwd;
    }
    {  // the elementwise kind: a residual add (3h per token forward), the GELU
       // over 4h (8h forward, 16h backward: layer_traffic_bytes' 3 x 8h)
      DeviceBuffer<bf16> a(memory, h4), b(memory, h4), out(memory, h4), dinp(memory, h4);
      fill(ops, a.get(), h4, 0.5f);
      fill(ops, b.get(), h4, 0.25f);
      r.residual_s = device_seconds_per_call(
          *timeline, [&] { ops.residual_forward(out.get(), a.get(), b.get(), n); }, g.seconds);
      r.gelu_fwd_s = device_seconds_per_call(*timeline, [&] { ops.gelu_forward(out.get(), a.get(), h4); }, g.seconds);
      r.gelu_bwd_s = device_seconds_per_call(
          *timeline, [&] { ops.gelu_backward(dinp.get(), a.get(), b.get(), h4); }, g.seconds);
      // One of the layer's two adds (its forward: the shared part's forward
      // less the norms'), and the GELU both ways (the layer less its shared
      // part and its softmax).
      const double add = double(planner::layer_shared_forward_traffic_bytes(x) -
                                planner::layer_norm_forward_traffic_bytes(x)) / 2,
                   gelu = double(planner::layer_traffic_bytes(x) - planner::layer_shared_traffic_bytes(x) -
                                 planner::layer_softmax_traffic_bytes(x));
      r.elementwise.bytes = add + gelu;
      r.elementwise.seconds = r.residual_s + r.gelu_fwd_s + r.gelu_bwd_s;
    }
  }
  if (k.loss_N > 0) {  // the loss: cross-entropy forward and backward over the vocabulary
    x.s = k.loss_N;
    const size_t n = size_t(k.loss_N) * size_t(k.V);
    DeviceBuffer<bf16> logits(memory, n), probs(memory, n), dlogits(memory, n);
    DeviceBuffer<float> losses(memory, size_t(k.loss_N));
    DeviceBuffer<int32_t> targets(memory, size_t(k.loss_N));
    fill(ops, logits.get(), n, 0.01f);
    std::vector<int32_t> t(size_t(k.loss_N));
    for (size_t i = 0; i < t.size(); ++i) t[i] = int32_t((i * 7919) % size_t(k.V));
    ops.to_device(targets.get(), t.data(), t.size() * sizeof(int32_t));
    const double fwd = device_seconds_per_call(
        *timeline,
        [&] { ops.crossentropy_forward(losses.get(), probs.get(), logits.get(), targets.get(), k.loss_N, k.V); },
        g.seconds);
    // Backward accumulates into dlogits, as above.
    const double bwd = device_seconds_per_call(
        *timeline,
        [&] {
          ops.crossentropy_backward(dlogits.get(), probs.get(), targets.get(), 1.0 / k.loss_N, k.loss_N, k.V);
        },
        g.seconds);
    r.loss.bytes = double(planner::head_traffic_bytes(x, k.V) - planner::head_norm_traffic_bytes(x));
    r.loss.seconds = fwd + bwd;
  }
  return r;
}

}  // namespace

double AttentionRate::tflops() const {
  const double fwd = 2.0 * shape.B * shape.NH * double(shape.T) * double(shape.T) * shape.hs;
  return (fwd + 2.5 * fwd) / (fwd_s + bwd_s) / 1e12;
}

DeviceRates measure_device_rates(const kernels::DeviceOps<bf16>& ops16, const kernels::DeviceOps<float>& ops32,
                                 DeviceMemory& memory, const DeviceGrid& grid) {
  require(grid.seconds > 0, "calibrate: the device grid's seconds must be > 0");
  DeviceRates r;
  r.gemm_bf16 = gemm_table(ops16, memory, grid);
  r.gemm_fp32 = gemm_table(ops32, memory, grid);
  {  // a device-to-device copy: its bytes read and written
    DeviceBuffer<char> a(memory, grid.copy_bytes), b(memory, grid.copy_bytes);
    auto timeline = ops16.timeline();
    const double s =
        device_seconds_per_call(*timeline, [&] { ops16.copy(b.get(), a.get(), grid.copy_bytes); }, grid.seconds);
    r.copy_GBps = 2.0 * double(grid.copy_bytes) / s / 1e9;
  }
  auto timeline = ops16.timeline();
  for (const DeviceGrid::AttentionShape& a : grid.attention) {
    const int C = a.NH * a.hs;
    const size_t tokens = size_t(a.B) * size_t(a.T), probs = size_t(a.B) * a.NH * size_t(a.T) * size_t(a.T);
    DeviceBuffer<bf16> qkv(memory, tokens * 3 * C), out(memory, tokens * C), att(memory, probs),
        dqkv(memory, tokens * 3 * C), datt(memory, probs), dout(memory, tokens * C);
    fill(ops16, qkv.get(), tokens * 3 * C, 0.01f);
    fill(ops16, dout.get(), tokens * C, 0.01f);
    AttentionRate x;
    x.shape = a;
    x.fwd_s = device_seconds_per_call(
        *timeline, [&] { ops16.attention_forward(out.get(), att.get(), qkv.get(), a.B, a.T, C, a.NH, nullptr); },
        grid.seconds);
    x.bwd_s = device_seconds_per_call(
        *timeline,
        [&] {
          // Backward accumulates into dqkv and datt (zeroed by the allocator):
          // repeated calls change their values, not the kernels' work.
          ops16.attention_backward(dqkv.get(), datt.get(), dout.get(), qkv.get(), att.get(), a.B, a.T, C, a.NH,
                                   nullptr);
        },
        grid.seconds);
    r.attention.push_back(x);
  }
  r.kinds = kind_rates(ops16, memory, grid);
  ops16.synchronize();
  return r;
}

namespace {

// The communicator's order_after for a scope, restored on exit.
class OrderedAfter {
 public:
  OrderedAfter(Communicator& c, void* stream) : c_(c), before_(c.ordered_after()) { c.order_after(stream); }
  ~OrderedAfter() { c_.order_after(before_); }
  OrderedAfter(const OrderedAfter&) = delete;
  OrderedAfter& operator=(const OrderedAfter&) = delete;

 private:
  Communicator& c_;
  void* before_;
};

}  // namespace

OverlapSlowdown measure_overlap_slowdown(Communicator& comm, const kernels::DeviceOps<bf16>& ops, DeviceMemory& memory,
                                         const OverlapProbe& p, void* stream) {
  require(comm.size() >= 2, "calibrate: the overlap probe needs 2 or more ranks (a collective beside the GEMMs)");
  require(p.m > 0 && p.n > 0 && p.k > 0 && p.seconds > 0 && p.repeats >= 1 && p.message_bytes >= 4,
          "calibrate: the overlap probe's GEMM shape, seconds, repeats and message must be positive");
  const OrderedAfter ordered(comm, stream);
  OverlapSlowdown r;
  r.probe = p;
  r.ranks = comm.size();
  const size_t count = p.message_bytes / 4;  // fp32 elements
  const SpaceBuffer message(comm.buffers(), count * 4);
  const DeviceGemm<bf16> gemm(ops, memory, p.m, p.n, p.k);
  fill(ops, gemm.inp.get(), size_t(p.m) * p.k, 0.5f);
  fill(ops, gemm.w.get(), size_t(p.n) * p.k, 0.25f);
  auto timeline = ops.timeline();
  // The largest of every rank's values (in place).
  auto agree_max = [&](double* v, size_t n) { comm.all_reduce(v, v, n, DType::f64, ReduceOp::max); };

  // One all_reduce alone, back to back as beside the batch (4 issued, then
  // waited for): the slowest rank's median of 3 after a warm-up; one GEMM
  // on the device.
  auto all_reduces = [&](int n) {
    std::vector<Request> pending;
    for (int i = 0; i < n; ++i) pending.push_back(comm.iall_reduce(message.get(), message.get(), count, DType::f32));
    return pending;
  };
  {
    std::vector<Request> warm = all_reduces(1);
    wait_all(warm);
  }
  std::vector<double> t;
  for (int i = 0; i < 3; ++i) {
    comm.barrier();
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<Request> four = all_reduces(4);
    wait_all(four);
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 4);
  }
  double once[2] = {upper_median(t), device_seconds_per_call(*timeline, gemm, p.seconds / 4)};
  agree_max(once, 2);
  r.all_reduce_s = once[0];
  // The batch: at least p.seconds and 4 all_reduces long, so some complete
  // beside it; the all_reduces: 3 batches long alone, so they run past it
  // even where the GEMMs slow more than they do.
  r.gemms = int(std::min(1e6, std::ceil(std::max(p.seconds, 4 * r.all_reduce_s) / once[1])));
  int collectives = int(std::min(1e5, std::ceil(3 * r.gemms * once[1] / r.all_reduce_s))) + 2;
  auto batch = [&] {
    timeline->clear();
    const int a = timeline->mark();
    for (int i = 0; i < r.gemms; ++i) gemm();
    const int z = timeline->mark();
    return timeline->seconds(a, z);  // the batch done (on a GPU: its end event waited for)
  };
  // A repeat counts when on every rank some of the all_reduces completed
  // beside the batch and some were still running at its end. Otherwise the
  // repeats so far are dropped (every one counted is of the sizes the source
  // names) and, where none completed beside the batch on some rank, the
  // batch (and the all_reduces) doubled (a late peer's or the scheduler's
  // milliseconds on a busy host); where all completed within one, twice as
  // many all_reduces. None on any rank in 3 batches: the backend does not
  // run them beside the compute.
  std::vector<std::array<double, 3>> runs;  // {slowdown, alone, with} of the rank slowed most, per repeat
  int none = 0, retries = 0;
  while (int(runs.size()) < p.repeats) {
    comm.barrier();
    const double alone = batch();
    require(alone > 0, "calibrate: the overlap probe's GEMM batch took no time on the device's timer");
    comm.barrier();
    std::vector<Request> pending = all_reduces(collectives);
    const double with = batch();
    int done = 0;  // a stream's collectives complete in issue order
    while (done < collectives && pending[size_t(done)].test()) ++done;
    wait_all(pending);
    // The rank slowed most: its slowdown, then its times (the largest of the
    // pair with the same rank's); the fewest and most completed.
    const double slowed = with / alone - 1;
    double v[3] = {slowed, -double(done), double(done)};
    agree_max(v, 3);
    double mine[2] = {slowed == v[0] ? alone : 0, slowed == v[0] ? with : 0};
    agree_max(mine, 2);
    const bool some_saw_none = v[1] == 0, none_anywhere = v[2] == 0, all_within = v[2] == collectives;
    r.collectives = collectives;
    if (!some_saw_none && !all_within) {
      runs.push_back({v[0], mine[0], mine[1]});
      continue;
    }
    if (none_anywhere && ++none == 3) {
      r.why_not = "in 3 batches of up to " + std::to_string(r.gemms) + " GEMMs, none of the up to " +
                  std::to_string(collectives) + " non-blocking all_reduces issued before each had completed on "
                  "any rank when its batch ended (the " + std::string(comm.backend()) + " backend runs them when "
                  "waited on, not beside the compute): nothing overlapped to measure";
      return r;
    }
    if (++retries == 3 * p.repeats + 3) {
      r.why_not = "in " + std::to_string(retries) + " batches, fewer than " + std::to_string(p.repeats) +
                  " had all_reduces completing beside them and still running at their end on every rank (a busy "
                  "host?): no figure";
      return r;
    }
    runs.clear();
    if (some_saw_none) r.gemms = std::min(r.gemms * 2, 1 << 22);
    if (some_saw_none || all_within) collectives = std::min(collectives * 2, 1000000);
  }
  for (const auto& x : runs) r.repeats.push_back(x[0]);
  std::vector<std::array<double, 3>> sorted = runs;
  std::sort(sorted.begin(), sorted.end());
  const std::array<double, 3>& mid = sorted[sorted.size() / 2];
  r.slowdown = std::max(0.0, mid[0]);
  r.gemm_alone_s = mid[1];
  r.gemm_with_s = mid[2];
  r.overlapped = std::isfinite(r.slowdown);
  if (!r.overlapped) r.why_not = "the GEMM batch's times gave no finite slowdown";
  ops.synchronize();
  return r;
}

GemmSpread measure_gemm_spread(Communicator& comm, const kernels::DeviceOps<bf16>& ops, DeviceMemory& memory,
                               const SpreadProbe& p, void* stream) {
  require(p.m > 0 && p.n > 0 && p.k > 0 && p.seconds > 0 && p.warmup_seconds >= 0 && p.repeats >= 1,
          "calibrate: the spread probe's GEMM shape, seconds and repeats must be positive (its warm-up >= 0)");
  const OrderedAfter ordered(comm, stream);
  GemmSpread r;
  r.probe = p;
  r.ranks = comm.size();
  const DeviceGemm<bf16> gemm(ops, memory, p.m, p.n, p.k);
  fill_uniform(ops, gemm.inp.get(), size_t(p.m) * p.k, 1);
  fill_uniform(ops, gemm.w.get(), size_t(p.n) * p.k, 2);
  fill(ops, gemm.b.get(), size_t(p.n), 0.0f);
  auto timeline = ops.timeline();
  // Every rank's GPU busy at once, as in training (a node's GPUs share its
  // power and cooling): the warm-up and each repeat start on a barrier.
  comm.barrier();
  if (p.warmup_seconds > 0) device_seconds_per_call(*timeline, gemm, p.warmup_seconds);
  std::vector<double> repeats;
  for (int i = 0; i < p.repeats; ++i) {
    comm.barrier();
    repeats.push_back(device_seconds_per_call(*timeline, gemm, p.seconds));
  }
  std::sort(repeats.begin(), repeats.end());
  const size_t h = repeats.size() / 2;
  const double mine = repeats.size() % 2 ? repeats[h] : (repeats[h - 1] + repeats[h]) / 2;
  require(std::isfinite(mine) && mine > 0, "calibrate: the spread probe's GEMM took no time on the device's timer");
  ops.synchronize();
  r.per_call_s.assign(size_t(comm.size()), 0.0);
  comm.all_gather(&mine, r.per_call_s.data(), 1, DType::f64);
  std::vector<double> sorted = r.per_call_s;
  std::sort(sorted.begin(), sorted.end());
  const size_t n = sorted.size(), mid = n / 2;
  r.min_s = sorted.front();
  r.max_s = sorted.back();
  r.median_s = n % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
  if (n < 2) {
    r.why_not = "one rank: no other GPU to differ from (calibrate on 2 or more)";
    return r;
  }
  double mean = 0;
  for (double x : sorted) mean += x;
  mean /= double(n);
  double ss = 0;
  for (double x : sorted) ss += (x - mean) * (x - mean);
  r.spread = std::sqrt(ss / double(n - 1)) / r.median_s;
  if (!std::isfinite(r.spread)) r.why_not = "the ranks' GEMM times gave no finite spread";
  return r;
}

std::vector<int> group_sizes(int n) {
  std::vector<int> g;
  for (int x = 2; x < n; x *= 2) g.push_back(x);
  if (n >= 2) g.push_back(n);
  return g;
}

std::map<std::string, std::vector<planner::CollectiveFit>> measure_collective_fits(World& world,
                                                                                   const CollectiveSweep& sweep) {
  const int n = world.size();
  for (int g : sweep.groups)
    require(g >= 2 && g <= n, "calibrate: a collective group of " + std::to_string(g) + " ranks in a world of " +
                                  std::to_string(n));
  std::vector<const coll::CollDesc*> ops;
  for (const std::string& op : sweep.ops) {
    const coll::CollDesc* d = coll::find_coll(op);
    require(d != nullptr && (op == "all_reduce" || op == "reduce_scatter" || op == "all_gather"),
            "calibrate: collective '" + op + "' is not all_reduce, reduce_scatter or all_gather");
    ops.push_back(d);
  }
  coll::BenchOptions o;
  o.min_bytes = sweep.min_bytes;
  o.max_bytes = sweep.max_bytes;
  o.step_factor = 4;
  o.iters = sweep.iters;
  o.warmup = sweep.warmup;
  o.check = sweep.check;
  o.average = 3;  // the slowest rank's time, as nccl-tests' -a 3
  // (op, group) -> (bytes, seconds), on rank 0.
  std::map<std::pair<std::string, int>, std::vector<std::pair<double, double>>> times;
  long wrong = 0;
  run_ranks(world, [&](Communicator& comm) {
    for (int g : sweep.groups) {
      std::unique_ptr<Communicator> sub =
          comm.split(comm.rank() < g ? 0 : -1, comm.rank(), "calibrate_" + std::to_string(g));
      if (sub)
        for (const coll::CollDesc* d : ops)
          coll::run_collective(*sub, *d, DType::f32, ReduceOp::sum, -1, o,
                               [&](const coll::BenchPoint& oop, const coll::BenchPoint&) {
                                 if (comm.rank() != 0) return;
                                 times[{std::string(d->schema_name), g}].push_back({double(oop.bytes), oop.time_us * 1e-6});
                                 if (oop.wrong > 0) wrong += oop.wrong;
                               });
      comm.barrier();
    }
  });
  require(wrong == 0, "calibrate: " + std::to_string(wrong) + " wrong elements in the collectives' results");
  std::map<std::string, std::vector<planner::CollectiveFit>> fits;
  for (const auto& [key, xt] : times)
    fits[key.first].push_back(planner::fit_alpha_beta(key.first, key.second, xt, 4096,
                                                      "calibrate: " + key.first + " at " + std::to_string(key.second) +
                                                          " ranks",
                                                      " (a busy device or link? run calibrate again)"));
  for (auto& [op, v] : fits)
    std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.group_size < b.group_size; });
  return fits;
}

planner::MachineProfile device_profile(const std::string& name, const DeviceRates& r,
                                       const std::map<std::string, std::vector<planner::CollectiveFit>>& fits,
                                       const DeviceContext& c) {
  require(!r.gemm_bf16.empty(), "calibrate: no bf16 GEMM was measured");
  const auto ar = fits.find("all_reduce");
  require(ar != fits.end() && !ar->second.empty(), "calibrate: no all_reduce was measured (the profile's link)");
  const std::string on = " on " + c.device + ", " + c.date + " (git " + c.git_rev + ")";
  const std::string by = "measured by parabench calibrate --device cuda: ";
  planner::MachineProfile m;
  m.hw.machine = name;
  m.hw.host_kernels = false;  // gpu = true
  const std::string upto = std::to_string(c.max_collective_bytes >> 20) + " MiB";
  m.source = "parabench calibrate --device cuda" + on + ": the project's GEMM (" + c.gemm + ") by shape, a device "
             "copy, its attention kernel, its memory-bound kernels by kind, " + c.backend + " collectives by size and group (nccl-tests' method)" +
             (c.launch_us > 0 ? ", an empty kernel's launch" : "") + "; every figure's own source in [machine.sources]";
  auto best = [](const std::vector<planner::GemmRate>& t) {
    double b = 0;
    for (const planner::GemmRate& g : t) b = std::max(b, g.gflops);
    return b / 1e3;
  };
  const double bf16_best = best(r.gemm_bf16), fp32_best = r.gemm_fp32.empty() ? 0 : best(r.gemm_fp32);
  m.gemm["bf16"] = r.gemm_bf16;
  m.sources["gemm.bf16"] = by + c.gemm + ", bf16 storage, " + c.timer + on;
  if (!r.gemm_fp32.empty()) {
    m.gemm["fp32"] = r.gemm_fp32;
    m.sources["gemm.fp32"] = by + c.gemm + ", fp32 storage, " + c.timer + on;
  }
  m.gemm_achievable_tflops_bf16 = bf16_best;
  m.sources["gemm_achievable_tflops_bf16"] = by + "the best of its bf16 GEMM table" + on;
  // The peaks: the datasheet's where the device is a built-in's part and the
  // measurement does not exceed it; otherwise the best measured.
  const planner::MachineProfile* sheet = planner::machine_for_device(c.device);
  auto peak = [&](const char* key, double datasheet, double measured, const std::string& what) {
    if (sheet && datasheet >= measured && datasheet > 0) {
      const auto src = sheet->sources.find(key);
      m.sources[key] = "the built-in profile " + sheet->name() + "'s (the device name " + c.device + " matches it)" +
                       (src != sheet->sources.end() ? ": " + src->second : std::string());
      return datasheet;
    }
    m.sources[key] = by + what + on + (sheet ? " (above the datasheet's, so the measured)" : " (no built-in profile "
                                                                                             "names this device)");
    return measured;
  };
  double attention_best = 0;
  for (const AttentionRate& a : r.attention) attention_best = std::max(attention_best, a.tflops());
  m.peak_tflops_bf16 = peak("peak_tflops_bf16", sheet ? sheet->peak_tflops_bf16 : 0,
                            std::max(bf16_best, attention_best),
                            "the best of its bf16 GEMM table and attention kernel");
  m.peak_tflops_fp32 = peak("peak_tflops_fp32", sheet ? sheet->peak_tflops_fp32 : 0,
                            fp32_best > 0 ? fp32_best : bf16_best,
                            fp32_best > 0 ? "the best of its fp32 GEMM table" : "the best of its bf16 GEMM table");
  m.peak_tflops_fp64 = peak("peak_tflops_fp64", sheet ? sheet->peak_tflops_fp64 : 0, m.peak_tflops_fp32,
                            "fp64 not measured: the fp32 peak");
  m.hw.gemm_efficiency = 1;
  m.sources["gemm_efficiency"] = "unused: the GEMM tables by shape give the rate (machine.gemm)";
  m.hw.mem_bw_GBps = r.copy_GBps;
  m.sources["mem_bw_GBps"] = by + "a device-to-device copy (DeviceOps::copy), bytes read and written per second, " +
                             c.timer + on;
  if (!r.attention.empty()) {
    const AttentionRate& a = r.attention.back();
    m.flash_attention_tflops_bf16 = a.tflops();
    char shape[160];
    std::snprintf(shape, sizeof shape, "B %d, T %d, %d heads of %d", a.shape.B, a.shape.T, a.shape.NH, a.shape.hs);
    m.sources["flash_attention_tflops_bf16"] =
        by + "the project's attention kernel (kernels/cuda/attention.cu: causal, probabilities kept; not "
             "FlashAttention) forward + backward, bf16, at " + shape + ", causal FLOPs (2 B NH T^2 hs forward, 2.5x "
             "backward), " + c.timer + on;
  }
  // Within a node: the groups of up to ranks_per_node ranks (the first ranks
  // are rank 0's node's, mpirun's placement by slot); across nodes: the
  // all_reduce of every rank, when they spanned nodes.
  for (const auto& [op, v] : fits) {
    for (const planner::CollectiveFit& x : v)
      if (x.group_size <= c.ranks_per_node) m.hw.collectives[op].push_back(x);
    if (m.hw.collectives.count(op))
      m.sources["collective." + op] = by + c.backend + " " + op + " by size (4 B .. " + upto + ") and group within a node, "
                                      "fp32, out of place, the slowest rank (nccl-tests' method), alpha-beta fit" + on;
  }
  const planner::CollectiveFit* intra = nullptr;
  for (const planner::CollectiveFit& x : ar->second)
    if (x.group_size <= c.ranks_per_node) intra = &x;
  require(intra != nullptr, "calibrate: no all_reduce within a node was measured (" +
                                std::to_string(c.ranks_per_node) + " rank per node): run 2 or more ranks per node");
  m.hw.bw_intra_GBps = intra->GBps;
  m.hw.latency_us = intra->alpha_us / planner::ring_steps("all_reduce", intra->group_size);
  const std::string at = c.backend + " all_reduce at " + std::to_string(intra->group_size) + " ranks";
  m.sources["bw_intra_GBps"] = by + at + ", bus bandwidth from the slope over 1 .. " + upto + on;
  m.sources["latency_us"] = by + at + ", the median time up to 4 KiB over its 2(n-1) ring steps" + on;
  // The measured alpha is a whole call's: NCCL's base per call is in it, and
  // one group size's alpha cannot tell the base from the steps. So it stays
  // spread over the steps (a group of another size plans the base scaled by
  // its steps) and no base is added on top.
  m.hw.latency_call_us = 0;
  m.sources["latency_call_us"] =
      "0: in latency_us and latency_inter_us (each a measured all_reduce's whole time per call up to 4 KiB, NCCL's "
      "base per call included, over its ring steps) and in the collective fits' alpha" + on;
  const planner::CollectiveFit& all = ar->second.back();
  if (c.nodes > 1 && all.group_size > c.ranks_per_node) {
    const std::string across = c.backend + " all_reduce at " + std::to_string(all.group_size) + " ranks on " +
                               std::to_string(c.nodes) + " nodes";
    m.hw.bw_inter_GBps = all.GBps;
    m.hw.latency_inter_us = all.alpha_us / planner::ring_steps("all_reduce", all.group_size);
    m.sources["bw_inter_GBps"] = by + across + ", bus bandwidth from the slope over 1 .. " + upto + on;
    m.sources["latency_inter_us"] = by + across + ", the median time up to 4 KiB over its 2(n-1) ring steps" + on;
  } else {
    m.hw.bw_inter_GBps = intra->GBps;
    m.hw.latency_inter_us = 0;
    m.sources["bw_inter_GBps"] = "not measured across nodes (one node): the intra-node figure; a plan across nodes "
                                 "on this profile is optimistic (calibrate under mpirun across nodes to measure it)";
    m.sources["latency_inter_us"] = "not measured across nodes (one node): 0, latency_us applies";
  }
  m.hw.memory_GB = c.memory_GB;
  m.sources["memory_GB"] = "the device's memory (cudaGetDeviceProperties totalGlobalMem on a GPU)" + on;
  m.ranks_per_node = c.ranks_per_node;
  m.sources["ranks_per_node"] = "the ranks of the calibration on rank 0's node (mpirun)" + on;
  m.wake_us = 0;
  m.sources["wake_us"] = "not measured on a device (informational): 0";
  m.kernel_launch_us = c.launch_us;
  if (c.launch_us > 0)
    m.sources["kernel_launch_us"] = by + "empty kernels back to back, first issue to the stream's end as the host "
                                    "sees it, per launch" + on;
  // The host's time per op (Hardware::host_op_us): this engine's own launch
  // where measured; a framework's dispatch is more.
  if (c.launch_us > 0) {
    m.hw.host_op_us = c.launch_us;
    m.sources["host_op_us"] =
        by + "an empty kernel's launch (kernel_launch_us: empty kernels back to back, first issue to the stream's end "
        "as the host sees it, per launch), this engine's CUDA launch as its host issues it" + on + ". A lower bound "
        "on a framework's per-op host time: PyTorch's dispatch adds a few us per op (the built-in profiles' 4 us, "
        "pytorch/pytorch issues 82793 and 41383)";
  } else {
    m.sources["host_op_us"] = "not measured (no figure; plans on this profile model no host time per op): no empty "
                              "kernel's launch was timed" + on;
  }
  // NCCL's plateau on an inter-node ring (Hardware::ring_plateau): the
  // measured latency is the whole call's.
  m.hw.ring_plateau = 1;
  m.sources["ring_plateau"] =
      c.nodes > 1
          ? "1 (no factor on top): latency_inter_us and the all_reduce fits are " + c.backend + "'s measured all_reduce "
            "across nodes (alpha the median time up to 4 KiB, the bandwidth the slope over 1 MiB and more), which "
            "hold whatever its ring's plateau costs; NCCL's model's factor (ncclTopoGetAlgoTime, 'Plateau effect of "
            "ring') is for its modelled latency, not a measured one" + on
          : "1 (no factor): not measured across nodes (one node" + on + "), as latency_inter_us; a measured "
            "all_reduce's fits (alpha up to 4 KiB, slope over 1 MiB and more) hold what NCCL's plateau models, so "
            "calibrate under mpirun across nodes measures it rather than a factor";
  // The memory-bound kernels by kind: the planner's bytes over the project's
  // kernels' time, where a kernel does what the planner counts.
  const KindRates& kr = r.kinds;
  const std::string rate_is = ": the planner's own byte count for them (suites/planner/model_cost.h) over their "
                              "device time, bf16, ";
  char kshape[512];
  if (kr.norm.measured()) {
    m.hw.norm_mem_bw_GBps = kr.norm.GBps();
    std::snprintf(kshape, sizeof kshape, "%d rows of %d: %.4g ms, %.4g MB (6 elements x 2 B per norm element, forward 2 "
                  "and backward 4: head_norm_traffic_bytes)", kr.shape.norm_N, kr.shape.C, kr.norm.seconds * 1e3,
                  kr.norm.bytes / 1e6);
    m.sources["norm_mem_bw_GBps"] = by + "the project's layernorm_forward + layernorm_backward (DeviceOps, kernels/cuda/"
                                    "layernorm.cu: one kernel forward, a dinp and a dweight/dbias kernel backward; not "
                                    "apex's or torch's LayerNorm)" + rate_is + kshape + ", " +
                                    c.timer + on;
  }
  if (kr.elementwise.measured()) {
    m.hw.elementwise_mem_bw_GBps = kr.elementwise.GBps();
    std::snprintf(kshape, sizeof kshape, "residual_forward over %d x %d (3 elements per element: %.4g ms), gelu_forward "
                  "and gelu_backward over %d x %d (2 and 4 elements per element, layer_traffic_bytes' GELU: %.4g + "
                  "%.4g ms), %.4g MB in %.4g ms", kr.shape.norm_N, kr.shape.C, kr.residual_s * 1e3, kr.shape.norm_N,
                  4 * kr.shape.C, kr.gelu_fwd_s * 1e3, kr.gelu_bwd_s * 1e3, kr.elementwise.bytes / 1e6,
                  kr.elementwise.seconds * 1e3);
    m.sources["elementwise_mem_bw_GBps"] = by + "the project's residual_forward, gelu_forward and gelu_backward "
                                           "(DeviceOps, kernels/cuda/elementwise.cu)" + rate_is + kshape + ", " + c.timer + on;
  }
  if (kr.loss.measured()) {
    m.hw.loss_mem_bw_GBps = kr.loss.GBps();
    std::snprintf(kshape, sizeof kshape, "%d rows of %d logits: %.4g ms, %.4g MB (4 elements x 2 B per logit, "
                  "head_traffic_bytes less its norm: the plan's default LossKernel::fused)", kr.shape.loss_N,
                  kr.shape.V, kr.loss.seconds * 1e3, kr.loss.bytes / 1e6);
    m.sources["loss_mem_bw_GBps"] = by + "the project's crossentropy_forward + crossentropy_backward (DeviceOps, "
                                    "kernels/cuda/crossentropy.cu: a fused softmax cross-entropy, each call's target "
                                    "check, a flag read back, in its time; not torch's or flash-attn's)" + rate_is + kshape + ", " + c.timer + on;
  }
  for (const auto& [key, kind, what] : {std::tuple<const char*, const KindMeasure*, const char*>{
                                            "norm_mem_bw_GBps", &kr.norm, "layernorm (0 rows)"},
                                        {"elementwise_mem_bw_GBps", &kr.elementwise, "residual add and GELU (0 rows)"},
                                        {"loss_mem_bw_GBps", &kr.loss, "cross-entropy (0 rows)"}})
    if (!kind->measured())
      m.sources[key] = std::string("not measured (no figure: mem_bw_GBps): the calibration ran no ") + what + on;
  m.sources["softmax_mem_bw_GBps"] =
      "not measured (no figure: mem_bw_GBps): the project's attention kernel fuses the scores' softmax "
      "(attention_forward / attention_backward), and no DeviceOps op is the scores' softmax alone to time";
  m.sources["eager_norm_mem_bw_GBps"] =
      "not measured (no figure: mem_bw_GBps): the planner counts an eager RMSNorm's op-by-op PyTorch traffic "
      "(upcast, pow, mean, rsqrt-mul, downcast, weight-mul), and the project has no such chain of ops to time";
  const OverlapSlowdown& o = r.overlap;
  if (o.ranks > 0) {
    char what[512];
    std::snprintf(what, sizeof what,
                  "a batch of %d bf16 GEMMs of %d x %d x %d (%s) timed alone and beside %d back-to-back non-blocking "
                  "%s all_reduces of %zu MiB fp32 (in place) on all %d ranks, issued before the batch on the "
                  "communicator's own stream (as a training rank overlaps its DP collectives)",
                  o.gemms, o.probe.m, o.probe.n, o.probe.k, c.gemm.c_str(), o.collectives, c.backend.c_str(),
                  o.probe.message_bytes >> 20, o.ranks);
    if (o.overlapped) {
      std::string reps;
      for (double x : o.repeats) {
        char one[32];
        std::snprintf(one, sizeof one, "%s%.3g", reps.empty() ? "" : ", ", x);
        reps += one;
      }
      m.hw.overlap_compute_slowdown = o.slowdown;
      m.sources["overlap_compute_slowdown"] =
          by + what + " and running past its end, " + c.timer + ": t_with / t_alone - 1 of the rank slowed most, "
          "the median of " + std::to_string(o.repeats.size()) + " repeats (" + reps + "), clamped at >= 0" + on;
    } else {
      m.sources["overlap_compute_slowdown"] =
          "not measured (no figure; plans on this profile take overlap as free): " + std::string(what) + ": " +
          o.why_not + on;
    }
  }
  const GemmSpread& sp = r.spread;
  if (sp.ranks > 0) {
    char what[640];
    std::snprintf(what, sizeof what,
                  "%d ranks' GEMM time per call (a bf16 GEMM of %d x %d x %d, %s, %s; each rank the median of %d "
                  "repeats of at least %.3g s after %.3g s of back-to-back GEMMs, every rank at once)",
                  sp.ranks, sp.probe.m, sp.probe.n, sp.probe.k, c.gemm.c_str(), c.timer.c_str(), sp.probe.repeats,
                  sp.probe.seconds, sp.probe.warmup_seconds);
    char range[200];
    std::snprintf(range, sizeof range, " (%.4g .. %.4g ms, median %.4g ms)", sp.min_s * 1e3, sp.max_s * 1e3,
                  sp.median_s * 1e3);
    if (sp.measured()) {
      if (!(sp.spread < 0.5)) {
        char v[64];
        std::snprintf(v, sizeof v, "%.4g", sp.spread);
        throw InputError("calibrate: measured machine.gemm_spread = " + std::string(v) + " from " + what + range +
                         ": 0.5 or more, outside [0, 0.5): a device that uneven is broken or busy, not a spread; not "
                         "written (find the slow GPU, then calibrate again)");
      }
      m.hw.gemm_spread = sp.spread;
      m.sources["gemm_spread"] =
          "measured by parabench calibrate --device cuda on " + std::to_string(sp.ranks) + " ranks of " + c.device +
          ", " + c.date + " (git " + c.git_rev + "): the sample standard deviation (n - 1) of " + what + " over their median" +
          range + "; " + std::to_string(sp.ranks) + " GPUs of one job, not a fleet: the slowest of a "
          "larger world is extrapolated from it (with n ranks the sd is itself uncertain by about 1 / sqrt(2 (n - "
          "1)) of it)";
    } else {
      m.sources["gemm_spread"] = "not measured (no figure; plans on this profile take its GPUs as equally fast): " +
                                 std::string(what) + ": " + sp.why_not + on;
    }
  }
  return m;
}

}  // namespace pb::calibrate
