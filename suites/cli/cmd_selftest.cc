// parabench selftest: a vendor's first command. Briefly, on this machine:
// every CPU kernel at fp32 and bf16 against itself at fp64
// (suites/selftest/kernel_checks.h); every collective on the local backend
// with nccl-tests' #wrong check, out of place and in place, over sizes from
// 8 B to 1 MiB; a two-step conformance point of every strategy family (the
// engine of `check`: truth, floor, bitwise where declared, memory and bytes
// exact); on a GPU, every op of the device seam against the CPU's op by op
// (suites/selftest/device_checks.h), two steps of the single-device
// reference against the CPU's, then NCCL's collectives and the strategies on
// that GPU (a world of one). Then what it could not run here and why (the
// GPU parts without a GPU, NCCL, the MPI backend outside mpirun). Exit 0 when
// everything it ran passed, 1 otherwise.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "harness/comm/comm_backends.h"
#include "harness/comm/runner.h"
#include "harness/status.h"
#include "suites/cli/command.h"
#include "suites/cli/common.h"
#include "suites/cli/conformance_output.h"
#include "suites/collectives/coll.h"
#include "suites/collectives/driver.h"
#include "suites/conformance/engine.h"
#include "suites/selftest/device_checks.h"
#include "suites/selftest/kernel_checks.h"
#include "reference/trainer.h"

namespace pb::cli {
namespace {

using coll::all_colls;
using coll::BenchOptions;
using coll::BenchPoint;
using coll::CollDesc;
using coll::run_collective;

struct SelftestTally {
  int ran = 0, failed = 0;
  std::vector<std::string> skipped;  // "what: why"
};

double selftest_seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

void selftest_kernels(SelftestTally& t) {
  const auto start = std::chrono::steady_clock::now();
  const auto checks = selftest::check_cpu_kernels();
  std::printf("kernels (CPU, against fp64 on the same inputs; relative L2 error, tolerance fp32 %.2g, bf16 %.3g)\n",
              selftest::kernel_tolerance(DType::f32), selftest::kernel_tolerance(DType::bf16));
  std::printf("  %-32s %12s %12s  %s\n", "op", "fp32", "bf16", "result");
  for (size_t i = 0; i < checks.size(); ++i) {
    if (checks[i].dtype != DType::f32) continue;
    const selftest::KernelCheck* b = nullptr;  // the same op at bf16
    for (const auto& c : checks)
      if (c.dtype == DType::bf16 && c.op == checks[i].op) b = &c;
    const bool pass = checks[i].pass && (!b || b->pass);
    std::printf("  %-32s %12.3g %12.3g  %s\n", checks[i].op.c_str(), checks[i].error, b ? b->error : 0.0,
                pass ? "ok" : "FAIL");
  }
  for (const auto& c : checks) {
    ++t.ran;
    t.failed += !c.pass;
  }
  std::printf("  %zu checks in %.2f s\n\n", checks.size(), selftest_seconds_since(start));
}

// Every collective on `world` at fp32, bf16 and fp64, with nccl-tests' #wrong
// check, out of place and in place, 8 B to 1 MiB.
void selftest_collectives_on(SelftestTally& t, World& world) {
  BenchOptions o;
  o.min_bytes = 8;
  o.max_bytes = size_t(1) << 20;
  o.step_factor = 16;
  o.iters = 1;
  o.warmup = 0;
  o.check = 1;
  o.average = 0;
  for (const CollDesc* op : all_colls()) {
    for (DType dt : {DType::f32, DType::bf16, DType::f64}) {
      long wrong = 0;
      int points = 0;
      std::mutex mu;
      run_ranks(world, [&](Communicator& c) {
        run_collective(c, *op, dt, ReduceOp::sum, op->rooted ? 0 : -1, o, [&](const BenchPoint& a, const BenchPoint& b) {
          std::lock_guard lk(mu);
          ++points;
          wrong += std::max(0L, a.wrong) + std::max(0L, b.wrong);
        });
      });
      std::printf("  %-16s %-5s %3d sizes  #wrong %ld  %s\n", std::string(op->name).c_str(),
                  std::string(dtype_name(dt)).c_str(), points, wrong, wrong == 0 && points > 0 ? "ok" : "FAIL");
      ++t.ran;
      t.failed += wrong != 0 || points == 0;
    }
  }
}

void selftest_collectives(SelftestTally& t) {
  const auto start = std::chrono::steady_clock::now();
  constexpr int kWorld = 4;
  std::printf("collectives (local backend, %d ranks as threads; #wrong elements, out of place / in place, 8 B to 1 MiB)\n",
              kWorld);
  WorldOptions w;
  w.size = kWorld;
  auto world = make_local_world(w);
  selftest_collectives_on(t, *world);
  std::printf("  in %.2f s\n\n", selftest_seconds_since(start));
}

struct SelftestPoint {
  const char* family;
  const char* model;  // "" : check's default for the mesh
  const char* mesh;
  const char* strategy;
};

void selftest_strategies(SelftestTally& t) {
  const auto start = std::chrono::steady_clock::now();
  const std::vector<SelftestPoint> points = {
      {"data parallel", "", "dp2", "shard=none"},
      {"data parallel", "", "dp2", "shard=zero1"},
      {"data parallel", "", "dp2", "shard=zero2"},
      {"data parallel", "", "dp2", "shard=zero3"},
      {"data parallel", "", "dp2", "shard=zero2,offload=optimizer"},
      {"data parallel", "", "dp4.rpn2", "shard=hsdp"},
      {"data parallel", "", "dp4.rpn2", "shard=hzero"},
      {"pipeline", "", "pp2", "schedule=gpipe"},
      {"pipeline", "", "pp2", "schedule=1f1b"},
      {"pipeline", "", "pp2", "schedule=interleaved,virtual_stages=2"},
      {"pipeline", "", "pp2", "schedule=zb-h1"},
      {"pipeline", "", "pp2", "schedule=2bw"},
      {"tensor parallel", "", "tp2", "shard=none"},
      {"tensor parallel", "", "tp2.sp", "shard=none"},
      {"tensor parallel", "", "tp2", "recompute=full"},
      {"context parallel", "", "cp2", "cp_algo=ring"},
      {"context parallel", "", "cp2", "cp_algo=ulysses"},
      {"mixture of experts", "tiny-moe", "dp2", "shard=none"},
      {"expert parallel", "tiny-moe", "dp2.ep2", "shard=none"},
      {"composed", "", "dp2.tp2.pp2", "shard=zero1,schedule=1f1b"},
  };
  std::printf("strategies (two steps each at fp32, local backend: the rule against fp64, bitwise where declared,\n"
              "memory and communication exact against what each rank declares)\n");
  print_result_header();
  for (const SelftestPoint& p : points) {
    ConformanceResult r;
    std::string error;
    try {
      r = run_conformance(check_point(p.model, "fp32", p.mesh, p.strategy, 2));
    } catch (const std::exception& e) {
      error = e.what();
    }
    ++t.ran;
    if (!error.empty()) {
      ++t.failed;
      std::printf("%-34s FAILED to run: %s\n", (std::string(p.mesh) + " " + p.strategy).c_str(), error.c_str());
      continue;
    }
    t.failed += !r.pass();
    print_result_row(r);
    if (!r.pass()) std::printf("    %s\n", describe_failures(r).c_str());
  }
  std::printf("  %zu points in %.2f s\n\n", points.size(), selftest_seconds_since(start));
}

// The single-device reference on GPU 0 against the same run on the CPU:
// two steps of the tiny model, fp32 and bf16-mixed (train.device = cuda).
// Not bitwise (cuBLAS and the kernels' reduction orders are not the CPU's):
// step 1's loss and gradient norm within 1e-4 relative at fp32 (2e-2 at
// bf16), step 2's loss within 1e-3 (2e-2). Returns "" when it ran, else why not.
std::string selftest_gpu_reference(SelftestTally& t) {
  if (std::string why = cuda_unavailable(); !why.empty()) return why;
  const std::shared_ptr<TrainDevice> gpu0 = open_cuda_device(0);
  const TrainDevice& dev = *gpu0;
  std::printf("the reference on %s against the CPU (tiny model, 2 steps)\n", dev.name.c_str());
  for (Precision p : {Precision::fp32, Precision::bf16_mixed}) {
    TrainConfig cfg;
    cfg.model = named_model("tiny");
    cfg.precision = p;
    cfg.steps = 2;
    auto cpu = make_reference_trainer(cfg);
    cfg.device = Device::cuda;
    auto gpu = make_reference_trainer(cfg, SplitPlan{}, &dev);
    const double tol1 = p == Precision::fp32 ? 1e-4 : 2e-2, tol2 = p == Precision::fp32 ? 1e-3 : 2e-2;
    bool pass = true;
    for (int s = 0; s < 2; ++s) {
      const StepStats a = cpu->step(), b = gpu->step();
      auto rel = [](double x, double y) { return std::abs(x - y) / std::max(std::abs(x), 1e-30); };
      const double el = rel(a.loss, b.loss), en = rel(a.grad_norm, b.grad_norm);
      const bool ok = el <= (s ? tol2 : tol1) && (s || en <= tol1);
      pass &= ok;
      std::printf("  %-11s step %d  loss cpu %.6f gpu %.6f (rel %.2g)  grad norm rel %.2g  %s\n",
                  precision_name(p).c_str(), s + 1, a.loss, b.loss, el, en, ok ? "ok" : "FAIL");
    }
    ++t.ran;
    t.failed += !pass;
  }
  std::printf("\n");
  return "";
}

// Every op of the device seam on GPU 0 against the CPU's ops on the same
// inputs, fp32 and bf16, over shapes that cross the kernels' tiles
// (suites/selftest/device_checks.h). Returns "" when it ran, else why not.
std::string selftest_gpu_kernels(SelftestTally& t) {
  if (std::string why = cuda_unavailable(); !why.empty()) return why;
  const auto start = std::chrono::steady_clock::now();
  const std::shared_ptr<TrainDevice> gpu0 = open_cuda_device(0);
  const std::vector<selftest::DeviceCheck> checks = selftest::check_device_ops(*gpu0);
  std::printf("kernels on %s against the CPU's, op by op (max |gpu - cpu| / max |cpu| over the shapes)\n%s",
              gpu0->name.c_str(), selftest::device_check_table(checks).c_str());
  for (const auto& c : checks) {
    ++t.ran;
    t.failed += !c.pass;
  }
  std::printf("  %zu checks in %.2f s\n\n", checks.size(), selftest_seconds_since(start));
  return "";
}

// NCCL on this process's GPU, a world of one (the process an MPI singleton):
// every collective with the #wrong check, then two steps of each
// data-parallel strategy (and ZeRO-2 with the optimizer offloaded: the
// host's step between the GPU's copies), of the tensor-parallel runner (tp 1 with selective
// recompute: the vocabulary-parallel lookup and cross-entropy, the biases and
// positions by rows), of the pipeline executor (two chunks handed over on
// the GPU, and 2BW's weight versions) and of a mixture-of-experts model (the
// MoE MLP's rows and experts on the GPU, its routing on the host between
// them) on the GPU under the engine
// (device memory and streams, the nccl backend with its host staging and
// event ordering; the GPU's own reference a floor of the rule). Several GPUs:
// `mpirun -np N parabench train --device cuda --mesh dpN` (or dpN.tpT.ppM).
// Returns "" when it ran, else why not.
std::string selftest_gpu_nccl(SelftestTally& t) {
  if (std::string why = cuda_unavailable(); !why.empty()) return why;
  if (!backend_built(BackendKind::nccl)) return "this build has no nccl backend (CMake found no NCCL or MPI)";
  WorldOptions wo;
  wo.backend = BackendKind::nccl;
  wo.size = 0;  // the launched world: this process
  auto world = make_world(wo);
  const auto start = std::chrono::steady_clock::now();
  std::printf("collectives over nccl (a world of one; #wrong elements, 8 B to 1 MiB)\n");
  selftest_collectives_on(t, *world);
  std::printf("  in %.2f s\n\n", selftest_seconds_since(start));
  std::printf("data-parallel strategies, the tensor-parallel runner, pipeline schedules and a mixture of experts on "
              "the GPU over nccl (two steps each at fp32, one rank)\n");
  print_result_header();
  const std::pair<const char*, const char*> points[] = {
      {"", "shard=none"},          {"", "shard=zero1"},
      {"", "shard=zero2"},         {"", "shard=zero3"},
      {"", "shard=zero2,offload=optimizer"},
      {"", "recompute=selective"}, {"", "schedule=interleaved,virtual_stages=2"},
      {"", "schedule=2bw"},        {"tiny-moe", "shard=none"}};
  for (const auto& [model, strategy] : points) {
    StrategyRun s = check_point(model, "fp32", "dp1", strategy, 2);
    s.spec.train.device = Device::cuda;
    s.world = wo;
    s.open_device = rank_device_opener();  // the GPU the nccl backend chose
    ++t.ran;
    try {
      const ConformanceResult r = run_conformance(s, *world);
      t.failed += !r.pass();
      print_result_row(r);
      if (!r.pass()) std::printf("    %s\n", describe_failures(r).c_str());
    } catch (const std::exception& e) {
      ++t.failed;
      std::printf("%-34s FAILED to run: %s\n", strategy, e.what());
    }
  }
  std::printf("\n");
  return "";
}

// What this machine cannot run, and why.
void selftest_unavailable(SelftestTally& t, const Env& env, const std::string& gpu_kernels,
                          const std::string& gpu_reference, const std::string& gpu_nccl) {
  std::error_code ec;
  const bool nvidia = std::filesystem::exists("/dev/nvidiactl", ec) || std::filesystem::exists("/dev/nvidia0", ec);
  const bool amd = std::filesystem::exists("/dev/kfd", ec);
  const std::string gpu = nvidia ? "an NVIDIA device is present"
                          : amd  ? "an AMD device (/dev/kfd) is present; parabench has no HIP backend"
                                 : "no GPU (no /dev/nvidiactl, /dev/nvidia0 or /dev/kfd)";
  if (!gpu_kernels.empty())
    t.skipped.push_back("CUDA kernels against the CPU, op by op: " + gpu + "; " + gpu_kernels);
  if (!gpu_reference.empty())
    t.skipped.push_back("the reference on a GPU against the CPU (train.device = cuda): " + gpu_reference);
  if (!gpu_nccl.empty())
    t.skipped.push_back("NCCL collectives, the data-parallel strategies, the tensor-parallel runner and pipeline schedules on a GPU: " + gpu_nccl);
  if (!env.under_mpirun)
    t.skipped.push_back(
        "MPI backend: not under mpirun (run `mpirun -np 4 parabench collectives` and `mpirun -np 4 parabench check "
        "--mesh dp4`)");
}

int run_selftest(const Env& env) {
  require(!env.under_mpirun,
          "selftest: runs in one process on the local backend; under mpirun use `parabench collectives` and "
          "`parabench check` (every rank runs them)");
  const auto start = std::chrono::steady_clock::now();
  SelftestTally t;
  selftest_kernels(t);
  selftest_collectives(t);
  selftest_strategies(t);
  // A GPU part that fails to open or run (a device, NCCL or MPI failing to
  // start) is a failure, named; one that cannot run here says why.
  auto gpu_part = [&t](const char* what, std::string (*part)(SelftestTally&)) {
    try {
      return part(t);
    } catch (const std::exception& e) {
      std::printf("%s: FAILED to run: %s\n\n", what, e.what());
      ++t.ran;
      ++t.failed;
      return std::string();
    }
  };
  const std::string gpu_kernels = gpu_part("kernels on a GPU", selftest_gpu_kernels);
  const std::string gpu_reference = gpu_part("the reference on a GPU", selftest_gpu_reference);
  const std::string gpu_nccl = gpu_part("NCCL on a GPU", selftest_gpu_nccl);
  selftest_unavailable(t, env, gpu_kernels, gpu_reference, gpu_nccl);
  std::printf("not run on this machine:\n");
  for (const auto& s : t.skipped) std::printf("  - %s\n", s.c_str());
  std::printf("\nselftest: %d checks, %d failed, %zu parts not run; %.1f s\n", t.ran, t.failed, t.skipped.size(),
              selftest_seconds_since(start));
  return t.failed ? 1 : 0;
}

}  // namespace

void register_selftest(CLI::App& root, Registry& reg, const Env& env) {
  CLI::App* app = root.add_subcommand(
      "selftest", "every CPU kernel, collective and strategy family, briefly; says what it could not run and why");
  reg.push_back({app, [&env] { return run_selftest(env); }});
}

}  // namespace pb::cli
