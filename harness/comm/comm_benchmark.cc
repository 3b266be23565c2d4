// Google Benchmark microbenchmarks of the local backend's collectives, and the
// single-core memcpy bandwidth they are compared with.
// Definitions: memcpy bandwidth = bytes copied / time (one thread). A
// collective's time is measured on rank 0 from a barrier to its return (every
// collective ends with all ranks done); busbw = S/t * factor with nccl-tests'
// size S and bus factor (all_reduce 2(n-1)/n; reduce_scatter, all_gather,
// all_to_all (n-1)/n; broadcast 1), reported as the busbw counter in bytes/s.
#include <benchmark/benchmark.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <vector>

#include "harness/comm/runner.h"

namespace pb {
namespace {

void BM_Memcpy(benchmark::State& state) {
  const size_t bytes = size_t(state.range(0));
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(bytes));
}

enum class Op { all_reduce, all_reduce_in_place, reduce_scatter, all_gather, broadcast, all_to_all };

double bus_factor(Op op, int n) {
  switch (op) {
    case Op::all_reduce:
    case Op::all_reduce_in_place: return 2.0 * (n - 1) / n;
    case Op::broadcast: return 1.0;
    default: return double(n - 1) / n;
  }
}

// S bytes in nccl-tests' convention (all_gather: output, reduce_scatter: input).
template <Op op>
void BM_Local(benchmark::State& state) {
  const int n = int(state.range(0));
  const size_t bytes = size_t(state.range(1)), count = bytes / sizeof(float);
  std::atomic<bool> stop{false};
  run_local(n, [&](Communicator& c) {
    std::vector<float> send(count, 1.0f), recv(count, 0.0f);
    auto once = [&] {
      switch (op) {
        case Op::all_reduce: c.all_reduce(send.data(), recv.data(), count, DType::f32); break;
        case Op::all_reduce_in_place: c.all_reduce(send.data(), send.data(), count, DType::f32); break;
        case Op::reduce_scatter: c.reduce_scatter(send.data(), recv.data(), count / size_t(n), DType::f32); break;
        case Op::all_gather: c.all_gather(send.data(), recv.data(), count / size_t(n), DType::f32); break;
        case Op::broadcast: c.broadcast(send.data(), recv.data(), count, DType::f32, 0); break;
        case Op::all_to_all: c.all_to_all(send.data(), recv.data(), count / size_t(n), DType::f32); break;
      }
    };
    once();  // warm-up: pages touched, stream idle
    if (c.rank() != 0) {
      for (;;) {
        c.barrier();
        if (stop.load()) return;
        once();
      }
    }
    for (auto _ : state) {
      c.barrier();
      auto t0 = std::chrono::steady_clock::now();
      once();
      state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    stop.store(true);
    c.barrier();
  });
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(bytes));
  state.counters["busbw"] = benchmark::Counter(double(bytes) * bus_factor(op, n),
                                               benchmark::Counter::kIsIterationInvariantRate,
                                               benchmark::Counter::kIs1024);
}

// 256 MiB is beyond every cache (STREAM's rule: arrays >= 4x the 32 MiB L3):
// memcpy there is the machine's single-core memory bandwidth.
void Sizes(benchmark::internal::Benchmark* b) {
  for (int64_t s : {64 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20}) b->Arg(s);
}
void WorldSizes(benchmark::internal::Benchmark* b) {
  for (int n : {2, 4})
    for (int64_t s : {64 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20}) b->Args({n, s});
  b->Args({2, int64_t(256) << 20});
}

BENCHMARK(BM_Memcpy)->Apply(Sizes)->UseRealTime();
BENCHMARK(BM_Local<Op::all_reduce>)->Name("BM_LocalAllReduce")->Apply(WorldSizes)->UseManualTime();
BENCHMARK(BM_Local<Op::all_reduce_in_place>)->Name("BM_LocalAllReduceInPlace")->Apply(WorldSizes)->UseManualTime();
BENCHMARK(BM_Local<Op::reduce_scatter>)->Name("BM_LocalReduceScatter")->Apply(WorldSizes)->UseManualTime();
BENCHMARK(BM_Local<Op::all_gather>)->Name("BM_LocalAllGather")->Apply(WorldSizes)->UseManualTime();
BENCHMARK(BM_Local<Op::broadcast>)->Name("BM_LocalBroadcast")->Apply(WorldSizes)->UseManualTime();
BENCHMARK(BM_Local<Op::all_to_all>)->Name("BM_LocalAllToAll")->Apply(WorldSizes)->UseManualTime();

}  // namespace
}  // namespace pb

BENCHMARK_MAIN();
