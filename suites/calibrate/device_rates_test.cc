// calibrate --device cuda's measurements and profile on the CPU stand-in
// device (reference/device_testing.h, docs/gpu.md): the same code a GPU runs,
// timed through the seam's timeline, then written as a profile
// (planner::machine_toml) and read back as `plan --machine FILE` reads it.
#include "suites/calibrate/device_rates.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <tuple>

#include "harness/status.h"
#include "reference/device_testing.h"

namespace pb::calibrate {
namespace {

DeviceGrid tiny_grid() {
  DeviceGrid g;
  g.gemm_m = {8, 32};
  g.gemm_nk = {16, 64};
  g.copy_bytes = size_t(1) << 20;
  g.attention = {{1, 16, 2, 8}, {1, 32, 2, 16}};
  g.kinds.norm_N = 64;
  g.kinds.C = 32;
  g.kinds.loss_N = 16;
  g.kinds.V = 100;
  g.seconds = 0.002;
  return g;
}

bool close(double a, double b) { return std::fabs(a - b) <= 1e-5 * std::fabs(b); }

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

OverlapProbe tiny_probe() {
  OverlapProbe p;
  p.m = p.n = p.k = 64;
  p.message_bytes = size_t(1) << 20;
  p.seconds = 0.02;
  return p;
}

// measure_overlap_slowdown on every rank of `world`, each with a stand-in
// device of its own: rank 0's result (every rank's is the same).
OverlapSlowdown overlap_on(World& world, const OverlapProbe& probe = tiny_probe()) {
  OverlapSlowdown r;
  run_ranks(world, [&](Communicator& comm) {
    testing::CountingMemory memory;
    testing::StandInOps<bf16> ops;
    OverlapSlowdown mine = measure_overlap_slowdown(comm, ops, memory, probe, nullptr);
    EXPECT_EQ(memory.live(), 0u) << "every device buffer freed";
    if (comm.rank() == 0) r = mine;
  });
  return r;
}

SpreadProbe tiny_spread() {
  SpreadProbe p;
  p.m = p.n = p.k = 64;
  p.warmup_seconds = 0.01;  // 3 s on a GPU (its clocks settling); nothing to settle here
  p.seconds = 0.005;
  p.repeats = 5;
  return p;
}

// measure_gemm_spread on every rank of `world`, each with a stand-in device
// of its own: every rank's result, by rank.
std::vector<GemmSpread> spread_on(World& world, const SpreadProbe& probe = tiny_spread()) {
  std::vector<GemmSpread> r(size_t(world.size()));
  run_ranks(world, [&](Communicator& comm) {
    testing::CountingMemory memory;
    testing::StandInOps<bf16> ops;
    r[size_t(comm.rank())] = measure_gemm_spread(comm, ops, memory, probe, nullptr);
    EXPECT_EQ(memory.live(), 0u) << "every device buffer freed";
  });
  return r;
}

// Whether a profile's text gives figure `key` (a number; its source is a string).
bool figure_written(const std::string& text, const std::string& key) {
  const std::string line = "\n" + key + " = ";
  for (size_t at = text.find(line); at != std::string::npos; at = text.find(line, at + 1))
    if (text[at + line.size()] != '"') return true;
  return false;
}

// device_profile wrote no `key` figure (0, nothing in the TOML) and a source
// saying it was not measured and holding `why`.
void expect_not_measured(const planner::MachineProfile& m, double figure, const std::string& key,
                         const std::string& why) {
  EXPECT_EQ(figure, 0) << key;
  ASSERT_TRUE(m.sources.count(key)) << key;
  const std::string& src = m.sources.at(key);
  EXPECT_EQ(src.rfind("not measured", 0), 0u) << src;
  EXPECT_NE(src.find(why), std::string::npos) << src;
  EXPECT_FALSE(figure_written(planner::machine_toml(m), key)) << key << ": no figure written";
}

struct Measured {
  DeviceRates rates;
  std::map<std::string, std::vector<planner::CollectiveFit>> fits;
  // The GEMM's spread over 2 ranks, kept out of `rates`: the stand-in's
  // ranks are threads on a shared host, whose load can make one twice as
  // slow as the other, a spread the profile refuses (0.5 or more).
  GemmSpread spread;
};

// One measurement for every test here (a few seconds on this machine, most
// of it the collectives).
const Measured& measured() {
  static const Measured m = [] {
    Measured x;
    testing::CountingMemory memory;
    testing::StandInOps<bf16> ops16;
    testing::StandInOps<float> ops32;
    x.rates = measure_device_rates(ops16, ops32, memory, tiny_grid());
    EXPECT_EQ(memory.live(), 0u) << "every device buffer freed";
    WorldOptions wo;
    wo.size = 3;
    auto world = make_local_world(wo);
    CollectiveSweep sweep;
    sweep.groups = group_sizes(3);
    // 1, 4, 16 and 64 MiB for the slope (rounded down to whole elements per
    // rank): on 2 shared cores the smaller sizes alone let a descheduled
    // rank's milliseconds outweigh the bytes' (the fit then fails).
    sweep.max_bytes = size_t(64) << 20;
    sweep.iters = 4;
    sweep.check = 0;  // the driver's validation is collectives_driver_test's; here only the timings matter
    sweep.warmup = 1;
    // Three threads on a shared machine: a slow moment can leave a fit whose
    // times do not grow with size; measured again with twice the calls, as
    // the CPU calibration does, before its error stands.
    for (int attempt = 0;; ++attempt, sweep.iters *= 2) {
      try {
        x.fits = measure_collective_fits(*world, sweep);
        break;
      } catch (const InputError& e) {
        if (attempt == 2) throw;
        std::fprintf(stderr, "measured again: %s\n", e.what());
      }
    }
    // Compute beside a collective: 2 ranks of the local backend with progress
    // threads (non-blocking collectives run while the rank computes, as on a
    // GPU's communication stream), a small GEMM and message.
    WorldOptions overlap_world;
    overlap_world.size = 2;
    overlap_world.progress = WorldOptions::Progress::thread;
    auto two = make_local_world(overlap_world);
    x.rates.overlap = overlap_on(*two);
    // The GEMM's spread over 2 ranks (the local backend's threads).
    WorldOptions spread_world;
    spread_world.size = 2;
    auto pair = make_local_world(spread_world);
    x.spread = spread_on(*pair).at(0);
    return x;
  }();
  return m;
}

DeviceContext stand_in_context() {
  DeviceContext c;
  c.device = "stand-in device";
  c.date = "2026-11-27T06:00:00Z";
  c.git_rev = "test";
  c.memory_GB = 1.5;
  c.ranks_per_node = 3;
  c.gemm = "the stand-in's matmul_forward (the CPU kernel)";
  c.timer = "the host clock (the stand-in's timeline)";
  c.backend = "local-backend";
  c.max_collective_bytes = size_t(64) << 20;
  return c;
}

TEST(DeviceRates, TheGridIsTimedOnTheDevice) {
  const DeviceRates& r = measured().rates;
  ASSERT_EQ(r.gemm_bf16.size(), 8u);
  ASSERT_EQ(r.gemm_fp32.size(), 8u);
  for (const auto* t : {&r.gemm_bf16, &r.gemm_fp32})
    for (const planner::GemmRate& g : *t) EXPECT_TRUE(std::isfinite(g.gflops) && g.gflops > 0) << g.m << g.n << g.k;
  EXPECT_EQ(r.gemm_bf16.front().m, 8);
  EXPECT_EQ(r.gemm_bf16.back().k, 64);
  EXPECT_TRUE(std::isfinite(r.copy_GBps) && r.copy_GBps > 0);
  ASSERT_EQ(r.attention.size(), 2u);
  for (const AttentionRate& a : r.attention) {
    EXPECT_GT(a.fwd_s, 0);
    EXPECT_GT(a.bwd_s, 0);
    EXPECT_TRUE(std::isfinite(a.tflops()) && a.tflops() > 0);
  }
}

// The memory-bound kinds: each timed, its bytes the planner's own count for
// the kernels at the tiny grid's shape (bf16, 2 B per element).
TEST(DeviceRates, TheMemoryBoundKindsAreTheKernelsAtThePlannersBytes) {
  const KindRates& k = measured().rates.kinds;
  EXPECT_EQ(k.shape.norm_N, 64);
  EXPECT_EQ(k.shape.V, 100);
  const double N = 64, C = 32, LN = 16, V = 100;
  // Norms: forward 2 + backward 4 elements per norm element.
  EXPECT_DOUBLE_EQ(k.norm.bytes, 6 * N * C * 2);
  // Elementwise: a residual add (3 per element) over N x C, the GELU over
  // N x 4C forward (2) and backward (4).
  EXPECT_DOUBLE_EQ(k.elementwise.bytes, (3 * N * C + (2 + 4) * N * 4 * C) * 2);
  // Loss: the fused cross-entropy, 4 elements per logit.
  EXPECT_DOUBLE_EQ(k.loss.bytes, 4 * LN * V * 2);
  for (const KindMeasure* m : {&k.norm, &k.elementwise, &k.loss}) {
    EXPECT_TRUE(m->measured());
    EXPECT_GT(m->seconds, 0);
    EXPECT_TRUE(std::isfinite(m->GBps()) && m->GBps() > 0) << m->GBps();
    EXPECT_DOUBLE_EQ(m->GBps(), m->bytes / m->seconds / 1e9);
  }
  EXPECT_GT(k.residual_s, 0);
  EXPECT_GT(k.gelu_fwd_s, 0);
  EXPECT_GT(k.gelu_bwd_s, 0);
  EXPECT_DOUBLE_EQ(k.elementwise.seconds, k.residual_s + k.gelu_fwd_s + k.gelu_bwd_s);
  // A time of 0 is not a rate of 0: the check of written figures refuses it.
  KindMeasure zero;
  zero.bytes = 1;
  EXPECT_TRUE(std::isinf(zero.GBps()));
  EXPECT_FALSE(KindMeasure{}.measured());
}

// A kind not run (0 rows): no figure, a source saying so.
TEST(DeviceRates, AKindNotRunHasNoFigure) {
  testing::CountingMemory memory;
  testing::StandInOps<bf16> ops16;
  testing::StandInOps<float> ops32;
  DeviceGrid g = tiny_grid();
  g.gemm_m = {8};
  g.gemm_nk = {16};
  g.attention.clear();
  g.kinds.loss_N = 0;
  DeviceRates r = measure_device_rates(ops16, ops32, memory, g);
  EXPECT_EQ(memory.live(), 0u);
  EXPECT_FALSE(r.kinds.loss.measured());
  EXPECT_TRUE(r.kinds.norm.measured());
  const planner::MachineProfile m = device_profile("x", r, measured().fits, stand_in_context());
  expect_not_measured(m, m.hw.loss_mem_bw_GBps, "loss_mem_bw_GBps", "the calibration ran no cross-entropy");
  EXPECT_GT(m.hw.norm_mem_bw_GBps, 0);
  EXPECT_TRUE(figure_written(planner::machine_toml(m), "norm_mem_bw_GBps"));
}

TEST(DeviceRates, ComputeBesideACollectiveIsTimedOnEveryRank) {
  const OverlapSlowdown& o = measured().rates.overlap;
  EXPECT_EQ(o.ranks, 2);
  ASSERT_TRUE(o.overlapped) << "progress threads run the all_reduces beside the GEMMs: " << o.why_not;
  // No magnitude on 2 shared cores (a progress thread takes a core from the
  // GEMMs here); a finite figure >= 0 from finite repeats.
  EXPECT_TRUE(std::isfinite(o.slowdown) && o.slowdown >= 0) << o.slowdown;
  ASSERT_EQ(o.repeats.size(), 3u);
  for (double x : o.repeats) EXPECT_TRUE(std::isfinite(x) && x > -1) << x;
  std::vector<double> sorted = o.repeats;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_DOUBLE_EQ(o.slowdown, std::max(0.0, sorted[1])) << "the median repeat, clamped";
  EXPECT_GT(o.gemms, 0);
  EXPECT_GE(o.collectives, 3);
  EXPECT_GT(o.gemm_alone_s, 0);
  EXPECT_GT(o.gemm_with_s, 0);
  EXPECT_GT(o.all_reduce_s, 0);
  EXPECT_TRUE(o.why_not.empty());
}

// Deferred progress runs a non-blocking collective only when its rank waits
// for it: nothing runs beside the GEMMs, and the probe says so, no figure.
TEST(DeviceRates, ABackendThatDoesNotOverlapGivesNoFigure) {
  WorldOptions wo;
  wo.size = 2;
  wo.progress = WorldOptions::Progress::deferred;
  auto world = make_local_world(wo);
  OverlapProbe quick = tiny_probe();  // its batches' length changes nothing here
  quick.seconds = 0.002;
  quick.message_bytes = size_t(64) << 10;
  OverlapSlowdown o = overlap_on(*world, quick);
  EXPECT_EQ(o.ranks, 2);
  EXPECT_FALSE(o.overlapped);
  EXPECT_EQ(o.slowdown, 0);
  EXPECT_TRUE(o.repeats.empty());
  EXPECT_NE(o.why_not.find("nothing overlapped to measure"), std::string::npos) << o.why_not;
  DeviceRates r = measured().rates;
  r.overlap = o;
  const planner::MachineProfile m = device_profile("x", r, measured().fits, stand_in_context());
  expect_not_measured(m, m.hw.overlap_compute_slowdown, "overlap_compute_slowdown",
                      "local backend runs them when waited on");
  // One rank: no collective to overlap.
  WorldOptions one;
  auto alone = make_local_world(one);
  EXPECT_THROW(overlap_on(*alone), RankError);
}

TEST(DeviceRates, TheGemmSpreadIsEveryRanksTimeGathered) {
  WorldOptions wo;
  wo.size = 3;  // an odd count: the median is the middle rank's time
  auto world = make_local_world(wo);
  const std::vector<GemmSpread> all = spread_on(*world);
  ASSERT_EQ(all.size(), 3u);
  const GemmSpread& s = all[0];
  EXPECT_EQ(s.ranks, 3);
  EXPECT_TRUE(s.measured()) << s.why_not;
  EXPECT_TRUE(s.why_not.empty());
  EXPECT_EQ(s.probe.m, 64);
  EXPECT_EQ(s.probe.repeats, 5);
  ASSERT_EQ(s.per_call_s.size(), 3u);
  for (double t : s.per_call_s) EXPECT_TRUE(std::isfinite(t) && t > 0) << t;
  std::vector<double> sorted = s.per_call_s;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(s.min_s, sorted[0]);
  EXPECT_EQ(s.median_s, sorted[1]);
  EXPECT_EQ(s.max_s, sorted[2]);
  // The figure: the sample sd (n - 1) over the median, finite and >= 0.
  const double mean = (sorted[0] + sorted[1] + sorted[2]) / 3;
  double ss = 0;
  for (double t : sorted) ss += (t - mean) * (t - mean);
  EXPECT_TRUE(std::isfinite(s.spread) && s.spread >= 0) << s.spread;
  EXPECT_NEAR(s.spread, std::sqrt(ss / 2) / sorted[1], 1e-12 * (1 + s.spread));
  // Every rank returns the same result, bit for bit.
  for (size_t r = 1; r < all.size(); ++r) {
    EXPECT_EQ(all[r].ranks, s.ranks) << r;
    EXPECT_EQ(all[r].per_call_s, s.per_call_s) << r;
    EXPECT_EQ(all[r].spread, s.spread) << r;
    EXPECT_EQ(all[r].min_s, s.min_s) << r;
    EXPECT_EQ(all[r].median_s, s.median_s) << r;
    EXPECT_EQ(all[r].max_s, s.max_s) << r;
    EXPECT_EQ(all[r].why_not, s.why_not) << r;
  }
  // Two ranks (the fixture's): the median is their mean, the sd |a - b| / sqrt 2.
  const GemmSpread& two = measured().spread;
  ASSERT_EQ(two.ranks, 2);
  ASSERT_EQ(two.per_call_s.size(), 2u);
  const double a = two.per_call_s[0], b = two.per_call_s[1];
  EXPECT_DOUBLE_EQ(two.median_s, (a + b) / 2);
  EXPECT_NEAR(two.spread, std::fabs(a - b) / std::sqrt(2.0) / ((a + b) / 2), 1e-12 * (1 + two.spread));
  // A probe without time: refused.
  SpreadProbe none = tiny_spread();
  none.seconds = 0;
  EXPECT_THROW(spread_on(*world, none), RankError);
}

TEST(DeviceRates, OneRankGivesNoSpread) {
  WorldOptions one;
  auto world = make_local_world(one);
  const GemmSpread s = spread_on(*world).at(0);
  EXPECT_EQ(s.ranks, 1);
  EXPECT_FALSE(s.measured());
  EXPECT_EQ(s.spread, 0);
  ASSERT_EQ(s.per_call_s.size(), 1u);
  EXPECT_GT(s.per_call_s[0], 0) << "its own time, still measured";
  EXPECT_NE(s.why_not.find("one rank"), std::string::npos) << s.why_not;
  DeviceRates r = measured().rates;
  r.spread = s;
  const planner::MachineProfile m = device_profile("x", r, measured().fits, stand_in_context());
  expect_not_measured(m, m.hw.gemm_spread, "gemm_spread", "one rank: no other GPU to differ from");
  // Not measured at all (ranks 0): neither figure nor source.
  r.spread = GemmSpread{};
  const planner::MachineProfile bare = device_profile("x", r, measured().fits, stand_in_context());
  EXPECT_FALSE(bare.sources.count("gemm_spread"));
  EXPECT_EQ(planner::machine_toml(bare).find("gemm_spread"), std::string::npos);
}

TEST(DeviceRates, ASpreadOfHalfOrMoreIsRefusedNamed) {
  DeviceRates r = measured().rates;
  r.spread = GemmSpread{};
  r.spread.ranks = 2;
  r.spread.per_call_s = {1e-3, 3e-3};
  r.spread.min_s = 1e-3;
  r.spread.max_s = 3e-3;
  r.spread.median_s = 2e-3;
  r.spread.spread = 2e-3 / std::sqrt(2.0) / 2e-3;  // 0.707
  try {
    device_profile("x", r, measured().fits, stand_in_context());
    ADD_FAILURE() << "a spread of 0.707 was written";
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("machine.gemm_spread = 0.7071"), std::string::npos) << what;
    EXPECT_NE(what.find("outside [0, 0.5)"), std::string::npos) << what;
  }
  r.spread.spread = 0.5;  // the bound itself: out
  EXPECT_THROW(device_profile("x", r, measured().fits, stand_in_context()), InputError);
  // Just under it: written, and read back as plan --machine reads it.
  r.spread.spread = 0.49;
  const planner::MachineProfile m = device_profile("x", r, measured().fits, stand_in_context());
  EXPECT_DOUBLE_EQ(m.hw.gemm_spread, 0.49);
  const std::string path =
      (std::filesystem::temp_directory_path() / ("pb_spread_" + std::to_string(::getpid()) + ".toml")).string();
  {
    std::ofstream(path) << planner::machine_toml(m);
  }
  const planner::MachineProfile back = planner::load_machine(path);
  std::filesystem::remove(path);
  EXPECT_DOUBLE_EQ(back.hw.gemm_spread, 0.49);
  EXPECT_EQ(back.sources.at("gemm_spread"), m.sources.at("gemm_spread"));
}

TEST(DeviceRates, CollectivesAreFitByOpAndGroup) {
  const auto& fits = measured().fits;
  ASSERT_EQ(fits.size(), 3u);
  for (const char* op : {"all_reduce", "reduce_scatter", "all_gather"}) {
    ASSERT_TRUE(fits.count(op)) << op;
    const auto& v = fits.at(op);
    ASSERT_EQ(v.size(), 2u) << op;
    EXPECT_EQ(v[0].group_size, 2);
    EXPECT_EQ(v[1].group_size, 3);
    for (const planner::CollectiveFit& f : v) {
      EXPECT_GT(f.GBps, 0) << op;
      EXPECT_GE(f.alpha_us, 0) << op;
    }
  }
  EXPECT_EQ(group_sizes(8), (std::vector<int>{2, 4, 8}));
  EXPECT_EQ(group_sizes(6), (std::vector<int>{2, 4, 6}));
  EXPECT_EQ(group_sizes(1), (std::vector<int>{}));
}

TEST(DeviceRates, TheProfileIsWrittenAndReadBackWithEverySource) {
  Measured x = measured();
  DeviceContext c = stand_in_context();
  c.launch_us = 4.25;  // what kernels/cuda's measure_launch gives on a GPU (none here)
  x.rates.spread = x.spread;
  if (x.spread.spread >= 0.5) {
    // A loaded host made one stand-in rank about twice as slow as the
    // other: refused, named (ASpreadOfHalfOrMoreIsRefusedNamed has the rest);
    // the profile below is then written without it.
    try {
      device_profile("stand-in-cal", x.rates, x.fits, c);
      ADD_FAILURE() << "a spread of " << x.spread.spread << " was written";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("machine.gemm_spread = "), std::string::npos) << e.what();
    }
    std::fprintf(stderr, "the stand-in's ranks measured a spread of %g (a loaded host): profile without it\n",
                 x.spread.spread);
    x.rates.spread.spread = 0.25;  // still 2 ranks' struct; the figure in range
  }
  const planner::MachineProfile m = device_profile("stand-in-cal", x.rates, x.fits, c);
  const std::string path =
      (std::filesystem::temp_directory_path() / ("pb_device_profile_" + std::to_string(::getpid()) + ".toml")).string();
  {
    std::ofstream(path) << planner::machine_toml(m);
  }
  const planner::MachineProfile back = planner::load_machine(path);
  EXPECT_FALSE(back.hw.host_kernels) << "gpu = true";
  EXPECT_EQ(back.name(), "stand-in-cal");
  // No base per call on top of the measured alpha, which includes it.
  EXPECT_DOUBLE_EQ(m.hw.latency_call_us, 0);
  EXPECT_DOUBLE_EQ(back.hw.latency_call_us, 0);
  EXPECT_EQ(back.sources.at("latency_call_us"), m.sources.at("latency_call_us"));
  EXPECT_EQ(m.sources.at("latency_call_us").rfind("0: in latency_us and latency_inter_us", 0), 0u)
      << m.sources.at("latency_call_us");
  ASSERT_EQ(back.gemm.at("bf16").size(), x.rates.gemm_bf16.size());
  for (size_t i = 0; i < x.rates.gemm_bf16.size(); ++i) {
    EXPECT_EQ(back.gemm.at("bf16")[i].m, x.rates.gemm_bf16[i].m);
    EXPECT_TRUE(close(back.gemm.at("bf16")[i].gflops, x.rates.gemm_bf16[i].gflops));
    EXPECT_TRUE(close(back.gemm.at("fp32")[i].gflops, x.rates.gemm_fp32[i].gflops));
  }
  EXPECT_TRUE(close(back.hw.mem_bw_GBps, x.rates.copy_GBps));
  EXPECT_TRUE(close(back.flash_attention_tflops_bf16, x.rates.attention.back().tflops()));
  const planner::CollectiveFit& ar = x.fits.at("all_reduce").back();
  EXPECT_TRUE(close(back.hw.bw_intra_GBps, ar.GBps));
  EXPECT_TRUE(close(back.hw.bw_inter_GBps, ar.GBps));
  for (const auto& [op, v] : x.fits) {
    ASSERT_EQ(back.hw.collectives.at(op).size(), v.size()) << op;
    for (size_t i = 0; i < v.size(); ++i) {
      EXPECT_EQ(back.hw.collectives.at(op)[i].group_size, v[i].group_size);
      EXPECT_TRUE(close(back.hw.collectives.at(op)[i].GBps, v[i].GBps)) << op;
    }
  }
  EXPECT_TRUE(close(back.hw.overlap_compute_slowdown, x.rates.overlap.slowdown) ||
              (x.rates.overlap.slowdown < 1e-9 && back.hw.overlap_compute_slowdown == 0));
  EXPECT_TRUE(close(back.hw.gemm_spread, x.rates.spread.spread)) << back.hw.gemm_spread << " " << x.rates.spread.spread;
  EXPECT_EQ(back.sources.at("gemm_spread"), m.sources.at("gemm_spread"));
  EXPECT_DOUBLE_EQ(back.kernel_launch_us, 4.25);
  // host_op_us: the measured launch, a lower bound on a framework's.
  EXPECT_DOUBLE_EQ(m.hw.host_op_us, 4.25);
  EXPECT_DOUBLE_EQ(back.hw.host_op_us, 4.25);
  EXPECT_EQ(back.sources.at("host_op_us"), m.sources.at("host_op_us"));
  for (const char* part : {"an empty kernel's launch", "this engine's CUDA launch", "A lower bound on a framework's",
                           "82793", "41383"})
    EXPECT_NE(back.sources.at("host_op_us").find(part), std::string::npos) << part << ": " << back.sources.at("host_op_us");
  // ring_plateau: 1, the measured fits holding NCCL's plateau (one node here).
  EXPECT_DOUBLE_EQ(back.hw.ring_plateau, 1);
  EXPECT_EQ(back.sources.at("ring_plateau"), m.sources.at("ring_plateau"));
  EXPECT_NE(back.sources.at("ring_plateau").find("hold what NCCL's plateau models"), std::string::npos)
      << back.sources.at("ring_plateau");
  // The memory-bound kinds: each measured one written, read back, its
  // source naming the kernels, the byte count and the timer; the two no
  // kernel here times: no figure, a source saying why.
  const KindRates& kr = x.rates.kinds;
  for (const auto& [key, rate, want, kernels, bytes] :
       {std::tuple<const char*, double, double, const char*, const char*>{
            "norm_mem_bw_GBps", back.hw.norm_mem_bw_GBps, kr.norm.GBps(), "layernorm_forward + layernorm_backward",
            "6 elements x 2 B per norm element"},
        {"elementwise_mem_bw_GBps", back.hw.elementwise_mem_bw_GBps, kr.elementwise.GBps(),
         "residual_forward, gelu_forward and gelu_backward", "3 elements per element"},
        {"loss_mem_bw_GBps", back.hw.loss_mem_bw_GBps, kr.loss.GBps(), "crossentropy_forward + crossentropy_backward",
         "4 elements x 2 B per logit"}}) {
    EXPECT_TRUE(std::isfinite(rate) && rate > 0) << key << " " << rate;
    EXPECT_TRUE(close(rate, want)) << key << " " << rate << " " << want;
    EXPECT_TRUE(figure_written(slurp(path), key)) << key;
    const std::string& src = back.sources.at(key);
    EXPECT_EQ(src.rfind("measured by parabench calibrate --device cuda: the project's ", 0), 0u) << src;
    for (const char* part : {kernels, bytes, "the planner's own byte count", "the host clock (the stand-in's timeline)",
                             "stand-in device, 2026-11-27"})
      EXPECT_NE(src.find(part), std::string::npos) << key << ": " << part << ": " << src;
  }
  EXPECT_NE(back.sources.at("norm_mem_bw_GBps").find("64 rows of 32"), std::string::npos);
  EXPECT_NE(back.sources.at("loss_mem_bw_GBps").find("16 rows of 100 logits"), std::string::npos);
  EXPECT_EQ(back.hw.softmax_mem_bw_GBps, 0);
  EXPECT_EQ(back.hw.eager_norm_mem_bw_GBps, 0);
  EXPECT_NE(back.sources.at("softmax_mem_bw_GBps").find("not measured (no figure: mem_bw_GBps): the project's "
                                                        "attention kernel fuses the scores' softmax"),
            std::string::npos)
      << back.sources.at("softmax_mem_bw_GBps");
  EXPECT_EQ(back.sources.at("eager_norm_mem_bw_GBps").rfind("not measured (no figure: mem_bw_GBps): the planner counts "
                                                            "an eager RMSNorm's op-by-op",
                                                            0),
            0u)
      << back.sources.at("eager_norm_mem_bw_GBps");
  // What plan --machine FILE runs on: the kinds as measured.
  EXPECT_TRUE(planner::has_kind_rates(planner::hardware_for(back, Precision::bf16_mixed)));
  EXPECT_DOUBLE_EQ(back.hw.memory_GB, 1.5);
  EXPECT_EQ(back.ranks_per_node, 3);
  // Every figure the file gives has a source naming the device (load_machine
  // refuses a GPU profile's figure without one), and so does every table.
  const std::string written = slurp(path);
  for (const std::string& k : planner::profile_figures()) {
    if (written.find("\n" + k + " = ") != std::string::npos) {
      EXPECT_TRUE(back.sources.count(k)) << k;
    }
  }
  for (const char* k : {"gemm.bf16", "gemm.fp32", "collective.all_reduce", "collective.reduce_scatter",
                        "collective.all_gather", "mem_bw_GBps", "bw_intra_GBps", "kernel_launch_us",
                        "flash_attention_tflops_bf16", "gemm_achievable_tflops_bf16", "peak_tflops_bf16",
                        "overlap_compute_slowdown", "gemm_spread"}) {
    ASSERT_TRUE(back.sources.count(k)) << k;
    EXPECT_NE(back.sources.at(k).find("stand-in device, 2026-11-27"), std::string::npos) << k << ": " << back.sources.at(k);
  }
  EXPECT_NE(back.sources.at("bw_inter_GBps").find("not measured across nodes"), std::string::npos);
  EXPECT_NE(back.sources.at("bw_intra_GBps").find("local-backend all_reduce at 3 ranks, bus bandwidth from the slope "
                                                   "over 1 .. 64 MiB"),
            std::string::npos)
      << back.sources.at("bw_intra_GBps");
  // The overlap slowdown: measured (the figure written unless it came out 0,
  // which the file leaves to the reader's default, the same 0), its source
  // naming the sizes, the backend, the repeats.
  const std::string& overlap = back.sources.at("overlap_compute_slowdown");
  EXPECT_EQ(overlap.rfind("measured by parabench calibrate --device cuda: a batch of ", 0), 0u) << overlap;
  for (const char* part : {"bf16 GEMMs of 64 x 64 x 64", "local-backend all_reduces of 1 MiB fp32",
                           "on all 2 ranks", "t_with / t_alone - 1 of the rank slowed most", "median of 3 repeats"})
    EXPECT_NE(overlap.find(part), std::string::npos) << part << ": " << overlap;
  const bool overlap_written = figure_written(written, "overlap_compute_slowdown");
  // The GEMM spread: measured on the fixture's 2 ranks (written unless it
  // came out 0, the reader's default), its source naming the statistic, the
  // shape and that a job's GPUs are not a fleet.
  const std::string& spread = back.sources.at("gemm_spread");
  EXPECT_EQ(spread.rfind("measured by parabench calibrate --device cuda on 2 ranks of stand-in device, 2026-11-27", 0),
            0u)
      << spread;
  for (const char* part : {"sample standard deviation (n - 1)", "bf16 GEMM of 64 x 64 x 64", "over their median",
                           "median of 5 repeats", "2 GPUs of one job, not a fleet"})
    EXPECT_NE(spread.find(part), std::string::npos) << part << ": " << spread;
  EXPECT_EQ(figure_written(written, "gemm_spread"), x.rates.spread.spread > 0) << x.rates.spread.spread;
  EXPECT_EQ(back.hw.gemm_spread > 0, x.rates.spread.spread > 0);
  EXPECT_EQ(overlap_written, x.rates.overlap.slowdown > 0) << x.rates.overlap.slowdown;
  // What plan --machine FILE takes of it: the bf16 table at bf16-mixed.
  const planner::Hardware hw = planner::hardware_for(back, Precision::bf16_mixed);
  EXPECT_EQ(hw.gemm_rates.size(), x.rates.gemm_bf16.size());
  EXPECT_FALSE(hw.host_kernels);

  // A figure whose source is taken out: refused, named.
  std::string text = slurp(path);
  const size_t at = text.find("\nmem_bw_GBps = \"") + 1;  // not a kind's (elementwise_mem_bw_GBps ...)
  ASSERT_NE(at, 0u);
  text.erase(at, text.find('\n', at) - at + 1);
  {
    std::ofstream(path) << text;
  }
  try {
    planner::load_machine(path);
    ADD_FAILURE() << "a GPU profile's figure without a source was read";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("mem_bw_GBps has no source"), std::string::npos) << e.what();
  }
  // ... and so is the launch figure's.
  text = slurp(path);
  text.insert(text.find("\n[machine.sources]\n") + 19, "mem_bw_GBps = \"restored\"\n");
  const size_t launch = text.find("kernel_launch_us = \"");
  ASSERT_NE(launch, std::string::npos);
  text.erase(launch, text.find('\n', launch) - launch + 1);
  {
    std::ofstream(path) << text;
  }
  try {
    planner::load_machine(path);
    ADD_FAILURE() << "a GPU profile's kernel_launch_us without a source was read";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("kernel_launch_us has no source"), std::string::npos) << e.what();
  }
  // ... and the overlap slowdown's, where the figure is written.
  if (overlap_written) {
    text = slurp(path);
    text.insert(text.find("\n[machine.sources]\n") + 19, "kernel_launch_us = \"restored\"\n");
    const size_t src = text.find("overlap_compute_slowdown = \"");
    ASSERT_NE(src, std::string::npos);
    text.erase(src, text.find('\n', src) - src + 1);
    {
      std::ofstream(path) << text;
    }
    try {
      planner::load_machine(path);
      ADD_FAILURE() << "a GPU profile's overlap_compute_slowdown without a source was read";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("overlap_compute_slowdown has no source"), std::string::npos) << e.what();
    }
  }
  std::filesystem::remove(path);
}

TEST(DeviceRates, AcrossNodesTheWorldsAllReduceIsTheInterNodeLink) {
  const Measured& x = measured();
  DeviceContext c = stand_in_context();
  c.nodes = 2;
  c.ranks_per_node = 2;  // as if the fits' 3 ranks had spanned two nodes
  const planner::MachineProfile m = device_profile("x", x.rates, x.fits, c);
  const planner::CollectiveFit &two = x.fits.at("all_reduce")[0], &three = x.fits.at("all_reduce")[1];
  EXPECT_DOUBLE_EQ(m.hw.bw_intra_GBps, two.GBps);
  EXPECT_DOUBLE_EQ(m.hw.latency_us, two.alpha_us / 2);
  EXPECT_DOUBLE_EQ(m.hw.bw_inter_GBps, three.GBps);
  EXPECT_DOUBLE_EQ(m.hw.latency_inter_us, three.alpha_us / 4);
  for (const auto& [op, v] : m.hw.collectives) {
    ASSERT_EQ(v.size(), 1u) << op << ": only the groups within a node";
    EXPECT_EQ(v[0].group_size, 2);
  }
  EXPECT_NE(m.sources.at("bw_inter_GBps").find("at 3 ranks on 2 nodes"), std::string::npos);
  // Across nodes the measured latency holds NCCL's plateau: no factor on top.
  EXPECT_DOUBLE_EQ(m.hw.ring_plateau, 1);
  EXPECT_EQ(m.sources.at("ring_plateau").rfind("1 (no factor on top): latency_inter_us and the all_reduce fits are "
                                               "local-backend's measured all_reduce across nodes",
                                               0),
            0u)
      << m.sources.at("ring_plateau");
  c.ranks_per_node = 1;
  EXPECT_THROW(device_profile("x", x.rates, x.fits, c), InputError);
}

TEST(DeviceRates, AProfileNeedsItsLinkAndGemms) {
  const Measured& x = measured();
  EXPECT_THROW(device_profile("x", x.rates, {}, stand_in_context()), InputError);
  DeviceRates none = x.rates;
  none.gemm_bf16.clear();
  EXPECT_THROW(device_profile("x", none, x.fits, stand_in_context()), InputError);
  // No launch measured: no figure, no source.
  const planner::MachineProfile m = device_profile("x", x.rates, x.fits, stand_in_context());
  EXPECT_EQ(m.kernel_launch_us, 0);
  EXPECT_FALSE(m.sources.count("kernel_launch_us"));
  EXPECT_EQ(planner::machine_toml(m).find("kernel_launch_us"), std::string::npos);
  // ... and no host time per op, its source saying it was not measured.
  EXPECT_EQ(m.hw.host_op_us, 0);
  EXPECT_EQ(m.sources.at("host_op_us").rfind("not measured", 0), 0u) << m.sources.at("host_op_us");
  EXPECT_FALSE(figure_written(planner::machine_toml(m), "host_op_us"));
}

}  // namespace
}  // namespace pb::calibrate
