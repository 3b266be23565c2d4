// parabench calibrate: measures this machine into a profile (TOML, the format
// of suites/planner/machine.h) that `plan --machine FILE` reads. What one rank
// of a local run gets (ranks are threads, one per core): one core's GEMM rate
// per precision (cblas_sgemm at 256..1024 for fp32; the project's own
// matmul_forward for bf16-mixed and fp64 at 512), one thread's memcpy
// bandwidth (the planner's memory-bound term counts reads and writes: twice
// it), the local backend's all_reduce between two ranks as t = 2 a + S / B
// (a: the fixed cost per ring step, the sweep's own measure of it,
// sweep::local_step_latency_us: half the median time of 16 B .. 4 KiB; B:
// the bus bandwidth, from the slope over 1 .. 16 MiB), a rank's share of the
// physical memory (installed over the hardware threads), and the hardware
// threads per node.
// This is the first part of #16's calibration: per-shape GEMM efficiency,
// per-op fixed costs and thread wake-up costs are not measured yet.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <thread>
#include <vector>

#include "harness/comm/runner.h"
#include "harness/io/run_meta.h"
#include "harness/status.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/peak.h"
#include "suites/cli/command.h"
#include "suites/cli/common.h"
#include "suites/planner/machine.h"
#include "suites/sweep/sweep_plan.h"

namespace pb::cli {
namespace {

using CalClock = std::chrono::steady_clock;

struct CalibrateFlags {
  std::string out = "results/machine.toml";
  std::string name;
  double seconds = 0.2;
};

// GFLOP/s of the project's matmul_forward<T> at N = C = OC = n, one thread.
template <class T>
double calibrate_matmul_gflops(int n, double seconds) {
  std::vector<T> out(size_t(n) * n), inp(size_t(n) * n, T(0.5)), w(size_t(n) * n, T(0.25)), b(size_t(n), T(0.0));
  std::vector<float> ws(kernels::matmul_workspace_floats<T>(n, n, n) + 1);
  kernels::set_blas_threads(1);
  kernels::matmul_forward(out.data(), inp.data(), w.data(), b.data(), n, n, n, ws.data());  // warm-up
  int calls = 0;
  const auto t0 = CalClock::now();
  double s = 0;
  do {
    kernels::matmul_forward(out.data(), inp.data(), w.data(), b.data(), n, n, n, ws.data());
    ++calls;
    s = std::chrono::duration<double>(CalClock::now() - t0).count();
  } while (s < seconds);
  return 2.0 * n * n * double(n) * calls / s / 1e9;
}

// Seconds per all_reduce of `bytes` (fp32) between two local ranks, rank 0's
// mean over enough calls to fill `seconds`.
std::vector<std::pair<double, double>> calibrate_all_reduce_times(double seconds) {
  std::vector<std::pair<double, double>> xt;
  WorldOptions wo;
  wo.size = 2;
  auto world = make_local_world(wo);
  for (size_t bytes = 4; bytes <= (size_t(16) << 20); bytes *= 4) {
    const size_t n = bytes / 4;
    double per_call = 0;
    run_ranks(*world, [&](Communicator& comm) {
      std::vector<float> x(n, 1.f), y(n);
      for (int i = 0; i < 3; ++i) comm.all_reduce(x.data(), y.data(), n, DType::f32);
      // Rank 0 sizes the timed loop from three calls; both ranks then make
      // that many calls with nothing else in between.
      auto t0 = CalClock::now();
      for (int i = 0; i < 3; ++i) comm.all_reduce(x.data(), y.data(), n, DType::f32);
      double calls = std::clamp(seconds / 12 / (std::chrono::duration<double>(CalClock::now() - t0).count() / 3), 3.0,
                                1e6);
      comm.broadcast(&calls, 1, DType::f64, 0);
      comm.barrier();
      t0 = CalClock::now();
      for (int i = 0; i < int(calls); ++i) comm.all_reduce(x.data(), y.data(), n, DType::f32);
      const double s = std::chrono::duration<double>(CalClock::now() - t0).count();
      if (comm.rank() == 0) per_call = s / int(calls);
    });
    xt.push_back({double(bytes), per_call});
  }
  return xt;
}

int run_calibrate(const CalibrateFlags& f, const Env& env) {
  require(f.seconds > 0 && f.seconds <= 60, "--seconds: must be in (0, 60], got " + std::to_string(f.seconds));
  require(!env.under_mpirun, "calibrate: runs in one process (the local backend's figures); not under mpirun");
  {
    const std::filesystem::path out(f.out);
    std::error_code ec;
    const auto dir = out.has_parent_path() ? out.parent_path() : std::filesystem::path(".");
    require(std::filesystem::is_directory(dir, ec) && !std::filesystem::is_directory(out, ec),
            "--out: cannot write '" + f.out + "' (its directory must exist; it must not be a directory)");
  }
  planner::MachineProfile m;
  m.name = f.name.empty() ? host_name() : f.name;
  require(!m.name.empty() && m.name.size() <= 64, "--name: must be 1 to 64 characters");
  std::printf("calibrating %s (about %.0f s)\n", m.name.c_str(), 14 * f.seconds + 2);
  double gf_fp32 = 0;
  for (int n : {256, 512, 1024}) gf_fp32 = std::max(gf_fp32, kernels::measure_sgemm_gflops(n, f.seconds));
  const double gf_bf16 = calibrate_matmul_gflops<pb::bf16>(512, f.seconds),
               gf_fp64 = calibrate_matmul_gflops<double>(512, f.seconds);
  m.peak_tflops_fp32 = gf_fp32 / 1e3;
  m.peak_tflops_bf16 = gf_bf16 / 1e3;
  m.peak_tflops_fp64 = gf_fp64 / 1e3;
  const double copy = sweep::copy_bandwidth_GBps();
  m.mem_bw_GBps = 2 * copy;
  // Two regimes, as nccl-tests reads them: the fixed cost per ring step as
  // the sweep's plan rows measure it (the median over the small sizes, past
  // the 4-byte fast path), the bandwidth from the slope over the large ones.
  const auto xt = calibrate_all_reduce_times(f.seconds * 4);
  std::vector<std::pair<double, double>> large_sizes;
  for (const auto& [x, t] : xt)
    if (x >= double(1 << 20)) large_sizes.push_back({x, t});
  m.latency_us = sweep::local_step_latency_us(2);
  const double fixed = 2 * m.latency_us * 1e-6;  // two ring steps at two ranks
  const planner::LineFit fit = planner::fit_line(large_sizes);
  require(fit.slope > 0, "calibrate: the all_reduce times do not grow with size (a noisy machine? rerun with a "
                         "larger --seconds)");
  m.bw_intra_GBps = 1 / fit.slope / 1e9;  // bus bytes = S at two ranks
  m.bw_inter_GBps = m.bw_intra_GBps;      // one node
  // The ranks of a local run share the machine's memory: a rank's device
  // memory is its share (the planner checks one rank against it).
  m.ranks_per_node = int(std::max(1u, std::thread::hardware_concurrency()));
  const double installed = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE)) / 1e9;
  m.memory_GB = installed / m.ranks_per_node;
  m.source = "parabench calibrate on " + host_name() + " at " + iso8601_utc(std::chrono::system_clock::now()) +
             " (git " + env.git_rev + "): one core's GEMM rates, memcpy bandwidth, local all_reduce fit over 2 threads";

  std::printf("  GEMM, one core        fp32 %.4g GFLOP/s (sgemm, best of 256/512/1024), bf16-mixed %.4g, fp64 %.4g "
              "(matmul_forward at 512)\n",
              gf_fp32, gf_bf16, gf_fp64);
  std::printf("  memory                memcpy %.4g GB/s (mem_bw %.4g: reads + writes), %.4g GB installed, %.4g per "
              "rank (%d hardware threads)\n",
              copy, m.mem_bw_GBps, installed, m.memory_GB, m.ranks_per_node);
  std::printf("  all_reduce, 2 ranks   t = 2 x %.3g us (median of 16 B .. 4 KiB) + S / %.4g GB/s (slope over 1 .. 16 "
              "MiB):\n",
              m.latency_us, m.bw_intra_GBps);
  for (const auto& [x, t] : xt)
    std::printf("    %10.0f B  %10.3f us  (model %10.3f us)\n", x, t * 1e6, (fixed + x / (m.bw_intra_GBps * 1e9)) * 1e6);
  write_file_atomically(f.out,
                        "# parabench calibrate: this machine's profile for `parabench plan --machine " + f.out + "`\n" +
                            planner::machine_toml(m),
                        "--out");
  planner::load_machine(f.out);  // what plan reads back
  std::printf("wrote %s\n", f.out.c_str());
  return 0;
}

}  // namespace

void register_calibrate(CLI::App& root, Registry& reg, const Env& env) {
  auto f = std::make_shared<CalibrateFlags>();
  CLI::App* app = root.add_subcommand("calibrate", "measure this machine into a profile plan --machine FILE reads");
  app->add_option("--out", f->out, "the profile to write (TOML)")->capture_default_str();
  app->add_option("--name", f->name, "the machine's name in the profile (default: the host name)");
  app->add_option("--seconds", f->seconds, "time per measurement, in (0, 60]")->capture_default_str();
  reg.push_back({app, [f, &env] { return run_calibrate(*f, env); }});
}

}  // namespace pb::cli
