// parabench calibrate: measures this machine into a profile (TOML, the format
// of suites/planner/machine.h) that `plan --machine FILE` reads. What one rank
// of a local run gets (ranks are threads, one per core): one core's GEMM rate
// per precision (cblas_sgemm at 256..1024 for fp32; the project's own
// matmul_forward for bf16-mixed and fp64 at 512), one thread's memcpy
// bandwidth (the planner's memory-bound term counts reads and writes: twice
// it, for plans with no training shape), the local backend's all_reduce
// between two ranks back to back as t = 2 a + S / B (a: the fixed cost per
// ring step, the sweep's own measure of it, calibrate::local_step_latency_us:
// half the median time of 16 B .. 4 KiB; B: the bus bandwidth, from the
// slope over 1 .. 16 MiB: the profile's link), a rank's share of the
// physical memory (installed over the hardware threads), and the hardware
// threads per node.
// Besides: GEMM tables by shape for each precision (m 16..1024 rows by n, k
// 64..1024), an alpha-beta fit per collective op at 2 ranks, one per core and
// twice that, timed as a step makes them (calibrate::measure_bus_bandwidth; the
// time-shared cores' fits carry the wake-ups), the time to wake a rank asleep
// in a wait, and training shapes (--model): each one's memory-bound kernel
// rates, compute_scale (its measured single-rank step over this profile's
// plan of it) and corun_scale (that step side by side on every core), keyed
// by its work per block. The planner uses the tables, fits and shapes
// (planner.h, machine.h); the wake-up figure is informational.
// With --device cuda (under mpirun, one rank per GPU, the nccl backend) it
// measures the GPUs instead: run_calibrate_cuda (suites/calibrate/device_rates.h).
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "harness/comm/runner.h"
#include "harness/io/output_file.h"
#include "harness/io/run_meta.h"
#include "harness/status.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/peak.h"
#include "reference/model_config.h"
#include "suites/cli/command.h"
#include "suites/cli/common.h"
#include "suites/planner/machine.h"
#include "suites/planner/model_cost.h"
#include "suites/planner/preflight.h"
#include "harness/comm/comm_backends.h"
#include "suites/calibrate/comm_rates.h"
#include "suites/calibrate/device_rates.h"
#include "suites/calibrate/shape_rates.h"
#include "suites/sweep/shape_step.h"
#ifdef PARABENCH_HAVE_CUDA
#include "kernels/cuda/calibrate.h"
#include "kernels/cuda/gpu.h"
#endif

namespace pb::cli {
namespace {

using CalClock = std::chrono::steady_clock;

struct CalibrateFlags {
  std::string device = "cpu";
  std::vector<std::string> cpu_only_given;  // flags of the CPU calibration given (refused with --device cuda)
  std::string out = "results/machine.toml";
  std::string name;
  std::string inter_node;  // a collectives.csv measured across nodes
  double seconds = 0.2;
  // The training shapes whose kernels and steps calibrate the profile's
  // memory-bound rates, compute_scale and corun_scale ("none": skip).
  std::vector<std::string> models = {"tiny", "small"};
  int seq = 16, microbatch_size = 4, microbatches = 2;
  PreflightFlags limits;
};

// GFLOP/s of the project's matmul_forward<T> (out (m x n) = inp (m x k) W^T),
// one thread, over at least `seconds` after a warm-up call.
template <class T>
double calibrate_matmul_gflops(int m, int n, int k, double seconds) {
  std::vector<T> out(size_t(m) * n), inp(size_t(m) * k, T(0.5)), w(size_t(n) * k, T(0.25)), b(size_t(n), T(0.0));
  std::vector<float> ws(kernels::matmul_workspace_floats<T>(m, k, n) + 1);
  kernels::set_blas_threads(1);
  kernels::matmul_forward(out.data(), inp.data(), w.data(), b.data(), m, k, n, ws.data());  // warm-up
  int calls = 0;
  const auto t0 = CalClock::now();
  double s = 0;
  do {
    kernels::matmul_forward(out.data(), inp.data(), w.data(), b.data(), m, k, n, ws.data());
    ++calls;
    s = std::chrono::duration<double>(CalClock::now() - t0).count();
  } while (s < seconds);
  return 2.0 * double(m) * n * double(k) * calls / s / 1e9;
}

// The shapes of the GEMM tables: rows m (tokens) by n, k (features) from a
// decode-sized 16 rows to 1024, as a model's linears, attention blocks and
// their tensor-parallel shards span them.
std::vector<planner::GemmRate> gemm_table(const std::string& precision, double seconds) {
  std::vector<planner::GemmRate> t;
  for (int m : {16, 64, 256, 1024})
    for (int n : {64, 256, 1024})
      for (int k : {64, 256, 1024}) {
        const double g = precision == "fp32" ? kernels::measure_sgemm_gflops(m, n, k, false, true, seconds)
                         : precision == "bf16" ? calibrate_matmul_gflops<pb::bf16>(m, n, k, seconds)
                                               : calibrate_matmul_gflops<double>(m, n, k, seconds);
        t.push_back({m, n, k, g});
      }
  return t;
}

// alpha: the median time of the sizes up to 4 KiB (the fixed cost per call);
// GBps: 1 / the slope of time over bus bytes from 1 MiB up.
planner::CollectiveFit fit_collective(const std::string& op, int n, const std::vector<std::pair<double, double>>& xt) {
  return planner::fit_alpha_beta(op, n, xt, 4096, "calibrate: " + op + " at " + std::to_string(n) + " ranks",
                                 " (a noisy machine? rerun with a larger --seconds)");
}

// fit_collective of op at n ranks, measured at `sizes` for `seconds` each; a
// fit whose times did not grow with size (one slow moment on a shared
// machine, at the short windows of a quick calibration) is measured again
// with 4x and 16x the time before its error stands.
planner::CollectiveFit measured_fit(const std::string& op, int n, const std::vector<size_t>& sizes, double seconds) {
  for (int attempt = 0;; ++attempt, seconds *= 4) {
    try {
      return fit_collective(op, n, calibrate::measure_collective_times(op, n, sizes, seconds));
    } catch (const InputError&) {
      if (attempt == 2) throw;
    }
  }
}

// Waking a rank asleep in a wait: rank 1 arrives at a barrier 3 ms after rank
// 0 (past its spin: it sleeps); the median over `reps` of the time from rank
// 1's arrival to rank 0's return.
double wake_up_us(int reps) {
  WorldOptions wo;
  wo.size = 2;
  auto world = make_local_world(wo);
  const size_t n = size_t(reps);
  std::vector<CalClock::time_point> arrive(n), back(n);
  run_ranks(*world, [&](Communicator& comm) {
    for (int i = 0; i < reps; ++i) {
      comm.barrier();
      if (comm.rank() == 1) {
        std::this_thread::sleep_for(std::chrono::milliseconds(3));
        arrive[size_t(i)] = CalClock::now();
        comm.barrier();
      } else {
        comm.barrier();
        back[size_t(i)] = CalClock::now();
      }
    }
  });
  std::vector<double> us;
  for (int i = 0; i < reps; ++i) us.push_back(std::chrono::duration<double>(back[size_t(i)] - arrive[size_t(i)]).count() * 1e6);
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

// What calibrate measured of one training shape, for the report it prints.
struct ShapeCalibration {
  planner::ShapeFigures figures;
  std::vector<sweep::PointResult> steps;  // its single-rank step's windows (shape_windows)
  double step_s = 0;     // the single-rank step, measured (the median of its windows)
  double planned_s = 0;  // its plan with the profile's rates, before compute_scale
  double buffer_s = 0;   // of which the data-parallel buffers' (compute_scale leaves them alone)
  std::vector<double> corun_windows;
  int together = 1;      // ranks side by side behind corun_scale
};

bool no_shapes(const CalibrateFlags& f) { return f.models.size() == 1 && f.models[0] == "none"; }

// The sweep config and shape key of `model`'s single-rank step.
std::pair<sweep::SweepConfig, sweep::ShapeKey> shape_of(const CalibrateFlags& f, const std::string& model) {
  sweep::SweepConfig c;
  c.seq = f.seq;
  c.steps = 10;
  c.min_seconds = std::max(0.25, f.seconds);
  c.rounds = 3;
  c.warmup = 2;
  c.batch_per_rank = f.microbatch_size * f.microbatches;
  return {c, {named_model(model), Precision::fp32, f.microbatch_size, f.microbatches}};
}

std::string shape_name(const CalibrateFlags& f, const std::string& model) {
  return model + ", seq " + std::to_string(f.seq) + ", " + std::to_string(f.microbatches) + " microbatches of " +
         std::to_string(f.microbatch_size) + ", fp32";
}

// --model's shapes, checked before any measurement: named models (or none
// alone), each once, whose step at --seq, --microbatch-size and
// --microbatches is valid and fits this machine's limits on one rank, and no
// two of the same work (shape_work: the profile's table is keyed by it).
void check_shapes(const CalibrateFlags& f) {
  if (no_shapes(f)) return;
  const auto names = named_models();
  std::map<double, std::string> works;
  for (const std::string& model : f.models) {
    require(model != "none", "--model: none stands alone (no training shape)");
    require(std::find(names.begin(), names.end(), model) != names.end(),
            "--model: unknown model '" + model + "' (named models, or none)");
    require(!named_model(model).llama(), "--model " + model + ": calibrate's shape figures are the gpt2 family's "
                                         "(model family llama is not calibrated yet)");
    const auto [c, key] = shape_of(f, model);
    try {
      require_fits(planner::run_need(sweep::point_spec(c, sweep::single_rank_point(key)), 1, true,
                                     /*conformance=*/false),
                   limits_of(f.limits), "calibration step");
    } catch (const InputError& e) {
      throw InputError("--model " + model + " --seq " + std::to_string(f.seq) + " --microbatch-size " +
                       std::to_string(f.microbatch_size) + " --microbatches " + std::to_string(f.microbatches) +
                       ": " + e.what());
    }
    const double w = planner::shape_work(named_model(model), f.microbatch_size, f.seq, 1, 1);
    const auto [it, fresh] = works.emplace(w, model);
    require(fresh, "--model: " + it->second + " and " + model + " are the same work per block (give one)");
  }
}

// Window `i` of each training shape (`shapes`, one per --model): its
// single-rank step (sweep::single_rank_step, one window of at least 10 steps
// and max(0.1, --seconds / 2) s) and, with two cores or more, that step as
// one copy per core side by side over alone (sweep::corun_ratio). calibrate
// takes three, spread over its other measurements, as the sweep spreads a
// point's rounds: a few seconds in which the host runs faster or slower
// (seen: a calibration whose small step ran 7.8 ms against 8.5-8.8 in four
// others, and the sweep after it at 8.7) set one window, not the figure.
// InputError when a step does not run here.
void shape_windows(const CalibrateFlags& f, std::vector<ShapeCalibration>& shapes, double peak_flops, int cores) {
  const Limits limits = limits_of(f.limits);
  for (size_t k = 0; k < f.models.size(); ++k) {
    auto [c, key] = shape_of(f, f.models[k]);
    c.rounds = 1;
    c.min_seconds = std::max(0.1, f.seconds / 2);
    ShapeCalibration& s = shapes[k];
    s.steps.push_back(sweep::single_rank_step(c, key, peak_flops, limits));
    const sweep::PointResult& step = s.steps.back();
    require(step.status == "ok", "--model: the calibration step (" + shape_name(f, f.models[k]) + ") " + step.status +
                                     ": " + step.reason);
    if (cores >= 2) {
      s.together = cores;
      s.corun_windows.push_back(sweep::corun_ratio(c, key, cores, limits));
    }
  }
}

// A training shape's figures for profile m (its other measurements done),
// its windows taken (shape_windows): the memory-bound kernels' rates at the
// shape (calibrate::measure_shape_rates), the median of its steps over the plan
// of that step with this profile and these rates (compute_scale, so that the
// step plans as measured), and the median of its side-by-side ratios
// (corun_scale; 1 when one failed).
void finish_shape(const CalibrateFlags& f, const std::string& model, const planner::MachineProfile& m,
                  double peak_flops, ShapeCalibration& s) {
  const calibrate::ShapeRates rates =
      calibrate::measure_shape_rates(named_model(model), f.microbatch_size, f.seq, peak_flops, 3);
  const calibrate::MemoryBoundRates& r = rates.memory;
  planner::ShapeFigures& x = s.figures;
  x.workload = shape_name(f, model);
  x.work = planner::shape_work(named_model(model), f.microbatch_size, f.seq, 1, 1);
  x.mem_bw_GBps = r.GBps(f.microbatches);
  x.shared_mem_bw_GBps = r.shared_GBps();
  x.optimizer_mem_bw_GBps = r.optimizer_GBps();
  x.buffer_mem_bw_GBps = r.buffer_GBps();
  s.step_s = sweep::combine_rounds(s.steps).step_time_s;
  planner::MachineProfile one = m;  // this shape alone, unscaled
  one.shapes = {x};
  planner::PlanInput in;
  in.shape = planner::planner_model(model);
  in.seq = f.seq;
  in.precision = Precision::fp32;
  in.microbatch_size = f.microbatch_size;
  in.global_batch = int64_t(f.microbatch_size) * f.microbatches;
  in.ranks_per_node = m.ranks_per_node;
  in.hw = planner::hardware_for(one, in);
  const planner::PlanResult est = planner::plan(in);
  s.planned_s = est.step_s;
  s.buffer_s = est.buffer_s;
  x.compute_scale = planner::compute_scale_for(est, s.step_s);
  if (!s.corun_windows.empty()) {
    auto [c, key] = shape_of(f, model);
    c.rounds = int(s.corun_windows.size());  // all taken: their median (1 when one failed)
    x.corun_scale = sweep::corun_scale(c, key, s.together, limits_of(f.limits), s.corun_windows);
  }
}

std::string fmt_ms(double seconds) {
  char b[32];
  std::snprintf(b, sizeof b, "%.4g", seconds * 1e3);
  return b;
}

void print_shape(const ShapeCalibration& s) {
  const planner::ShapeFigures& x = s.figures;
  std::printf("  training shape        %s (work %.4g FLOPs per block and microbatch):\n", x.workload.c_str(), x.work);
  std::printf("    memory-bound work   %.4g GB/s (the kernels at the shape), LayerNorms and residual adds %.4g, "
              "optimizer step %.4g, data-parallel buffers %.4g\n",
              x.mem_bw_GBps, x.shared_mem_bw_GBps, x.optimizer_mem_bw_GBps, x.buffer_mem_bw_GBps);
  std::string windows;
  for (const sweep::PointResult& w : s.steps) windows += (windows.empty() ? "" : " ") + fmt_ms(w.step_time_s);
  std::printf("    single-rank step    %.4g ms measured (the median of windows %s ms), %.4g ms planned from the "
              "rates (%.4g of it the buffers'): compute_scale %.4g\n",
              s.step_s * 1e3, windows.c_str(), s.planned_s * 1e3, s.buffer_s * 1e3, x.compute_scale);
  if (s.together >= 2) {
    std::printf("    side by side        %d copies, one per core, meeting after every step: x %.4g the step alone "
                "(corun_scale; windows",
                s.together, x.corun_scale);
    for (double w : s.corun_windows) std::printf(" %.4g", w);
    std::printf("%s)\n", std::find(s.corun_windows.begin(), s.corun_windows.end(), 0.0) != s.corun_windows.end()
                              ? "; one failed: 1"
                              : "");
  }
}

// The range a written link figure must be in: 1 MB/s to 1 PB/s, up to 10 s
// per step. Outside it a fit measured noise, not a link.
constexpr double kMinGBps = 1e-3, kMaxGBps = 1e6, kMaxLatencyUs = 1e7;

// Every figure the profile will hold is finite and in range, or the command
// refuses before the file is written (nothing is left at --out).
void check_written_figures(const planner::MachineProfile& m) {
  auto in = [](const std::string& key, double v, double lo, double hi) {
    require(std::isfinite(v) && v >= lo && v <= hi,
            "calibrate: measured machine." + key + " = " + std::to_string(v) + ", outside [" + std::to_string(lo) +
                ", " + std::to_string(hi) + "]: not written (rerun calibrate on a quiet machine)");
  };
  in("peak_tflops_fp32", m.peak_tflops_fp32, 1e-9, 1e9);
  in("peak_tflops_bf16", m.peak_tflops_bf16, 1e-9, 1e9);
  in("peak_tflops_fp64", m.peak_tflops_fp64, 1e-9, 1e9);
  in("mem_bw_GBps", m.hw.mem_bw_GBps, kMinGBps, kMaxGBps);
  for (const planner::KindRate& k : planner::kKindRates)  // 0: not written (mem_bw_GBps); any other value bounded
    if (m.hw.*k.rate != 0) in(k.key, m.hw.*k.rate, kMinGBps, kMaxGBps);
  in("host_op_us", m.hw.host_op_us, 0, 1e6);          // what load_machine reads
  in("ring_plateau", m.hw.ring_plateau, 1, 10);  // what load_machine reads
  in("bw_intra_GBps", m.hw.bw_intra_GBps, kMinGBps, kMaxGBps);
  in("bw_inter_GBps", m.hw.bw_inter_GBps, kMinGBps, kMaxGBps);
  in("latency_us", m.hw.latency_us, 0, kMaxLatencyUs);
  in("latency_inter_us", m.hw.latency_inter_us, 0, kMaxLatencyUs);
  in("latency_call_us", m.hw.latency_call_us, 0, kMaxLatencyUs);
  in("wake_us", m.wake_us, 0, kMaxLatencyUs);
  in("overlap_compute_slowdown", m.hw.overlap_compute_slowdown, 0, 10);  // what load_machine reads
  in("gemm_spread", m.hw.gemm_spread, 0, std::nextafter(0.5, 0.0));         // [0, 0.5), as load_machine reads it
  for (const auto& [p, table] : m.gemm)
    for (const auto& g : table) in("gemm." + p + ".gflops", g.gflops, 1e-9, 1e12);
  for (const auto& [op, fits] : m.hw.collectives)
    for (const auto& c : fits) {
      in("collective." + op + ".GBps", c.GBps, 1e-9, kMaxGBps);
      in("collective." + op + ".alpha_us", c.alpha_us, 0, kMaxLatencyUs);
    }
}

// calibrate --device cuda: under mpirun, one rank per GPU (the nccl
// backend's placement), every rank times its own GPU (device_rates.h: the
// GEMM grid, a copy, the attention kernel, the memory-bound kernels by kind,
// the empty kernel's launch), then
// the collectives run by size on groups of 2, 4, ... up to every rank, then
// every rank's GEMM batch alone and beside all_reduces (the overlap
// slowdown), then every rank's GEMM time at once (the spread); rank 0's
// process writes its GPU's figures and the fits as a GPU profile.
int run_calibrate_cuda(const CalibrateFlags& f, const Env& env) {
  const std::string why = cuda_unavailable();
  require(why.empty(), "calibrate --device cuda: no GPU to calibrate: " + why);
  std::string cpu_only;
  for (const std::string& flag : f.cpu_only_given) cpu_only += (cpu_only.empty() ? "" : ", ") + flag;
  require(cpu_only.empty(), "calibrate --device cuda: " + cpu_only +
                                " calibrate the CPU's figures (training shapes, the inter-node CSV, preflight limits); "
                                "not with --device cuda");
  require(env.under_mpirun, "calibrate --device cuda: run it under mpirun, one rank per GPU and at least 2 (mpirun -np "
                            "8 parabench calibrate --device cuda): the profile's links are NCCL's between the ranks");
  check_output_path(f.out, "--out", {});
#ifdef PARABENCH_HAVE_CUDA
  WorldOptions wo;
  wo.backend = BackendKind::nccl;
  wo.size = 0;           // as launched
  wo.timeout_s = 1800;   // the ranks' GPU grids finish at their GPUs' pace before the collectives meet
  auto world = make_world(wo);
  require(world->size() >= 2, "calibrate --device cuda: " + std::to_string(world->size()) +
                                  " rank: run under mpirun -np N with N >= 2 GPUs (the NCCL collectives need two)");
  const bool writer = hosts_rank(*world, 0);
  const int gpu = kernels::cuda::current_device();
  const kernels::cuda::DeviceInfo info = kernels::cuda::device_info(gpu);
  if (writer)
    std::printf("calibrating %d GPUs (rank 0: cuda:%d %s): each its GEMMs, copy, attention and launch, then the "
                "collectives, then GEMMs beside all_reduces, then every GPU's GEMM time at once\n",
                world->size(), gpu, info.name.c_str());
  calibrate::DeviceGrid grid;
  grid.seconds = f.seconds / 4;
  calibrate::DeviceRates rates;
  kernels::cuda::LaunchCost launch;
  {
    const kernels::cuda::Gpu g = kernels::cuda::open_gpu(gpu);
    rates = calibrate::measure_device_rates(*g.bf16_ops, *g.f32, *g.memory, grid);
    launch = kernels::cuda::measure_launch(gpu, 10000);
  }
  int nodes = 1;
  run_ranks(*world, [&](Communicator& comm) {
    if (comm.rank() == 0) nodes = comm.num_nodes();
  });
  const int per_node = std::max(1, world->size() / std::max(1, nodes));
  calibrate::CollectiveSweep sweep;
  sweep.groups = calibrate::group_sizes(world->size());
  if (nodes > 1 && per_node >= 2) sweep.groups.push_back(per_node);  // a whole node: the intra-node link's group
  std::sort(sweep.groups.begin(), sweep.groups.end());
  sweep.groups.erase(std::unique(sweep.groups.begin(), sweep.groups.end()), sweep.groups.end());
  const auto fits = calibrate::measure_collective_fits(*world, sweep);
  // Compute beside a collective: every rank's GEMM batch alone, then beside
  // all_reduces of the sweep's largest size on every rank (device_rates.h).
  calibrate::OverlapProbe probe;
  probe.message_bytes = sweep.max_bytes;
  probe.seconds = grid.seconds;
  // How far the GPUs' GEMM times differ (the spread): every rank's GEMM of
  // the overlap probe's shape at once, after 3 s of back-to-back GEMMs (the
  // clocks settled at the power cap), the median of 5 repeats.
  calibrate::SpreadProbe spread;
  spread.m = probe.m;
  spread.n = probe.n;
  spread.k = probe.k;
  spread.seconds = grid.seconds;
  {
    const kernels::cuda::Gpu g = kernels::cuda::open_gpu(gpu);
    run_ranks(*world, [&](Communicator& comm) {
      rates.overlap = calibrate::measure_overlap_slowdown(comm, *g.bf16_ops, *g.memory, probe, g.stream);
      rates.spread = calibrate::measure_gemm_spread(comm, *g.bf16_ops, *g.memory, spread, g.stream);
    });
  }
  if (!writer) return 0;
  calibrate::DeviceContext c;
  c.device = info.name;
  c.date = iso8601_utc(std::chrono::system_clock::now());
  c.git_rev = env.git_rev;
  c.memory_GB = info.memory_bytes / 1e9;
  c.nodes = nodes;
  c.ranks_per_node = per_node;
  c.launch_us = launch.wall_us;
  c.max_collective_bytes = sweep.max_bytes;
  const planner::MachineProfile m =
      calibrate::device_profile(f.name.empty() ? host_name() + "-gpu" : f.name, rates, fits, c);
  for (const auto& [p, table] : m.gemm) {
    std::printf("  GEMM %-4s  (matmul_forward, cuBLAS)\n", p.c_str());
    for (const planner::GemmRate& g : table)
      std::printf("    m %6lld  n %6lld  k %6lld  %8.1f TFLOP/s\n", (long long)g.m, (long long)g.n, (long long)g.k,
                  g.gflops / 1e3);
  }
  std::printf("  copy       %.1f GB/s (bytes read and written, %zu MiB device to device)\n", rates.copy_GBps,
              grid.copy_bytes >> 20);
  for (const calibrate::AttentionRate& a : rates.attention)
    std::printf("  attention  B %d  T %5d  %2d heads of %3d: forward %.3f ms, backward %.3f ms, %.1f TFLOP/s\n",
                a.shape.B, a.shape.T, a.shape.NH, a.shape.hs, a.fwd_s * 1e3, a.bwd_s * 1e3, a.tflops());
  const calibrate::KindRates& kinds = rates.kinds;
  std::printf("  kinds      the planner's bytes over the kernels' time: norms %.1f GB/s (layernorm %d x %d), "
              "elementwise %.1f GB/s (residual add, GELU), loss %.1f GB/s (cross-entropy %d x %d)\n",
              kinds.norm.GBps(), kinds.shape.norm_N, kinds.shape.C, kinds.elementwise.GBps(), kinds.loss.GBps(),
              kinds.shape.loss_N, kinds.shape.V);
  std::printf("  launch     empty kernel: %.2f us to issue, %.2f us on the device, %.2f us issue to done "
              "(host_op_us)\n",
              launch.host_us, launch.device_us, launch.wall_us);
  for (const auto& [op, v] : fits)
    for (const planner::CollectiveFit& x : v)
      std::printf("  %-15s %3lld ranks  alpha %8.2f us  bus %8.1f GB/s\n", op.c_str(), (long long)x.group_size,
                  x.alpha_us, x.GBps);
  const calibrate::OverlapSlowdown& o = rates.overlap;
  if (o.overlapped)
    std::printf("  overlap    %d GEMMs %dx%dx%d: %.3f ms alone, %.3f ms beside %d all_reduces of %zu MiB: "
                "slowdown %.3f (median of %zu, the rank slowed most)\n",
                o.gemms, o.probe.m, o.probe.n, o.probe.k, o.gemm_alone_s * 1e3, o.gemm_with_s * 1e3, o.collectives,
                o.probe.message_bytes >> 20, o.slowdown, o.repeats.size());
  else
    std::printf("  overlap    not measured: %s\n", o.why_not.c_str());
  const calibrate::GemmSpread& s = rates.spread;
  if (s.measured())
    std::printf("  spread     GEMM %dx%dx%d on %d GPUs: %.4f .. %.4f ms (median %.4f): sd over median %.4f "
                "(gemm_spread)\n",
                s.probe.m, s.probe.n, s.probe.k, s.ranks, s.min_s * 1e3, s.max_s * 1e3, s.median_s * 1e3, s.spread);
  else
    std::printf("  spread     not measured: %s\n", s.why_not.c_str());
  std::printf("  nodes      %d, %d ranks per node; memory %.1f GB per GPU\n", nodes, c.ranks_per_node, c.memory_GB);
  check_written_figures(m);
  write_output_file(f.out,
                    "# parabench calibrate --device cuda: " + info.name + "'s profile for `parabench plan --machine " +
                        f.out + "`\n" + planner::machine_toml(m),
                    "--out", {});
  planner::load_machine(f.out);  // what plan reads back
  std::printf("wrote %s\n", f.out.c_str());
  return 0;
#else
  return 2;  // not reached: cuda_unavailable() said why
#endif
}

int run_calibrate(const CalibrateFlags& f, const Env& env) {
  require(f.seconds > 0 && f.seconds <= 60, "--seconds: must be in (0, 60], got " + std::to_string(f.seconds));
  if (f.device == "cuda") return run_calibrate_cuda(f, env);
  require(!env.under_mpirun, "calibrate: runs in one process (the local backend's figures); not under mpirun");
  check_output_path(f.out, "--out", {f.inter_node});  // before the measurements, not after
  check_shapes(f);
  // Read first: a bad file fails before the measurements, not after.
  std::optional<planner::InterNodeFit> inter;
  if (!f.inter_node.empty()) {
    inter = planner::fit_inter_node(f.inter_node);
    // A fit is a link's only when its figures are: timings equal, tiny or
    // falling with size fit an infinite, zero or absurd bandwidth.
    char got[96];
    std::snprintf(got, sizeof got, "a bandwidth of %.4g GB/s and %.4g us per ring step", inter->GBps,
                  inter->latency_us);
    require(std::isfinite(inter->GBps) && inter->GBps >= kMinGBps && inter->GBps <= kMaxGBps &&
                std::isfinite(inter->latency_us) && inter->latency_us >= 0 && inter->latency_us <= kMaxLatencyUs,
            "--inter-node: the all_reduce rows of " + f.inter_node + " fit " + got +
                ", not a link's (a bandwidth in [1e-3, 1e6] GB/s, a latency in [0, 1e7] us): timings too small, too "
                "large or not growing with size; measure again");
  }
  planner::MachineProfile m;
  m.hw.machine = f.name.empty() ? host_name() : f.name;
  require(!m.name().empty() && m.name().size() <= 64, "--name: must be 1 to 64 characters");
  // Each training shape: its step's windows and the copies side by side
  // (about a second and a half for tiny or small; longer for larger shapes).
  std::printf("calibrating %s (about %.0f s%s)\n", m.name().c_str(),
              40 * f.seconds + 3 + (no_shapes(f) ? 0.0 : 1.5 * double(f.models.size())),
              no_shapes(f) ? "" : ", longer for large training shapes");
  const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
  double gf_fp32 = 0;
  for (int n : {256, 512, 1024}) gf_fp32 = std::max(gf_fp32, kernels::measure_sgemm_gflops(n, f.seconds));
  // The training shapes' windows, three spread over the rest (shape_windows).
  std::vector<ShapeCalibration> shapes(no_shapes(f) ? 0 : f.models.size());
  if (!shapes.empty()) shape_windows(f, shapes, gf_fp32 * 1e9, cores);
  const double gf_bf16 = calibrate_matmul_gflops<pb::bf16>(512, 512, 512, f.seconds),
               gf_fp64 = calibrate_matmul_gflops<double>(512, 512, 512, f.seconds);
  m.peak_tflops_fp32 = gf_fp32 / 1e3;
  m.peak_tflops_bf16 = gf_bf16 / 1e3;
  m.peak_tflops_fp64 = gf_fp64 / 1e3;
  for (const std::string& p : planner::gemm_table_precisions()) m.gemm[p] = gemm_table(p, f.seconds / 20);
  const double copy = calibrate::copy_bandwidth_GBps();
  m.hw.mem_bw_GBps = 2 * copy;
  if (!shapes.empty()) shape_windows(f, shapes, gf_fp32 * 1e9, cores);
  // Two regimes, as nccl-tests reads them: the fixed cost per ring step as
  // the sweep's plan rows measure it (the median over the small sizes, past
  // the 4-byte fast path), the bandwidth from the slope over the large ones.
  std::vector<size_t> sizes;
  for (size_t b = 4; b <= (size_t(16) << 20); b *= 4) sizes.push_back(b);
  const auto xt = calibrate::measure_collective_times("all_reduce", 2, sizes, f.seconds / 3);
  // The per-op fits' sizes (all among the above): the 2-rank all_reduce fit
  // comes from this measurement, and its bandwidth is the profile's link.
  const std::vector<size_t> fit_sizes = {64, 1024, 4096, size_t(1) << 20, size_t(4) << 20, size_t(16) << 20};
  std::vector<std::pair<double, double>> at_fit_sizes;
  for (const auto& [x, t] : xt)
    if (std::find(fit_sizes.begin(), fit_sizes.end(), size_t(x)) != fit_sizes.end()) at_fit_sizes.push_back({x, t});
  const planner::CollectiveFit all_reduce2 = fit_collective("all_reduce", 2, at_fit_sizes);
  // No latency_call_us (0): the cost per call of this backend is in the
  // measured step latency and the fits' alpha (Hardware::latency_call_us).
  m.hw.latency_us = calibrate::local_step_latency_us(2);
  const double fixed = 2 * m.hw.latency_us * 1e-6;  // two ring steps at two ranks
  m.hw.bw_intra_GBps = all_reduce2.GBps;            // bus bytes = S at two ranks
  m.hw.bw_inter_GBps = m.hw.bw_intra_GBps;          // one node, unless measured across nodes
  if (inter) {
    m.hw.bw_inter_GBps = inter->GBps;
    m.hw.latency_inter_us = inter->latency_us;
  }
  // Every op at 2 ranks, one per core and twice as many ranks as cores
  // (time-shared: the fit includes the wake-ups of sleeping ranks).
  std::vector<int> groups = {2};
  for (int g : {cores, 2 * cores})
    if (g > groups.back()) groups.push_back(g);
  std::vector<std::string> back_to_back;  // ops at group sizes the step pattern gave no fit for
  for (int g : groups) {
    std::map<std::string, double> alpha;
    const std::map<std::string, double> bus = calibrate::measure_bus_bandwidth(g, &alpha);
    const double ring = calibrate::local_step_latency_us(g);
    for (const std::string& op : planner::collective_ops()) {
      const auto b = bus.find(op);
      if (b != bus.end()) {
        const auto a = alpha.find(op);
        m.hw.collectives[op].push_back(
            {g, std::max(ring * planner::ring_steps(op, g), a != alpha.end() ? a->second : 0.0), b->second});
      } else {
        back_to_back.push_back(op + " at " + std::to_string(g));
        m.hw.collectives[op].push_back(op == "all_reduce" && g == 2 ? all_reduce2
                                                                     : measured_fit(op, g, fit_sizes, f.seconds / 20));
      }
    }
  }
  m.wake_us = wake_up_us(20);
  if (!shapes.empty()) shape_windows(f, shapes, gf_fp32 * 1e9, cores);
  // The ranks of a local run share the machine's memory: a rank's device
  // memory is its share (the planner checks one rank against it).
  m.ranks_per_node = int(std::max(1u, std::thread::hardware_concurrency()));
  const double installed = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE)) / 1e9;
  m.hw.memory_GB = installed / m.ranks_per_node;
  for (size_t k = 0; k < shapes.size(); ++k) finish_shape(f, f.models[k], m, gf_fp32 * 1e9, shapes[k]);
  std::sort(shapes.begin(), shapes.end(),
            [](const ShapeCalibration& a, const ShapeCalibration& b) { return a.figures.work < b.figures.work; });
  std::string workloads;
  for (const ShapeCalibration& s : shapes) {
    m.shapes.push_back(s.figures);
    workloads += (workloads.empty() ? "" : "; ") + s.figures.workload;
  }
  m.source = "parabench calibrate on " + host_name() + " at " + iso8601_utc(std::chrono::system_clock::now()) +
             " (git " + env.git_rev + "): one core's GEMM rates (peaks and tables by shape), memcpy bandwidth, local "
             "collective fits by op and group size over threads (timed as a step makes them), wake-up after a 3 "
             "ms skew" +
             (shapes.empty() ? std::string() : "; memory-bound rates, compute and corun scales of " + workloads) +
             (inter ? "; inter-node link from the all_reduce rows of " + f.inter_node : std::string());

  std::printf("  GEMM, one core        fp32 %.4g GFLOP/s (sgemm, best of 256/512/1024), bf16-mixed %.4g, fp64 %.4g "
              "(matmul_forward at 512)\n",
              gf_fp32, gf_bf16, gf_fp64);
  std::printf("  memory                memcpy %.4g GB/s, %.4g GB installed, %.4g per rank (%d hardware threads)\n",
              copy, installed, m.hw.memory_GB, m.ranks_per_node);
  std::printf("  all_reduce, 2 ranks   t = 2 x %.3g us (median of 16 B .. 4 KiB) + S / %.4g GB/s (slope over 1 .. 16 "
              "MiB):\n",
              m.hw.latency_us, m.hw.bw_intra_GBps);
  for (const auto& [x, t] : xt)
    std::printf("    %10.0f B  %10.3f us  (model %10.3f us)\n", x, t * 1e6,
                (fixed + x / (m.hw.bw_intra_GBps * 1e9)) * 1e6);
  for (const auto& [p, table] : m.gemm) {
    double lo = table.front().gflops, hi = lo;
    for (const planner::GemmRate& g : table) lo = std::min(lo, g.gflops), hi = std::max(hi, g.gflops);
    std::printf("  GEMM table %-4s       %zu shapes (m 16..1024 x n, k 64..1024): %.4g .. %.4g GFLOP/s\n", p.c_str(),
                table.size(), lo, hi);
  }
  std::string b2b;
  for (const std::string& x : back_to_back) b2b += (b2b.empty() ? "; back to back (64 B .. 16 MiB) for " : ", ") + x;
  std::printf("  collectives           per call: alpha + bus bytes / B, timed as a step makes them (16 KiB .. 1 "
              "MiB, each call after its rank read its last output and rewrote its input; alpha at least the ring "
              "steps' fixed cost)%s\n",
              b2b.c_str());
  for (const auto& [op, fits] : m.hw.collectives)
    for (const planner::CollectiveFit& c : fits)
      std::printf("    %-15s %2lld ranks  alpha %9.3g us  B %8.4g GB/s%s\n", op.c_str(), (long long)c.group_size,
                  c.alpha_us, c.GBps, c.group_size > cores ? "  (more ranks than cores)" : "");
  if (inter)
    std::printf("  inter-node            all_reduce at %d ranks across nodes (%d rows of %s): %.4g us per ring step, "
                "bus %.4g GB/s\n",
                inter->world, inter->rows, f.inter_node.c_str(), inter->latency_us, inter->GBps);
  std::printf("  wake-up               %.3g us (a rank asleep in a wait, woken by the last arrival; median of 20)\n",
              m.wake_us);
  for (const ShapeCalibration& s : shapes) print_shape(s);
  if (shapes.empty())
    std::printf("  memory-bound work     %.4g GB/s (2 x memcpy: no training shape calibrated, --model none)\n",
                m.hw.mem_bw_GBps);
  else
    std::printf("  a plan takes these figures at its rank's work per block and microbatch, log-linear between the "
                "shapes, the nearest one's beyond them\n");
  check_written_figures(m);
  write_output_file(f.out,
                    "# parabench calibrate: this machine's profile for `parabench plan --machine " + f.out + "`\n" +
                        planner::machine_toml(m),
                    "--out", {f.inter_node});
  planner::load_machine(f.out);  // what plan reads back
  std::printf("wrote %s\n", f.out.c_str());
  return 0;
}

}  // namespace

void register_calibrate(CLI::App& root, Registry& reg, const Env& env) {
  auto f = std::make_shared<CalibrateFlags>();
  CLI::App* app = root.add_subcommand("calibrate", "measure this machine into a profile plan --machine FILE reads");
  app->add_option("--out", f->out, "the profile to write (TOML)")->capture_default_str();
  app->add_option("--name", f->name, "the machine's name in the profile (default: the host name)")
      ->check(non_empty());
  app->add_option("--seconds", f->seconds, "time per measurement, in (0, 60]")->capture_default_str();
  app->add_option("--model", f->models,
                  "the training shapes whose kernels and single-rank steps calibrate the memory-bound rates, "
                  "compute_scale and corun_scale (named models; none: skip)")
      ->capture_default_str();
  app->add_option("--seq", f->seq, "the training shapes' tokens per sequence")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  app->add_option("--microbatch-size", f->microbatch_size, "the training shapes' sequences per microbatch")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 16));
  app->add_option("--microbatches", f->microbatches, "the training shapes' microbatches per step")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 10));
  add_preflight_flags(app, f->limits);
  app->add_option("--inter-node", f->inter_node,
                  "a collectives.csv of `parabench collectives all_reduce` run across nodes: the profile's "
                  "inter-node link (bw_inter_GBps, latency_inter_us) from its rows");
  app->add_option("--device", f->device,
                  "cpu (this machine, one rank per core) or cuda (the GPUs, under mpirun with one rank per GPU: "
                  "cuBLAS GEMMs by shape, device copy, attention kernel, NCCL collectives, kernel launch, GEMMs beside "
                  "all_reduces, the GEMM time's spread across the GPUs)")
      ->capture_default_str()
      ->check(CLI::IsMember({"cpu", "cuda"}));
  reg.push_back({app, [f, app, &env] {
                   f->cpu_only_given.clear();
                   for (const char* flag : {"--model", "--seq", "--microbatch-size", "--microbatches", "--inter-node",
                                            "--max-ranks", "--max-memory"})
                     if (app->count(flag) > 0) f->cpu_only_given.push_back(flag);
                   return run_calibrate(*f, env);
                 }});
}

}  // namespace pb::cli
