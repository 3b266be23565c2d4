// The planner's estimate for each measured sweep point (issue 6: "planner vs
// measured"): the `plan` row of the same (strategy, model, precision, mesh,
// global_batch, seq_len), timed with hardware figures measured on this machine
// once per sweep, so the report can show the estimate's error per point.
// Invariant: the local backend runs `world` ranks as threads on `cores` cores,
// so a rank's share of the machine is min(1, cores / world) of one core's GEMM
// peak and one thread's copy bandwidth; the planner is given that share (the
// MFU denominator of the sweep row stays world x the full per-core peak, as
// results/SCHEMA.md defines it).
#pragma once
#include <map>
#include <vector>
#include <tuple>
#include <utility>
#include <string>

#include "harness/io/csv.h"
#include "harness/io/run_meta.h"
#include "reference/model_config.h"
#include "suites/planner/planner.h"
#include "suites/planner/machine.h"
#include "suites/sweep/sweep.h"

namespace pb::sweep {

struct LocalHardware {
  double peak_flops_per_rank = 0;  // one core's dense-GEMM rate, FLOP/s (the sweep's MFU peak)
  double copy_GBps = 0;            // one thread's memcpy bandwidth, GB/s (1e9 bytes)
  double latency_us = 0;           // one ring step, for worlds not in latency_us_by_world
  int cores = 1;                   // hardware threads available to the ranks
  std::map<int, double> latency_us_by_world;  // one ring step at that many ranks (local_step_latency_us)
  // At more ranks than cores: measure_async_call_cost at that many ranks.
  std::map<int, std::vector<planner::AsyncCallCost>> async_call_cost_by_world;
  // Bus bandwidth (GB/s, nccl-tests' bus bytes) by group size, then op,
  // measured on the local backend (measure_bus_bandwidth); a group is
  // measured once even when no op gave a figure; ops or sizes missing use
  // copy_GBps.
  std::map<int, std::map<std::string, double>> bus_GBps{};
  // The fixed part of each op's call, us, by group size, from the same
  // measurement (the fit's intercept); an op not in it, or below the world's
  // ring steps, uses those.
  std::map<int, std::map<std::string, double>> bus_alpha_us{};
};

// Seconds per call of `op` (planner::collective_ops(): all_reduce,
// reduce_scatter, all_gather, all_to_all; send_recv, a ring exchange, each
// rank sending to the next and receiving from the previous) at each total
// logical size in `bytes` (nccl-tests' convention) among n local ranks, fp32:
// rank 0's mean over enough back-to-back calls to fill `seconds` per size,
// after warm-up calls. (logical bytes, seconds) pairs.
std::vector<std::pair<double, double>> measure_collective_times(const std::string& op, int n,
                                                                const std::vector<size_t>& bytes, double seconds);

// The bus bandwidth of every collective op among n local ranks at the sizes
// a step's collectives have (16 KiB .. 1 MiB), timed as a step makes them:
// per size, rank 0's time per call of 15 calls, each after the rank read its
// previous output and rewrote its input, less those reads and writes alone
// (the median of three windows, after 5 ms of warm-up calls); 1 / the median
// of the slopes between every two sizes (time over bus bytes); the median of
// three such fits. With `alpha_us`, that fit's intercept too, per op (us per
// call). An op whose times do not grow with size in two of them is left out.
// The local backend's ops differ by up to 4x here (at 2 ranks, send_recv
// about 4 GB/s, all_reduce 13 back to back), which one copy bandwidth for
// all of them hides.
std::map<std::string, double> measure_bus_bandwidth(int n, std::map<std::string, double>* alpha_us = nullptr);

// What a collective issued without waiting costs `world` ranks time-sharing
// `cores` cores (planner::Hardware::async_call_cost), at four amounts of
// compute between calls (wall 50 us, 250 us, 1 ms, 4 ms at the core share): every
// rank starts a 64 KiB-per-rank all_gather, computes (a spin of calibrated
// length), then waits for the gather, against the same compute alone; the
// difference per call, the median of three windows of about 0.1 s each.
// Only meaningful when world > cores and the world runs its collectives on
// progress threads (`progress`, resolved at `cores`; WorldOptions::Progress):
// empty otherwise. Deferred, they are plain blocking calls made at the wait,
// which the planner times as exposed collectives.
std::vector<planner::AsyncCallCost> measure_async_call_cost(
    int world, int cores, WorldOptions::Progress progress = WorldOptions::Progress::automatic);

// The per-world figures of `world` ranks the plan rows need, measured once:
// its ring step (local_step_latency_us), the bus bandwidth of every op at
// each power-of-two group size up to `world` (the groups its points' axes
// make) and, at more ranks than cores, the cost of a collective issued
// without waiting.
void measure_world(LocalHardware& h, int world);

// One ring step of the local backend's collectives at `world` (>= 2) ranks,
// in microseconds: the median over 16 B .. 4 KiB of an all_reduce's time over
// its 2 (world - 1) steps (at more ranks than cores, wake-ups included); the
// least of three such measurements, each on a fresh world (on this VM the
// first one in a process can take 100x longer: 112 us, then 0.3 us).
double local_step_latency_us(int world);

// One thread's memcpy bandwidth, GB/s (1e9 bytes): the best of four 32 MiB
// copies (the first also faults the pages in).
double copy_bandwidth_GBps();

// Measures copy bandwidth (best of a few 32 MiB memcpys) and the 2-rank ring
// step (the fallback latency); takes the GEMM peak as measured by the sweep.
// The per-world latencies are the caller's to add.
LocalHardware measure_local_hardware(double peak_flops_per_rank, int cores);

// What the planner is told about one rank of a `world`-rank local run: the
// measured figures times the core share; intra = inter bandwidth (one node).
// The measured bus bandwidths become per-op fits (planner::Hardware::
// collectives) whose alpha is the world's ring steps or the measured
// intercept (bus_alpha_us), the larger; a group's figures measured with its
// own g threads are scaled by the world's core share over the group's own
// (cores / g at more threads than cores).
planner::Hardware planner_hardware(const LocalHardware& h, int world);

// Fraction of `peak_flops` (one thread's sgemm rate) that the GEMMs of one
// microbatch of Bm x seq tokens of model m reach on this machine: every GEMM
// of a training step — per block the four linear layers' forward,
// input-gradient and weight-gradient products and the attention core's
// per-head QK^T, PV and their gradients; the LM head's three — timed with
// single-thread sgemm at its own shape and transposes (about `seconds` each).
// Their total FLOPs over their total time, over the peak; at most 1. With tp
// or cp > 1, the GEMMs of one rank of that split (planner::rank_gemms: the
// linear layers' outputs split over tp, the tokens over cp), whose smaller
// shapes run at lower rates (tiny at cp4 measured 0.27 against 0.59 unsplit).
// attention_core = false: the linears and the head only (rank_gemms).
double measure_gemm_efficiency(const ModelConfig& m, int Bm, int seq, double peak_flops, double seconds, int tp = 1,
                               int cp = 1, bool attention_core = true);

// The memory-bound (non-GEMM) side of the same microbatch, measured the same
// way: the fp32 kernels the reference runs besides its GEMMs, each at its own
// shape, timed (median of repeats, at least `seconds` in all), beside the bytes
// the planner counts for them (model_cost.h *_traffic_bytes; the optimizer's
// params, grads and states). Per block: two LayerNorms, two residual adds and
// GELU, forward and backward, and the attention kernel less its four GEMMs
// (timed at their shapes); the embedding; the final LayerNorm and softmax
// cross-entropy; then the step over every parameter: sum of squares (the
// clipping norm) and AdamW. On a CPU these kernels are bound by their scalar
// arithmetic at least as much as by memory, so the figure is an effective
// bandwidth at the model's shapes, not the memcpy rate.
struct MemoryBoundRates {
  double micro_s = 0, micro_bytes = 0;  // one microbatch's non-GEMM kernels, forward and backward
  double step_s = 0, step_bytes = 0;    // one optimizer step (norm and AdamW) over the whole model
  // Of micro_s and micro_bytes: the layers' LayerNorms and residual adds
  // (planner::layer_shared_traffic_bytes), what sequence parallel shards.
  double shared_s = 0, shared_bytes = 0;
  // The data-parallel components' buffer traffic, unit by unit over the
  // model (dp::local_traffic_bytes; planner::Hardware::buffer_mem_bw_GBps):
  // a tracked buffer allocated zero-filled, a copy into it, an add out of it.
  double buffer_s = 0, buffer_bytes = 0;
  // GB/s over a step of `microbatches` microbatches, the shared kernels and
  // the optimizer step left out (they have their own rates); 0 when nothing
  // was measured. A figure with no optimizer step measured (step_s 0) is the
  // microbatches' alone.
  double GBps(int64_t microbatches) const;
  double shared_GBps() const;     // shared_bytes / shared_s; 0 when not measured
  double optimizer_GBps() const;  // step_bytes / step_s; 0 when not measured
  double buffer_GBps() const;     // buffer_bytes / buffer_s; 0 when not measured
};
MemoryBoundRates measure_memory_bound(const ModelConfig& m, int Bm, int seq, double seconds);

// One block's attention core for one microbatch as a rank of a context-
// parallel split runs it: the algorithm's forward and backward
// (impl/context_parallel/attention.h, the model's heads over tp, on
// `threads` = tp x cp local ranks: tp rings of cp ranks side by side, as a
// tp x cp world runs them on shared cores), each the slowest rank's wall time.
struct CpAttentionTime {
  double fwd_s = 0, bwd_s = 0;
  int threads = 1;  // local ranks it ran on (they shared the cores as that many)
};
// Measured: Bm sequences of seq tokens of model m at `precision`; after
// warm-up calls filling 5 ms (new rank threads can share one core until the
// scheduler moves one), batches of back-to-back forwards, then as many
// backwards, as a step runs them (each batch's time per call the slowest
// rank's; the ranks start a batch together), three pairs of batches filling
// about `seconds`, the least of each; the least of `repeats` such windows
// (fresh rank threads each). On a CPU at short
// sequences the core costs its calls rather than its FLOPs: tiny at cp2,
// ring, 27 us per layer and microbatch against 0.4 us of FLOPs at the GEMM
// rate. InputError when the split does not fit the model (cp must divide
// seq, tp the heads; Ulysses needs the heads per tp rank to split over cp).
CpAttentionTime measure_cp_attention(const ModelConfig& m, Precision precision, int Bm, int seq, int tp, int cp,
                                     CpAlgo algo, bool zigzag, double seconds, int repeats);

// What the sweep measures per model and microbatch shape for its plan rows.
struct ShapeRates {
  double gemm_efficiency = 1;
  MemoryBoundRates memory;  // empty: the memcpy figure (2 x copy_GBps) stands in
  // A single-rank training step of the shape measured (a dp1 sweep point) over
  // the planner's estimate of that step from the two figures above
  // (planner::Hardware::compute_scale); 1: not measured.
  double compute_scale = 1;
  bool step_measured = false;  // compute_scale came from a measured step
  // That step run by k ranks at once (k copies, one per core, each in a
  // world of its own, meeting at a barrier after every step) over the step
  // alone, by k: what ranks computing side by side cost each other (the
  // last-level cache and memory bandwidth they share, and the slowest copy
  // of each step setting the pace, as in any world whose ranks meet once a
  // step: tiny 1.03 as free copies, 1.09 meeting; its dp2 DDP rows ran 5-12%
  // slower than the plan with the first). A k not measured: 1.
  std::map<int, double> corun_scale{};
  // The factor for k ranks computing at once with `copies` copies of the
  // model's weights among them (k / (tp x pp): each rank of a tensor- or
  // pipeline-parallel split computes with a slice; data, ZeRO and context
  // parallel ranks with all of it, gathered): linear between one copy (1) and
  // k copies (corun_scale[k]), clamped there. On this machine the dp2 rows of
  // small, DDP and ZeRO alike, ran 5-12% slower than the plan without it,
  // while tp2 and pp2 ran as planned.
  double corun_at(int k, double copies) const;
  // The GEMM efficiency of one rank of a tensor- or context-parallel split,
  // by (tp, cp), at that rank's own GEMM shapes (the best of three, like
  // gemm_efficiency); a split not measured uses gemm_efficiency.
  std::map<std::pair<int, int>, double> split_gemm_efficiency{};
  double gemm_efficiency_at(int tp, int cp) const;
  // The same without the attention core's per-head GEMMs, by (tp, cp), cp > 1
  // (measured from the same timings): what the rates time when the split's
  // attention core is measured (cp_attention), whose GEMMs are in its time.
  // The per-head shapes are the smallest and slowest: tiny at cp2, 0.38 with
  // them. A split not measured uses gemm_efficiency_at.
  std::map<std::pair<int, int>, double> split_linear_efficiency{};
  double linear_efficiency_at(int tp, int cp) const;
  // One block's attention core on a rank of a context-parallel split, by
  // (tp, cp, algorithm, zigzag): measure_cp_attention's figures.
  std::map<std::tuple<int, int, CpAlgo, bool>, CpAttentionTime> cp_attention{};
};
// The key of a point's shape figures: model, precision, microbatch sequences
// and microbatches per step (what the single-rank step behind compute_scale runs).
using ShapeKey = std::tuple<std::string, std::string, int, int>;
ShapeKey shape_key(const SweepPoint& p, const PointResult& r);
// The single-rank point of shape key k: dp1, no sharding, weak scaling (the
// step behind compute_scale; its batch per rank is the key's microbatch x
// microbatches).
SweepPoint single_rank_point(const ShapeKey& k);
// compute_scale from the single-rank step (dp1, no sharding) of shape key k's
// model at seq tokens measured at `measured_s`: over the planner's estimate of
// that step on this machine's figures h and rates r (their compute_scale
// ignored), the data-parallel buffers' time, which compute_scale leaves alone
// (planner::PlanResult::buffer_s), taken out of both; so that step's plan is
// its measured time.
double single_rank_compute_scale(const ShapeKey& k, int seq, const LocalHardware& h, ShapeRates r,
                                 double measured_s);
// Shape k's single-rank step (single_rank_point(k) at c's seq, warm-up,
// steps and seconds), c.rounds windows back to back (round_config), combined
// as a sweep row combines its rounds (the median); not ok when a step fails,
// "skipped" (and why) when it would not fit `limits` on one rank. What
// compute_scale divides; `parabench calibrate --model` measures it too.
PointResult single_rank_step(const SweepConfig& c, const ShapeKey& k, double peak_flops_per_rank,
                             const Limits& limits);
// One window of ShapeRates::corun_scale at `ranks` ranks: shape k's
// single-rank step (single_rank_point) on `ranks` threads at once, each in a
// world of its own and all meeting after every step (paced_copies, c's
// measured steps and seconds), the median of their step times over the same
// step run alone just before on each of their cores, the slowest (the copies
// go at the slowest core's pace, so a core the host slows for a while slows
// both sides of the ratio). 0 if the copies would not fit `limits` or a step
// fails.
double corun_ratio(const SweepConfig& c, const ShapeKey& k, int ranks, const Limits& limits);
// ShapeRates::corun_scale of shape k at `ranks` ranks side by side: the ratio
// windows already taken (`windows`: the sweep takes one at the start of each
// of its rounds) topped up to c.rounds back to back, their median; 1 when a
// window failed or the copies would not fit `limits` (a window of 0).
double corun_scale(const SweepConfig& c, const ShapeKey& k, int ranks, const Limits& limits,
                   std::vector<double>& windows);
// The best of `repeats` measurements of both (the highest GEMM efficiency;
// each memory-bound time at its least), so one slow moment of a shared
// machine does not set every plan row of the shape (a single 10 ms window gave
// 0.68 where the same shape measures 0.90 +- 0.02).
ShapeRates measure_shape_rates(const ModelConfig& m, int Bm, int seq, double peak_flops, int repeats);
// Adds the (tp, cp) split's GEMM efficiency to r (the best of `repeats`), once;
// with cp > 1 its linear efficiency too.
void measure_split_gemm_efficiency(ShapeRates& r, const ModelConfig& m, int Bm, int seq, double peak_flops, int tp,
                                   int cp, int repeats);
// Adds the attention core of a (tp, cp, algo, zigzag) split (cp > 1) to r,
// once: measure_cp_attention, two windows of about 30 ms, the lesser.
void add_cp_attention(ShapeRates& r, const ModelConfig& m, Precision precision, int Bm, int seq, int tp, int cp,
                      CpAlgo algo, bool zigzag);


// The planner input describing point p (as run by run_point): dp = world, the
// point's shard, precision, global batch and microbatches, DDP's bucket overlap
// (its default in the sweep), the point's model shape at the sweep's seq.
planner::PlanInput plan_input(const SweepConfig& c, const SweepPoint& p, const PointResult& r,
                              const LocalHardware& h, const ShapeRates& rates = {});

// The plan row of point p: its columns and common metadata (backend analytic,
// the point's mesh and config hash, the hardware used noted in `reason`). A
// point the planner rejects gets a rejected row naming why.
struct PlanRow {
  RunMeta meta;
  CsvRecord values;
};
PlanRow plan_row(const SweepConfig& c, const SweepPoint& p, const PointResult& r, const LocalHardware& h,
                 const RunMeta& point_meta, const ShapeRates& rates = {});

// The vendor's figure: for every measured series (the ok points sharing
// strategy, model, precision, microbatches, scaling and the mesh's axes other
// than dp), its largest point re-planned at each world of c.extrapolate above
// it, dp scaled to reach that world (weak scaling scales the global batch with
// dp; strong keeps it). The hardware is c.machine's profile if given, else
// this machine's measured figures for one rank per core (core share 1, the
// latency measured at the largest world, ranks per node = cores, inter-node
// links as fast as intra-node: said in the row's reason). A world the series'
// other axes do not divide, or a batch that does not split, gets a rejected
// row naming why. `rates` is keyed by shape_key.
struct MeasuredPoint {
  SweepPoint point;
  PointResult result;
  RunMeta meta;
};
std::vector<PlanRow> extrapolated_plan_rows(const SweepConfig& c, const std::vector<MeasuredPoint>& measured,
                                            const LocalHardware& h,
                                            const std::map<ShapeKey, ShapeRates>& rates);

// A machine profile against measured points (`parabench plan --machine FILE
// --against SWEEP_CSV`): every ok sweep row of the CSV planned with profile
// m as plan --machine plans it (hardware_for, the profile's ranks per node),
// each point as run_point ran it (plan_input: its mesh, strategy, batch,
// microbatches and seq; DDP's buckets overlapped only where the local backend
// had a core per progress thread, at m.ranks_per_node cores). A point whose
// ranks outnumber the profile's node (oversubscribed here: the profile plans
// one rank per core, more ranks as more nodes) or that the planner refuses is
// listed, not compared, with why. InputError naming the file when it is not
// a sweep CSV.
struct ProfilePoint {
  std::string label;  // "<mesh> <strategy> <model> <precision>"
  MeshShape mesh;
  bool compared = false;
  std::string why;  // not compared: why
  double measured_s = 0, planned_s = 0;
  // Compared: the plan row's columns (the sweep's strategy text, so the
  // report pairs it with the point) and the point's world and config hash.
  CsvRecord plan;
  int world = 1;
  std::string config_hash;
  // Throughput error, plan over measured (positive: the plan is too fast).
  double error() const { return measured_s / planned_s - 1; }
};
std::vector<ProfilePoint> plan_against(const planner::MachineProfile& m, const std::string& sweep_csv);

}  // namespace pb::sweep
