// Single-thread throughput of the attention kernels at a GPT-2 small shape
// (T = 256..1024, C = 768, NH = 12), fp32: the BLAS-backed naive kernel and
// the blockwise (online-softmax) kernel. Counter "GFLOP" (a rate) counts the
// causal useful work: 2 T^2 C per batch forward (Q K^T and P V over the lower
// triangle) and twice that backward (dP, dQ, dK, dV).
#include <benchmark/benchmark.h>

#include <vector>

#include "kernels/cpu/ops.h"

namespace pb::kernels {
namespace {

constexpr int kC = 768, kNH = 12;

std::vector<float> filled(size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = float(int(i % 29) - 14) * 0.03f;
  return v;
}

void set_flops(benchmark::State& state, int Tn, double factor) {
  state.counters["GFLOP"] = benchmark::Counter(
      factor * 2.0 * Tn * double(Tn) * kC * 1e-9 * double(state.iterations()),
      benchmark::Counter::kIsRate);
}

void BM_AttentionNaive(benchmark::State& state) {
  const int Tn = int(state.range(0));
  set_blas_threads(1);
  auto qkv = filled(size_t(Tn) * 3 * kC), dout = filled(size_t(Tn) * kC);
  std::vector<float> out(size_t(Tn) * kC), att(size_t(kNH) * Tn * Tn), datt(att.size()),
      dqkv(qkv.size()), ws(attention_workspace_elems<float>(Tn, kC, kNH));
  for (auto _ : state) {
    attention_forward(out.data(), att.data(), qkv.data(), 1, Tn, kC, kNH, ws.data());
    attention_backward(dqkv.data(), datt.data(), dout.data(), qkv.data(), att.data(), 1, Tn, kC,
                       kNH, ws.data());
    benchmark::DoNotOptimize(dqkv.data());
  }
  set_flops(state, Tn, 3.0);
}

void BM_AttentionBlockwise(benchmark::State& state) {
  const int Tn = int(state.range(0));
  auto qkv = filled(size_t(Tn) * 3 * kC), dout = filled(size_t(Tn) * kC);
  std::vector<float> out(size_t(Tn) * kC), lse(size_t(kNH) * Tn), dqkv(qkv.size());
  for (auto _ : state) {
    attention_forward_blockwise(out.data(), lse.data(), qkv.data(), 1, Tn, kC, kNH, 64);
    attention_backward_blockwise(dqkv.data(), dout.data(), out.data(), qkv.data(), lse.data(), 1,
                                 Tn, kC, kNH, 64);
    benchmark::DoNotOptimize(dqkv.data());
  }
  set_flops(state, Tn, 3.0);
}

BENCHMARK(BM_AttentionNaive)->Arg(256)->Arg(1024)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_AttentionBlockwise)->Arg(256)->Arg(1024)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace pb::kernels
