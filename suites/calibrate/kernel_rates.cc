// Compute rates at a training shape (see kernel_rates.h).
#include "suites/calibrate/kernel_rates.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <tuple>
#include <vector>

#include "harness/comm/runner.h"
#include "harness/memory.h"
#include "harness/status.h"
#include "impl/context_parallel/attention.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/peak.h"
#include "suites/calibrate/timing.h"
#include "suites/planner/model_cost.h"
#include "suites/planner/planner.h"

namespace pb::calibrate {
namespace {
using clock = std::chrono::steady_clock;
}  // namespace

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
  r.buffer_s = upper_median(passes);
  r.buffer_bytes = 0;
  for (int64_t u : units) r.buffer_bytes += 6.0 * sizeof(float) * double(u);
  if (!(sink >= 0)) r.buffer_s = 0;
  return r;
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

}  // namespace pb::calibrate
