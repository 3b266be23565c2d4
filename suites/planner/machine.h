// Machine profiles for the planner (`parabench plan --machine NAME|FILE`):
// what one device and its links can do, so a plan at thousands of ranks needs
// no hand-typed figures. Built in: the datasheet peaks of common training GPUs
// (each with its source); a TOML file gives any other machine (the format
// `parabench calibrate` is to write):
//
//   [machine]
//   name = "my-cluster"            # required
//   source = "where the figures come from"   # required
//   peak_tflops_bf16 = 989.0       # required: dense, per device
//   peak_tflops_fp32 = 66.9        # default: peak_tflops_bf16
//   peak_tflops_fp64 = 66.9        # default: peak_tflops_fp32
//   mem_bw_GBps = 3350.0           # device memory bandwidth, GB/s (0: not timed)
//   bw_intra_GBps = 450.0          # per device, per direction, within a node
//   bw_inter_GBps = 50.0           # per device, per direction, across nodes
//   latency_us = 0.0               # per collective step
//   latency_inter_us = 0.0         # per step across nodes (0: latency_us)
//   latency_call_us = 0.0          # per call of a collective, on top of its steps (NCCL's base)
//   gemm_efficiency = 1.0          # fraction of the peak the GEMMs reach, (0, 1]
//   memory_GB = 80.0               # device memory (0: unknown, no fit check)
//   ranks_per_node = 8             # devices per node
//   rails = 8                      # NICs per node the collectives use (0: bw_inter_GBps per rank);
//                                  # with rails, bw_inter_GBps is one NIC's (planner.h Hardware::rails)
//   oversubscription = 1.0         # >= 1: inter-node bandwidth divided by it for a group
//   leaf_nodes = 0                 #   spanning more than leaf_nodes nodes (0: one leaf)
//   wake_us = 0.0                  # waking a rank asleep in a wait (informational)
//   kernel_launch_us = 0.0         # an empty kernel's launch, back to back (informational)
//   gpu = false                    # true: a device profile (kernels keep their own workspace)
//   gemm_achievable_tflops_bf16 = 794.5  # a microbenchmark's maximum achievable BF16 matmul rate
//   gemm_units = 132               # SMs the GEMM tiles spread over (tile and wave quantization)
//   gemm_tile_m = 256              # output tile rows and columns
//   gemm_tile_n = 128
//   flash_attention_tflops_bf16 = 346.0  # a FlashAttention kernel's BF16 rate (plan --attention flash)
//   overlap_compute_slowdown = 0.189     # compute's slowdown beside a hidden collective (0: overlap is free)
//   host_op_us = 4.0               # host time to issue one framework op (Hardware::host_op_us; 0: not modelled)
//
//   [machine.sources]              # required with gpu = true: one per figure given
//   peak_tflops_bf16 = "NVIDIA H100 SXM5 datasheet"
//   bw_intra_GBps = "nccl-tests issue 212: busBw 370 GB/s"   # ...
//   [machine.sources.gemm]         # optional: the tables' sources (calibrate --device cuda writes them)
//   bf16 = "measured by parabench calibrate --device cuda: ..."
//   [machine.sources.collective]
//   all_reduce = "..."
//
//
//   # Optional measured tables (parabench calibrate writes them):
//   [machine.gemm.fp32]            # also bf16, fp64: C (m x n) = A (m x k) B^T
//   m = [64, 256]                  # rows; n, k and gflops alike, one entry per shape
//   n = [512, 512]
//   k = [512, 512]
//   gflops = [80.0, 95.0]          # per device
//   [machine.collective.all_reduce]   # also reduce_scatter, all_gather, all_to_all, send_recv
//   group_size = [2, 4]            # per call: alpha_us + bus bytes / GBps (intra-node)
//   alpha_us = [3.1, 20.0]
//   GBps = [9.5, 6.0]
//   [machine.shape]                # training shapes measured (ShapeFigures), ascending work
//   workload = ["tiny, seq 16, 2 microbatches of 4, fp32", "small, seq 16, 2 microbatches of 4, fp32"]
//   work = [1.5e6, 2.6e7]          # FLOPs of one block for one microbatch (shape_work)
//   mem_bw_GBps = [7.4, 7.6]       # the memory-bound kernels' average rate at the shape
//   shared_mem_bw_GBps = [32.0, 28.0]     # LayerNorms and residual adds
//   optimizer_mem_bw_GBps = [27.0, 23.0]  # the optimizer step
//   buffer_mem_bw_GBps = [105.0, 51.0]    # data-parallel buffers
//   compute_scale = [1.10, 1.02]   # the shape's measured single-rank step over its plan
//   corun_scale = [1.09, 1.00]     # that step as ranks_per_node copies side by side over alone
//
// With a GEMM table for the plan's precision the planner takes the model's
// GEMM efficiency from it at a rank's shapes (its tp and cp shards) (gemm_efficiency is then
// unused); with a collective fit an intra-node collective of that op costs
// the fit of the nearest group size (planner.h); with training shapes, a
// plan of a model shape takes their figures at its rank's work per block
// (shape_figures_at).
//
// Figures are peaks from datasheets unless a calibration measured them: a plan
// at peak (gemm_efficiency 1) is an upper bound on throughput.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "reference/train_config.h"
#include "suites/planner/planner.h"

namespace pb::planner {

// What `parabench calibrate --model` measured of one training shape
// (`workload` names it) at `work` (shape_work: its FLOPs per block and
// microbatch): planner::Hardware's fields of the same names, corun_scale at
// the profile's ranks_per_node copies. Small shapes cost their calls more
// than their FLOPs on a CPU: tiny's step ran 1.10 x its rates' plan here,
// small's 1.02.
struct ShapeFigures {
  std::string workload;
  double work = 0;
  double mem_bw_GBps = 0, shared_mem_bw_GBps = 0, optimizer_mem_bw_GBps = 0, buffer_mem_bw_GBps = 0;
  double compute_scale = 1, corun_scale = 1;
};

// A machine: the planner's Hardware for every plan on it, with what depends
// on the plan apart (the peaks and GEMM tables by precision, the training
// shapes' figures by work); hardware_for makes one plan's Hardware of it.
struct MachineProfile {
  // The figures every plan on the machine shares: its name (hw.machine),
  // links and latencies, memory bandwidth, GEMM efficiency, device memory,
  // collective fits by op, and hw.host_kernels (false: its ranks are GPUs,
  // the built-ins and a file's machine.gpu, whose kernels keep their own
  // workspaces, so a plan holds none of the CPU kernels'). Left at their
  // defaults: what hardware_for sets by precision (peak_tflops, gemm_rates)
  // and by shape (shared_, optimizer_ and buffer_mem_bw_GBps, compute_scale,
  // corun_scale, corun_ranks; mem_bw_GBps where a shape measured it), and
  // what only a local run measures (core_share, async_call_cost,
  // attention_fwd_s / attention_bwd_s).
  Hardware hw;
  std::string source;
  double peak_tflops_bf16 = 0, peak_tflops_fp32 = 0, peak_tflops_fp64 = 0;
  std::map<std::string, std::vector<GemmRate>, std::less<>> gemm;  // by precision: fp32, bf16, fp64
  // The maximum achievable BF16 matmul rate, TFLOP/s (0: not known); the
  // tile and wave model's units and tile are hw.gemm_units, gemm_tile_m/n.
  double gemm_achievable_tflops_bf16 = 0;
  // A FlashAttention kernel's BF16 rate, TFLOP/s (Hardware::flash_attention_tflops; 0: none).
  double flash_attention_tflops_bf16 = 0;
  // Its BF16 rates by kernel, head dimension and sequence (Hardware::flash_rates;
  // built-in profiles only, from the kernels' published benchmarks; source
  // "flash_attention_rates").
  std::vector<Hardware::AttentionRate> flash_rates_bf16;
  // Where each figure comes from, by its TOML key without "machine."
  // (peak_tflops_bf16, mem_bw_GBps, bw_intra_GBps, ...): a GPU profile
  // (machine.gpu) names a source for every figure it gives ([machine.sources]).
  std::map<std::string, std::string, std::less<>> sources{};
  int ranks_per_node = 1;
  double wake_us = 0;
  // parabench calibrate --device cuda: an empty kernel's launch, us per
  // launch back to back (kernels/cuda/gpu.h LaunchCost::wall_us; 0: not
  // measured). Informational: no plan term reads it yet. Its tables' sources
  // are sources["gemm.<precision>"] and sources["collective.<op>"] (TOML
  // [machine.sources.gemm] bf16 = "...", [machine.sources.collective] ...).
  double kernel_launch_us = 0;
  // Calibrated training shapes (parabench calibrate --model), ascending
  // work; none in the built-ins.
  std::vector<ShapeFigures> shapes{};
  const std::string& name() const { return hw.machine; }
};

// The work measure of the shape figures: the FLOPs (model, no
// recomputation) of one block, the model's average, for one microbatch of b
// sequences of s tokens on a rank of tp x cp.
double shape_work(const ModelConfig& m, int64_t b, int64_t s, int tp, int cp);
// The figures at `work`: each field linear in log(work) between the two
// measured shapes around it, the nearest one's beyond them (none: a default
// ShapeFigures).
ShapeFigures shape_figures_at(const std::vector<ShapeFigures>& shapes, double work);

// The GEMM table keys (precisions) and collective ops a profile may give.
const std::vector<std::string>& gemm_table_precisions();
const std::vector<std::string>& collective_ops();
// The figures a profile's [machine] table may give (its keys without
// "machine."), each of which [machine.sources] may name a source for.
const std::vector<std::string>& profile_figures();

const std::vector<MachineProfile>& builtin_machines();
// The built-in profile a device's name names ("NVIDIA H100 80GB HBM3" ->
// h100, case-insensitive, the first whose name occurs in it as a word start);
// null when none, and for the form factors whose datasheet peaks differ
// from the profile's part ("H100 PCIe", "H100 NVL", "H200 NVL", "GB200").
const MachineProfile* machine_for_device(const std::string& device_name);
// A built-in name (case-insensitive) or a TOML file as above; InputError
// naming the unknown name (with the list) or the file and key.
MachineProfile load_machine(const std::string& name_or_file);
// The planner's hardware for a run at `precision` on this machine: m.hw with
// the precision's peak and GEMM table.
Hardware hardware_for(const MachineProfile& m, Precision precision);
// ... for plan `in` (its precision): with training shapes and a model shape,
// their figures at its rank's work (memory-bound rates, compute_scale,
// corun_scale at ranks_per_node).
Hardware hardware_for(const MachineProfile& m, const PlanInput& in);

// The profile as the TOML load_machine reads (what `parabench calibrate`
// writes): every field, the numbers to 6 significant digits.
std::string machine_toml(const MachineProfile& m);

// The least-squares line t = a + b * x through (x, t) points (x: bytes, t:
// seconds). InputError with fewer than two distinct x or a value that is not
// finite.
struct LineFit {
  double intercept = 0, slope = 0;
};
LineFit fit_line(const std::vector<std::pair<double, double>>& xt);

// An op's alpha-beta at n ranks from (logical bytes, seconds) points: GBps is
// 1 / the least-squares slope of time over bus bytes (bus_bytes) of the
// sizes of 1 MiB and more (at least two distinct ones), alpha_us the median
// time of the sizes up to small_max bytes (the line's intercept, at least 0,
// when there are none). InputError starting with `what` for too few large
// sizes or times that do not grow with size (`hint` appended).
CollectiveFit fit_alpha_beta(std::string_view op, int64_t n, const std::vector<std::pair<double, double>>& xt,
                             double small_max, const std::string& what, const std::string& hint = "");

// The inter-node link measured by `parabench collectives all_reduce` across
// nodes (under mpirun over two or more hosts): from the CSV's ok, fp32, out
// of place all_reduce rows whose ranks spanned 2+ nodes, one world size (the
// largest), t = alpha + bus bytes / GBps with GBps the inverse slope over the
// sizes of 1 MiB and more and alpha the median time of those up to 64 KiB
// (the fit's intercept, at least 0, when there are none); per ring step
// latency_us = alpha / (2 (world - 1)). InputError naming the file and what
// it lacks.
struct InterNodeFit {
  int world = 0, rows = 0;
  double latency_us = 0, GBps = 0;
};
InterNodeFit fit_inter_node(const std::string& collectives_csv);

}  // namespace pb::planner
