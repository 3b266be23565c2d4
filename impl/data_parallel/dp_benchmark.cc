// Data-parallel step benchmarks on the local backend: step time and tokens/s
// per strategy and world size, and for DDP the share of all-reduce time hidden
// behind backward: 1 - exposed(overlap on) / exposed(overlap off), where
// exposed = time a rank is blocked in the dp group's collectives per step
// (the slowest rank's). Warm-up steps are excluded.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <mutex>

#include "harness/comm/runner.h"
#include "impl/data_parallel/dp_rank.h"

namespace pb::dp {
namespace {

struct Measured {
  double step_s = 0, exposed_s = 0;
};

Measured measure(Shard shard, int world, bool overlap, int steps, int warmup,
                 WorldOptions::Progress progress = WorldOptions::Progress::automatic) {
  TrainConfig cfg;
  cfg.model = named_model("small");
  cfg.seq = 64;
  cfg.batch = 4 * world;
  cfg.steps = steps + warmup;
  DpOptions o;
  o.dp = world;
  o.shard = shard;
  o.overlap = overlap;
  o.bucket_bytes = 256 << 10;  // several buckets for the small model
  Measured out;
  std::mutex mu;
  WorldOptions wo;
  wo.progress = progress;
  run_local(world, [&](Communicator& c) {
    DpRank<float> r(cfg, o, c);
    for (int i = 0; i < warmup; ++i) r.step();
    double blocked0 = c.log().by_group("dp").blocked_s, t = 0;
    for (int i = 0; i < steps; ++i) t += r.step().seconds;
    double blocked = c.log().by_group("dp").blocked_s - blocked0;
    std::lock_guard lk(mu);
    out.step_s = std::max(out.step_s, t / steps);
    out.exposed_s = std::max(out.exposed_s, blocked / steps);
  }, wo);
  return out;
}

// On progress threads, whatever the cores: with deferred progress (the
// default where ranks and their threads outnumber the cores) the buckets are
// reduced at the wait and nothing is hidden.
void BM_DdpOverlap(benchmark::State& st) {
  const int world = int(st.range(0));
  Measured off, on;
  for (auto _ : st) {
    off = measure(Shard::none, world, false, 6, 2, WorldOptions::Progress::thread);
    on = measure(Shard::none, world, true, 6, 2, WorldOptions::Progress::thread);
  }
  st.counters["step_ms_off"] = off.step_s * 1e3;
  st.counters["step_ms_on"] = on.step_s * 1e3;
  st.counters["exposed_ms_off"] = off.exposed_s * 1e3;
  st.counters["exposed_ms_on"] = on.exposed_s * 1e3;
  st.counters["hidden_share"] = off.exposed_s > 0 ? 1.0 - on.exposed_s / off.exposed_s : 0.0;
}

void BM_DpStep(benchmark::State& st, Shard shard) {
  const int world = int(st.range(0));
  Measured m;
  for (auto _ : st) m = measure(shard, world, true, 6, 2);
  st.counters["step_ms"] = m.step_s * 1e3;
  st.counters["tokens_per_s"] = 4.0 * world * 64 / m.step_s;
  st.counters["exposed_comm_ms"] = m.exposed_s * 1e3;
}

BENCHMARK(BM_DdpOverlap)->Arg(2)->Arg(4)->Iterations(1)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_DpStep, ddp, Shard::none)->Arg(1)->Arg(2)->Arg(4)->Iterations(1)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_DpStep, zero1, Shard::zero1)->Arg(2)->Arg(4)->Iterations(1)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_DpStep, zero2, Shard::zero2)->Arg(2)->Arg(4)->Iterations(1)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_DpStep, zero3, Shard::zero3)->Arg(2)->Arg(4)->Iterations(1)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace pb::dp

BENCHMARK_MAIN();
