// Single-thread GEMM throughput of the linear layer at GPT shapes (C = 256 and
// 768, N = B*T = 1024..4096, OC = C (attn proj), 3C (qkv) and 4C (MLP up)),
// forward (one sgemm) and backward (dinp + dweight sgemms), fp32 and bf16.
// Counter "GFLOP" = 2 N C OC per GEMM as a rate (kIsRate: shown as GFLOP/s);
// bias add and bf16 conversion are counted as time, not flops.
#include <benchmark/benchmark.h>

#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/peak.h"

namespace pb::kernels {
namespace {

template <class T>
std::vector<T> filled(size_t n, float scale) {
  std::vector<T> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = T(float(int(i % 23) - 11) * scale);
  return v;
}

template <class T>
void BM_MatmulForward(benchmark::State& state) {
  const int N = int(state.range(0)), C = int(state.range(1)), OC = int(state.range(2));
  set_blas_threads(1);
  auto x = filled<T>(size_t(N) * C, 0.01f), w = filled<T>(size_t(OC) * C, 0.02f),
       b = filled<T>(size_t(OC), 0.1f);
  std::vector<T> out(size_t(N) * OC);
  std::vector<float> ws(matmul_workspace_floats<T>(N, C, OC));
  for (auto _ : state) {
    matmul_forward(out.data(), x.data(), w.data(), b.data(), N, C, OC, ws.data());
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP"] = benchmark::Counter(2.0 * N * C * OC * 1e-9 * double(state.iterations()),
                                                 benchmark::Counter::kIsRate);
}

template <class T>
void BM_MatmulBackward(benchmark::State& state) {
  const int N = int(state.range(0)), C = int(state.range(1)), OC = int(state.range(2));
  set_blas_threads(1);
  auto x = filled<T>(size_t(N) * C, 0.01f), w = filled<T>(size_t(OC) * C, 0.02f),
       dy = filled<T>(size_t(N) * OC, 0.001f);
  std::vector<T> dx(size_t(N) * C), dw(size_t(OC) * C), db(static_cast<size_t>(OC));
  std::vector<float> ws(matmul_workspace_floats<T>(N, C, OC));
  for (auto _ : state) {
    matmul_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), N, C, OC,
                    ws.data());
    benchmark::DoNotOptimize(dx.data());
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP"] = benchmark::Counter(4.0 * N * C * OC * 1e-9 * double(state.iterations()),
                                                 benchmark::Counter::kIsRate);
}

void GptShapes(benchmark::internal::Benchmark* b) {
  for (int C : {256, 768})
    for (int N : {1024, 4096})
      for (int mult : {1, 3, 4}) b->Args({N, C, mult * C});
  b->ArgNames({"N", "C", "OC"})->Unit(benchmark::kMillisecond);
}

BENCHMARK(BM_MatmulForward<float>)->Apply(GptShapes);
BENCHMARK(BM_MatmulBackward<float>)->Apply(GptShapes);
BENCHMARK(BM_MatmulForward<bf16>)->Apply(GptShapes);

// The library's peak figure (square sgemm) for the same report.
void BM_SgemmPeak(benchmark::State& state) {
  double g = 0;
  for (auto _ : state) g = measure_sgemm_gflops(int(state.range(0)), 0.5);
  state.counters["GFLOP/s"] = g;
}
BENCHMARK(BM_SgemmPeak)->Arg(512)->Arg(1024)->Iterations(1)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace pb::kernels

BENCHMARK_MAIN();
