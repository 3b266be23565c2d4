// Reference training step throughput: tokens/s and achieved model GFLOP/s
// (model_flops_per_step / step time), beside single-thread sgemm GFLOP/s on
// the same machine in the same run. Target (foundation issue): for a model
// with C >= 256 the fp32 step reaches >= 60% of the sgemm rate.
#include <benchmark/benchmark.h>

#include "kernels/cpu/peak.h"
#include "reference/trainer.h"

namespace pb {
namespace {

TrainConfig bench_config(const char* model, Precision p, int batch, int seq) {
  TrainConfig c;
  c.model = named_model(model);
  c.precision = p;
  c.batch = batch;
  c.seq = seq;
  c.steps = 1000000;
  c.threads = 1;
  return c;
}

void BM_ReferenceStep(benchmark::State& st, const char* model, Precision p, int batch, int seq) {
  auto cfg = bench_config(model, p, batch, seq);
  auto t = make_reference_trainer(cfg);
  t->step();  // warm-up: first touch of every buffer
  for (auto _ : st) benchmark::DoNotOptimize(t->step());
  double flops = model_flops_per_step(cfg.model, cfg.batch, cfg.seq);
  st.counters["tokens_per_s"] =
      benchmark::Counter(double(cfg.tokens_per_step()), benchmark::Counter::kIsIterationInvariantRate);
  st.counters["GFLOPs"] =
      benchmark::Counter(flops / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_Sgemm1T(benchmark::State& st) {
  double g = 0;
  for (auto _ : st) g = kernels::measure_sgemm_gflops(int(st.range(0)), 0.5);
  st.counters["GFLOPs"] = g;
}

BENCHMARK_CAPTURE(BM_ReferenceStep, medium_fp32, "medium", Precision::fp32, 8, 128)
    ->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK_CAPTURE(BM_ReferenceStep, medium_bf16, "medium", Precision::bf16_mixed, 8, 128)
    ->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK_CAPTURE(BM_ReferenceStep, medium_fp64, "medium", Precision::fp64, 8, 128)
    ->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK_CAPTURE(BM_ReferenceStep, wide_fp32, "wide", Precision::fp32, 8, 128)
    ->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK_CAPTURE(BM_ReferenceStep, small_fp32, "small", Precision::fp32, 8, 64)
    ->Unit(benchmark::kMillisecond)->MinTime(1.0);
BENCHMARK(BM_Sgemm1T)->Arg(512)->Arg(1024)->Iterations(1)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace pb

BENCHMARK_MAIN();
