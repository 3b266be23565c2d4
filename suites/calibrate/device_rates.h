// What `parabench calibrate --device cuda` measures of a device, through the
// device seam (kernels/common/device_ops.h) so that the same code runs on a
// GPU (kernels/cuda/gpu.h) and, in tests, on the CPU stand-in device
// (docs/gpu.md): the project's GEMM (matmul_forward: cuBLAS GemmEx on a GPU)
// over a grid of shapes, a device-to-device copy (the achieved memory
// bandwidth), the project's attention kernel forward and backward, its
// memory-bound kernels by kind (LayerNorm, residual add and GELU,
// cross-entropy: at the planner's own byte counts), each timed
// on the device (DeviceTimeline: CUDA events on the GPU's stream); and the
// collectives' alpha-beta fits by group size from the collective benchmark's
// driver (suites/collectives/driver.h, nccl-tests' method) on any world (NCCL
// under mpirun; the local backend in tests); and compute's slowdown beside a
// collective (measure_overlap_slowdown: a GEMM batch alone, then beside
// all_reduces in flight on the communicator's own stream, as the engine
// overlaps its DP collectives); and one GEMM's time on every rank's GPU at
// once (measure_gemm_spread: how far identical GPUs differ). device_profile turns them into
// a machine profile (suites/planner/machine.h) with gpu = true and a source
// for every figure it writes.
// Invariant: every figure in a DeviceRates was timed here; nothing is filled
// in from a table.
#pragma once
#include <string>
#include <vector>

#include "harness/comm/runner.h"
#include "harness/memory.h"
#include "kernels/common/device_ops.h"
#include "suites/planner/machine.h"

namespace pb::calibrate {

// The shapes to time. GEMM: out (m x n) = inp (m x k) W^T for every m, n, k
// of the lists; attention: causal, B sequences of T tokens, NH heads of hs.
struct DeviceGrid {
  std::vector<int> gemm_m = {256, 1024, 4096, 16384};
  std::vector<int> gemm_nk = {1024, 4096, 16384};
  size_t copy_bytes = size_t(1) << 30;  // the copy's source (and destination) size
  struct AttentionShape {
    int B = 4, T = 2048, NH = 16, hs = 128;
  };
  std::vector<AttentionShape> attention = {{8, 512, 16, 64}, {4, 1024, 16, 64}, {4, 2048, 16, 64},
                                           {8, 512, 16, 128}, {4, 1024, 16, 128}, {4, 2048, 16, 128}};
  // The memory-bound kernels by kind (planner::Hardware::norm_mem_bw_GBps
  // ...), bf16: the norms as layernorm_forward + layernorm_backward over
  // norm_N rows of C; the elementwise kind as residual_forward over norm_N x C
  // and gelu_forward + gelu_backward over norm_N x 4C (the MLP's hidden); the
  // loss as crossentropy_forward + crossentropy_backward over loss_N rows of
  // V logits. 0 rows: that kind not measured.
  struct KindShape {
    int norm_N = 8192, C = 4096;
    int loss_N = 4096, V = 50304;
  };
  KindShape kinds;
  double seconds = 0.05;  // device time per shape, at least (after a warm-up call)
};

// One memory-bound kind's measurement: the planner's own byte count
// (suites/planner/model_cost.h) for the calls timed, over their device time,
// so that the rate times the planner's bytes gives the measured time.
struct KindMeasure {
  double bytes = 0;    // the planner's count for one call of each kernel, summed
  double seconds = 0;  // the device time of one call of each, summed
  // Not clamped: a time of 0 gives infinity, which calibrate's check of the
  // written figures refuses (cmd_calibrate.cc), never a silent 0.
  double GBps() const { return bytes / seconds / 1e9; }
  bool measured() const { return bytes > 0; }  // the kernels ran
};
struct KindRates {
  DeviceGrid::KindShape shape;
  // norm: layernorm forward + backward, 6 elements per norm element (forward
  // 2, backward 4: head_norm_traffic_bytes). elementwise: residual_forward 3
  // elements per element, gelu_forward 2 and gelu_backward 4 (the GELU's 8h
  // forward and 16h backward per token of layer_traffic_bytes). loss:
  // crossentropy forward + backward, 4 elements per logit (head_traffic_bytes
  // less its norm: PlanInput's default LossKernel::fused).
  KindMeasure norm, elementwise, loss;
  double residual_s = 0, gelu_fwd_s = 0, gelu_bwd_s = 0;  // the elementwise kind's parts, per call
};

struct AttentionRate {
  DeviceGrid::AttentionShape shape;
  double fwd_s = 0, bwd_s = 0;  // per call
  // Causal attention's FLOPs (QK^T and PV, half the square: 2 B NH T^2 hs
  // forward, 2.5 times that backward, FlashAttention's convention) per second.
  double tflops() const;
};

// Compute's slowdown while a collective runs beside it
// (planner::Hardware::overlap_compute_slowdown). On every rank: a batch of
// bf16 GEMMs (m x n x k, matmul_forward) timed on the device alone, then
// again while all_reduces of message_bytes (fp32, in place, over every rank
// of the communicator) issued back to back just before it run non-blocking
// on the communicator's stream, enough of them to run past its end.
struct OverlapProbe {
  int m = 4096, n = 4096, k = 4096;          // the GEMM table's 4096 x 4096 x 4096
  size_t message_bytes = size_t(256) << 20;  // each all_reduce's
  double seconds = 0.05;                     // the batch alone, at least (device time; and 4 all_reduces)
  int repeats = 3;
};
struct OverlapSlowdown {
  OverlapProbe probe;
  int ranks = 0;  // 0: not measured
  // Whether every rank saw at least one all_reduce complete before its batch
  // ended (they ran beside it) and at least one still running at its end.
  // False: no figure (why_not says what happened).
  bool overlapped = false;
  std::string why_not;
  // Each repeat's t_with / t_alone - 1 of the rank it slowed most (not
  // clamped), and their median clamped at >= 0: the figure.
  std::vector<double> repeats;
  double slowdown = 0;
  int gemms = 0;        // calls per batch
  int collectives = 0;  // all_reduces issued beside it (the last repeat's)
  double gemm_alone_s = 0, gemm_with_s = 0;  // the batch, at the median repeat, on the rank it slowed most
  double all_reduce_s = 0;                   // one all_reduce alone, the slowest rank's median of 3
};

// How much one GPU's GEMM time differs from its peers' of the same part
// (planner::Hardware::gemm_spread). On every rank at once: back-to-back bf16
// GEMMs (m x n x k, matmul_forward) for warmup_seconds of device time (on a
// GPU, long enough to reach the power-capped clock: NVIDIA/cutlass 2115eee
// media/docs/cpp/gemm_performance_measurement_methodology_guidelines.md,
// "the GPC clocks were observed to oscillate for around the first 3 seconds
// of runtime before settling"), inputs uniform in [-1, 1] as that guide fills
// GEMMs timed at the power limit, then `repeats` timings of at least
// `seconds` each (device_seconds_per_call), all ranks starting each together
// (a barrier).
struct SpreadProbe {
  int m = 4096, n = 4096, k = 4096;  // the overlap probe's GEMM
  double warmup_seconds = 3;         // device time, before the repeats
  double seconds = 0.05;             // each repeat's device time, at least
  int repeats = 5;
};
struct GemmSpread {
  SpreadProbe probe;
  int ranks = 0;  // 0: not measured
  // Why there is no figure (one rank: no peer to differ from); empty when
  // there is one.
  std::string why_not;
  // Each rank's seconds per GEMM (the median of its repeats), by rank.
  std::vector<double> per_call_s;
  double min_s = 0, median_s = 0, max_s = 0;  // of per_call_s (median: the mean of the middle two when even)
  // The figure: the sample standard deviation (n - 1 denominator) of
  // per_call_s over median_s. A job's GPUs, not a fleet: the planner
  // extrapolates the slowest of a larger world from it.
  double spread = 0;
  bool measured() const { return ranks >= 2 && why_not.empty(); }
};

struct DeviceRates {
  std::vector<planner::GemmRate> gemm_bf16, gemm_fp32;  // per shape, GFLOP/s
  double copy_GBps = 0;                                 // bytes read + written per second
  std::vector<AttentionRate> attention;                 // bf16
  KindRates kinds;                                      // bf16
  OverlapSlowdown overlap;                              // measure_overlap_slowdown's (not measure_device_rates')
  GemmSpread spread;                                    // measure_gemm_spread's (not measure_device_rates')
};

// Seconds per call of `op` on the device of `timeline`: one warm-up call,
// then batches of 1, 2, 4, ... calls between two marks until `min_seconds`
// of device time have passed.
template <class Op>
double device_seconds_per_call(kernels::DeviceTimeline& timeline, const Op& op, double min_seconds) {
  op();
  long calls = 0;
  double seconds = 0;
  for (long batch = 1; seconds < min_seconds || calls == 0; batch *= 2) {
    timeline.clear();
    const int a = timeline.mark();
    for (long i = 0; i < batch; ++i) op();
    const int b = timeline.mark();
    seconds += timeline.seconds(a, b);
    calls += batch;
  }
  return seconds / double(calls);
}

// The grid on one device: bf16 and fp32 storage ops of one device (fp32
// compute in both, as the model's GEMMs) and its memory.
DeviceRates measure_device_rates(const kernels::DeviceOps<bf16>& ops16, const kernels::DeviceOps<float>& ops32,
                                 DeviceMemory& memory, const DeviceGrid& grid);

// The OverlapProbe on every rank of `comm` (call it on each, as a
// collective; at least 2 ranks), with `ops` and `memory` that rank's device
// and `stream` its compute stream (Communicator::order_after while it runs,
// as a training rank sets it; null: none, the stand-in device). The same
// result on every rank. A backend that runs non-blocking collectives only
// when they are waited on (the local backend's deferred progress; MPI
// without a progress thread) completes none beside the batch: overlapped is
// false and why_not says so, never a figure.
OverlapSlowdown measure_overlap_slowdown(Communicator& comm, const kernels::DeviceOps<bf16>& ops, DeviceMemory& memory,
                                         const OverlapProbe& probe, void* stream);

// The SpreadProbe on every rank of `comm` (call it on each, as a
// collective), with `ops`, `memory` and `stream` that rank's as for
// measure_overlap_slowdown. Every rank's time is gathered (all_gather): the
// same result on every rank. One rank: its time, no figure, why_not says so.
GemmSpread measure_gemm_spread(Communicator& comm, const kernels::DeviceOps<bf16>& ops, DeviceMemory& memory,
                               const SpreadProbe& probe, void* stream);

// The collective benchmark's driver (suites/collectives) for each op of
// `ops` (all_reduce, reduce_scatter, all_gather) on the first g ranks of the
// world for each g of `groups` (2 <= g <= world size), fp32, out of place,
// at sizes min_bytes .. max_bytes times 4 (each the slowest rank's mean over
// `iters` calls after `warmup`, results checked `check` times): the alpha-beta fit
// of each (planner::fit_alpha_beta: alpha the median time up to 4 KiB, GBps
// the bus bandwidth from the slope over 1 MiB and more). Runs on every rank
// the world hosts; the fits are those of the process hosting rank 0 (empty
// elsewhere). InputError when a fit's times do not grow with size.
struct CollectiveSweep {
  std::vector<std::string> ops = {"all_reduce", "reduce_scatter", "all_gather"};
  std::vector<int> groups;
  size_t min_bytes = 4, max_bytes = size_t(256) << 20;
  int iters = 20, warmup = 5;
  int check = 1;  // validations of each size's results (the driver's -c)
};
std::map<std::string, std::vector<planner::CollectiveFit>> measure_collective_fits(World& world,
                                                                                   const CollectiveSweep& sweep);
// 2, 4, 8, ... up to n, and n.
std::vector<int> group_sizes(int n);

// Where the device and the run were.
struct DeviceContext {
  std::string device;  // "NVIDIA H100 80GB HBM3"
  std::string date;    // ISO 8601, UTC
  std::string git_rev;
  double memory_GB = 0;
  int ranks_per_node = 1, nodes = 1;
  double launch_us = 0;  // an empty kernel's launch (kernels/cuda/calibrate.h LaunchCost::wall_us); 0: not measured
  // How the figures were taken, as their sources say: the GEMM, the timer,
  // the collectives' backend and their largest size.
  std::string gemm = "matmul_forward (cublasGemmEx, fp32 compute)", timer = "CUDA events", backend = "NCCL";
  size_t max_collective_bytes = size_t(256) << 20;
};

// The profile (gpu = true) of what was measured: GEMM tables (bf16, fp32),
// gemm_achievable_tflops_bf16 (the bf16 table's best), the peaks (the
// datasheet's of the built-in profile the device name matches, when at least
// the measured rate, else the measured best), mem_bw_GBps (the copy),
// flash_attention_tflops_bf16 (the project's attention kernel at the grid's
// last shape), the collective fits of the groups within a node (up to
// c.ranks_per_node ranks), bw_intra_GBps and latency_us (the all_reduce fit
// at the largest of them: bus bandwidth, alpha over its ring steps),
// bw_inter_GBps and latency_inter_us (the all_reduce of every rank when they
// spanned nodes; else the intra-node figure and 0, their sources saying they
// were not measured across nodes), memory_GB, ranks_per_node,
// kernel_launch_us, host_op_us (c.launch_us when measured: this engine's
// launch, a lower bound on a framework's per-op host time; else no figure and
// a source saying so), ring_plateau (1: the measured all_reduce fits hold what
// NCCL's plateau models), the memory-bound kinds (norm_mem_bw_GBps,
// elementwise_mem_bw_GBps, loss_mem_bw_GBps from r.kinds where measured;
// softmax_mem_bw_GBps and eager_norm_mem_bw_GBps never: no project kernel
// times exactly what the planner counts for them, their sources say why),
// overlap_compute_slowdown (r.overlap's figure when it
// overlapped; otherwise no figure and a source saying why it was not
// measured; nothing when r.overlap.ranks is 0), gemm_spread (r.spread's
// figure when measured on 2 or more ranks, InputError naming it when it is
// 0.5 or more: a device that uneven is broken, not a spread; otherwise no
// figure and a source saying why; nothing when r.spread.ranks is 0);
// machine.sources names the measurement, the device and the date of each. InputError without an all_reduce fit within a node or a
// bf16 GEMM table.
planner::MachineProfile device_profile(const std::string& name, const DeviceRates& r,
                                       const std::map<std::string, std::vector<planner::CollectiveFit>>& fits,
                                       const DeviceContext& c);

}  // namespace pb::calibrate
