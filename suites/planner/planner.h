// The analytic planner behind `parabench plan`: per-rank memory by tag,
// communication per group and an estimated step time and MFU for a model on a
// dp x tp x cp x pp mesh, from the same declared-cost functions the strategies
// use (impl/data_parallel/cost.h; model_cost.h). Pure and O(layers): instant at
// 1T parameters and thousands of ranks.
//
// Mesh order is Megatron's (TP fastest, then CP, DP, PP) or Llama 3's (TP, CP,
// PP, DP: PlanInput::pp_inside_dp), so a group is intra-node when its span
// (size x stride) fits in ranks_per_node; across nodes its bandwidth is the
// rails its members on one node reach (Hardware::rails).
// Time model (stated once, here): compute = hardware FLOPs / (world * peak *
// GEMM efficiency) + memory-bound time, the efficiency being the fraction of
// peak the model's GEMMs reach (1 unless given; the sweep measures it at the
// model's shapes; a calibrated profile's GEMM table gives it at a
// rank's shapes, the model's GEMMs in its tp and cp shards: rank_gemms) and the memory-bound time, given a memory bandwidth, the
// non-GEMM bytes of the worst rank's microbatches (model_cost.h
// *_traffic_bytes) plus its optimizer step (reads params, grads and states,
// writes params and states) over that bandwidth;
// pipeline bubble = compute * the schedule's declared bubble over ideal
// (impl/pipeline/cost.h: (p-1)/m for GPipe and 1F1B, Narayanan et al. 2021
// Sec. 2.2.1), activations held = the schedule's declared peak in-flight
// microbatches on each rank; each collective costs ring alpha-beta time
// steps*latency + bus_bytes/bandwidth (all_reduce 2(n-1) steps, reduce_scatter
// and all_gather n-1, send/recv 1; plus Hardware::latency_call_us per call of
// the three collectives), at the inter-node bandwidth when its group
// spans nodes; within a node, a calibrated fit of its op (Hardware::
// collectives) replaces latency and bandwidth. Exposed comm: everything,
// unless overlap is on, then DP and ring-attention CP comm hide under the
// compute of their phase (fwd/bwd) and only the excess shows; TP and PP comm
// and Ulysses' all-to-alls (each waited for at once) are exposed, except, on a
// device with PlanInput::tp_overlap wgrad, the column-parallel linears'
// backward collectives, each hidden behind the GEMM it runs beside.
// A measured attention core (Hardware::attention_fwd_s) replaces its FLOPs
// and softmax traffic in compute, and holds the CP comm in its time (and its
// per-head GEMMs leave a GEMM table's average).
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "impl/data_parallel/cost.h"
#include "impl/pipeline/schedule.h"
#include "reference/model_config.h"
#include "suites/planner/model_cost.h"

namespace pb::planner {

// One measured GEMM shape (parabench calibrate): C (m x n) = A (m x k) B^T
// at `gflops` GFLOP/s on one rank.
struct GemmRate {
  int64_t m = 0, n = 0, k = 0;
  double gflops = 0;
};
// The rate of the entry nearest (m, n, k), by Euclidean distance between the
// logarithms of the three sizes (the first such entry on a tie); 0 when the
// table is empty.
double table_gflops(const std::vector<GemmRate>& table, int64_t m, int64_t n, int64_t k);

// One measured collective at one group size (parabench calibrate): a call
// moving B bus bytes takes alpha_us + B / GBps (intra-node; the group's
// ranks sharing the node's cores as a local run's do).
struct CollectiveFit {
  int64_t group_size = 0;
  double alpha_us = 0, GBps = 0;
};
struct AsyncCallCost {
  double compute_us = 0;  // wall time of compute between two calls, at the core share
  double cost_us = 0;     // added to the step per call
};
// The cost per call at `compute_us` between calls (Hardware::async_call_cost);
// 0 for an empty table.
double async_call_cost_us(const std::vector<AsyncCallCost>& table, double compute_us);

// Ring steps of one call of `op` (all_reduce, reduce_scatter, all_gather,
// all_to_all, send_recv) on n ranks: 2(n-1), n-1, n-1, n-1, 1; and its bus
// bytes for `bytes` logical bytes (nccl-tests: all_reduce 2(n-1)/n, send_recv
// 1, the others (n-1)/n).
double ring_steps(std::string_view op, int64_t n);

// The compute factor of ranks computing side by side with `copies` copies of
// the model's weights among them, from `scale` measured at `at` copies:
// linear between one copy (1) and `at` copies (scale), clamped there; 1 when
// at < 2. The sweep's plan rows (ShapeRates::corun_at) and a calibrated
// profile's (Hardware::corun_scale) both take it so.
double corun_factor(double scale, int64_t at, double copies);
double bus_bytes(std::string_view op, int64_t n, double bytes);

struct CommRow;
struct Hardware;
// Whether NCCL's plateau (Hardware::ring_plateau) multiplies the latency of
// row c: an all-reduce across nodes on a device whose bytes per rank and
// channel reach 64 at NCCL's most channels (64).
bool ring_plateau_applies(const CommRow& c, const Hardware& hw);

// The expected largest of n independent standard normal draws (0 for n = 1;
// 1/sqrt(pi) for 2): the slowest of n GPUs in standard deviations above the
// typical one (Hardware::gemm_spread). Numerical integration of
// x n phi(x) Phi(x)^(n-1); n >= 1 (InputError otherwise).
double expected_max_normal(int64_t n);

struct Hardware {
  double peak_tflops = 0;  // per rank; 0 = no time estimate
  double bw_intra_GBps = 0, bw_inter_GBps = 0;  // per rank, GB/s (1e9)
  double latency_us = 0;
  double latency_inter_us = 0;  // per step across nodes; 0: latency_us
  // Per call of an all-reduce, all-gather or reduce-scatter, on top of its
  // steps (NCCL's baseLatencies: ncclTopoTuneModel starts every collective's
  // latency at it, and ncclTopoGetAlgoTime charges it once per call). Not for
  // p2p (send_recv, all_to_all): NCCL's model has no p2p term. 0 where a
  // measured alpha already includes it (a calibrated profile's, on CPU or GPU:
  // latency_us is that alpha over the ring steps; a collective fit's alpha),
  // and a collective fit's rows never add it.
  double latency_call_us = 0;
  // NCCL's "plateau effect of ring" (device profiles): an all-reduce's whole
  // latency (base and steps) times this when its ring crosses nodes and each
  // channel's share of a rank's bytes is at least 64 (ncclTopoGetAlgoTime,
  // Ring / Simple; 1.4 from compute capability 8.0, 1.9 below; none in
  // RCCL's AMD build). The channel count is NCCL's choice, so the planner
  // applies it where the share is 64 at NCCL's most channels (MAXCHANNELS 64):
  // a lower bound. 1: none.
  double ring_plateau = 1;
  // Topology across nodes. rails: the NICs of a node the collectives use
  // (0: one link of bw_inter_GBps per rank, whatever the group). With rails,
  // bw_inter_GBps is one NIC's and a group with k members on each of a
  // node's R ranks_per_node reaches k x rails / R NICs' bandwidth (NCCL's
  // rings run one channel per NIC; a DGX A100's 8 NICs give 2 nodes' 16 ranks
  // 192 GB/s busBw), no more than bw_intra_GBps (the ring's hops within the
  // node); an all-to-all reaches one NIC's (it cannot aggregate NICs).
  // oversubscription (>= 1) divides the inter-node bandwidth of a group
  // spanning more than leaf_nodes nodes (0: every node under one leaf).
  int64_t rails = 0;
  double oversubscription = 1;
  int64_t leaf_nodes = 0;
  double gemm_efficiency = 1;  // in (0, 1]: fraction of peak_tflops the model's GEMMs reach
  double mem_bw_GBps = 0;      // per rank device-memory bandwidth; 0: memory-bound work not timed
  // The rate of the LayerNorms' and residual adds' traffic
  // (layer_shared_traffic_bytes), where it differs (0: mem_bw_GBps). On a CPU
  // their N x C arrays can sit in cache while the softmax and the optimizer
  // stream: tiny's run at several times the average, and a rate shared by all
  // credited sequence parallel, which shards only them, 3x what it saves.
  double shared_mem_bw_GBps = 0;
  // The rate of the optimizer step's traffic (the norm and AdamW over the
  // parameters a rank updates), where it differs (0: mem_bw_GBps). AdamW
  // streams five arrays with no reuse, vectorized: tiny's ran at about 3x the
  // average of the other memory-bound kernels, so one rate for all credited
  // ZeRO's sharded step (half of it at dp2) with 3x what it saves: ZeRO-2 at
  // dp2 planned 6% faster than DDP and measured 3% slower.
  double optimizer_mem_bw_GBps = 0;
  // The rate of the data-parallel components' own buffer traffic
  // (dp::local_traffic_bytes: zero-filled comm buffers, the reduced slices
  // copied or added into the held gradient, the copies a one-rank shard group
  // makes instead of collectives), where it differs (0: mem_bw_GBps). Plain
  // streaming (memset, memcpy, an add) runs at several times the average
  // memory-bound kernel on a CPU: at small's average (7 GB/s) ZeRO-3's 79 MB
  // more than DDP at dp1 would plan 11 ms more per step, against 3 ms
  // measured; not counted at all, 0 (its step is 29% slower than DDP's).
  double buffer_mem_bw_GBps = 0;
  // A device's memory-bound kernels by kind, each at its own achieved rate
  // where a kernel-level microbenchmark gives one (0: mem_bw_GBps, a
  // streaming read's): the LayerNorms / RMSNorms (forward and backward, with
  // their reductions), the attention scores' softmax, the loss (cross entropy
  // over the vocabulary with its casts), and every other elementwise kernel
  // (residual and bias adds, GeLU / SwiGLU, dropout, RoPE, copies, casts,
  // embedding, masks); RankBytes splits the traffic so (planner_parts.h).
  // norm_mem_bw_GBps and shared_mem_bw_GBps (a CPU calibration's rate for the
  // norms and adds together) exclude each other.
  // The norms by the kernel the plan runs (PlanInput::eager_kernels,
  // fused_norm): one fused kernel forward and one backward (Megatron-LM's apex
  // FusedLayerNorm, torch's LayerNorm, torchtitan's Triton fused_rmsnorm) at
  // norm_mem_bw_GBps; an RMSNorm as eager ops (torchtitan's RMSNorm, whose
  // bytes llama_layer_eager_norm_traffic_bytes counts op by op) at
  // eager_norm_mem_bw_GBps (0: mem_bw_GBps; it too excludes shared_mem_bw_GBps).
  double norm_mem_bw_GBps = 0, softmax_mem_bw_GBps = 0, loss_mem_bw_GBps = 0, elementwise_mem_bw_GBps = 0;
  double eager_norm_mem_bw_GBps = 0;
  // Measured over modeled compute (> 0): a training step of the model timed on
  // this machine over the estimate of the same step from the rates above; it
  // scales compute (the kernels' rates in isolation miss what a step adds: caches
  // shared by every kernel, calls, bookkeeping). 1: the rates alone.
  double compute_scale = 1;
  // Ranks of one node computing at once slow each other down (the last-level
  // cache and the memory bandwidth they share): a calibrated profile measured
  // its single-rank step as corun_ranks copies side by side, x corun_scale
  // the step alone. The plan multiplies compute by corun_factor at the copies
  // of the weights a node's busy ranks hold (min(world, ranks_per_node) /
  // (tp x pp): tensor and pipeline ranks hold slices). 1 / 1: not measured.
  double corun_scale = 1;
  int64_t corun_ranks = 1;
  // Measured wall seconds of one block's attention core (scores, softmax,
  // weighted values; with cp > 1 the context-parallel algorithm's block
  // kernels, merges, packing and transfers) for one microbatch on a rank at
  // the plan's shape, forward and backward, at this hardware's core share.
  // When both are > 0 they replace the core's FLOPs (attention_core_flops)
  // and its softmax traffic in compute: per block and microbatch, forward
  // (twice with recomputation) plus backward, times compute_scale like the
  // rest. On a CPU at short sequences the core costs its calls, not its
  // FLOPs (ring attention's scalar blocks: tiny at cp2 27 us per layer and
  // microbatch against 0.4 us of its FLOPs at the GEMM rate). 0: FLOPs.
  double attention_fwd_s = 0, attention_bwd_s = 0;
  // Whether attention_fwd_s holds the context-parallel transfers (a measured
  // core does); false when the core's time comes from a kernel's rate.
  bool attention_includes_cp = true;
  // Overlapped communication is not free (issue 48; device profiles only).
  // The fraction by which compute slows while a collective runs beside it on
  // its own stream (NCCL's kernels take SMs and HBM bandwidth from the GEMMs):
  // the compute a hidden collective overlaps costs (1 + this) its time alone.
  // 0: overlap is free (the CPU profiles, which measure their own
  // async_call_cost instead).
  double overlap_compute_slowdown = 0;
  // A FlashAttention kernel's rate, TFLOP/s, counting a causal kernel's half
  // of the scores as FlashAttention's benchmarks do (0: none). With
  // PlanInput::flash_attention the core is timed at it instead of as GEMMs:
  // per block and microbatch, forward 4 b (s/cp) s C / tp / 2 FLOPs, backward
  // 2.5 times that (its five matmuls to the forward's two), no softmax traffic.
  double flash_attention_tflops = 0;
  // A FlashAttention kernel's published forward + backward rate by head
  // dimension and sequence length (causal; the same FLOP count), which a
  // built-in profile carries from its benchmark (machine.cc): when the table
  // has the run's kernel it replaces flash_attention_tflops
  // (flash_attention_rate).
  struct AttentionRate {
    bool triton = false;  // Tri Dao's Triton FlashAttention (flash_attn_triton.py); false: FlashAttention-2
    int head_dim = 0;
    int64_t seq = 0;
    double tflops = 0;
  };
  std::vector<AttentionRate> flash_rates;
  // The share of a core (device) each rank gets, in (0, 1]: below 1 when more
  // ranks than cores time-share them (peak_tflops is then already the share's).
  // A rank's idle time is then another rank's compute: the pipeline bubble
  // costs only what the critical path at a whole core exceeds the shared
  // compute by.
  double core_share = 1;
  // Time-shared cores only (core_share < 1): what one collective a rank issues
  // without waiting for it (a prefetched ZeRO-3 gather, an overlapped DDP
  // bucket; async_calls) costs the step, by the compute between two such
  // calls. The call runs on the rank's communication thread, which must win a
  // core from the ranks' compute at every hop of its ring. Measured points,
  // ascending in compute_us; interpolated linearly in log(compute), held at
  // the ends. Empty: no such cost.
  std::vector<AsyncCallCost> async_call_cost;
  // A GPU's GEMMs by shape (machine profiles; 0: not used): the maximum
  // achievable matmul rate (TFLOP/s, a microbenchmark's best shape) times the
  // tile and wave quantization of each GEMM on `gemm_units` SMs in
  // gemm_tile_m x gemm_tile_n output tiles (batched GEMMs count their batch's
  // tiles): used tile area over the area the waves occupy. Units 0: no
  // quantization, the achievable rate for every shape. A GEMM table
  // (gemm_rates) or a hand-typed efficiency takes precedence.
  double gemm_achievable_tflops = 0;
  int64_t gemm_units = 0, gemm_tile_m = 0, gemm_tile_n = 0;
  double memory_GB = 0;        // device memory per rank; 0: unknown (no fit check)
  // Host time, us, to issue one framework op's kernel on a GPU rank (PyTorch's
  // dispatch and the CUDA launch; 0: not modelled, a CPU rank's calls are in
  // its measured rates). The host runs ahead of the device: a block's ops
  // cost the step only where their issue time exceeds their kernels' device
  // time (host_overhead: per block and microbatch, forward and backward),
  // and the optimizer's launches where they exceed its step's device time,
  // plus one op per host synchronization of the step. Built-in GPU profiles.
  double host_op_us = 0;
  // Identical GPUs are not equally fast (issue 48; device profiles only): the
  // standard deviation of one GPU's GEMM time over a fleet of the same part,
  // as a fraction of the typical GPU's, in [0, 0.5). Each GPU's speed is its
  // own and lasting (its silicon under the power cap), and a synchronous step
  // waits for its slowest rank (a tensor group's collectives each layer, a
  // pipeline's slowest stage, the data-parallel reduce), so the world's
  // GEMM-bound compute (GEMMs and a FlashAttention kernel's core) runs at
  // 1 + gemm_spread x expected_max_normal(world) of the profile's typical
  // GPU's time (PlanResult::slowest_gpu). 0: identical GPUs.
  double gemm_spread = 0;
  // The ranks run the CPU's kernels, whose GEMM staging and attention scores
  // are workspace (Scratch); false on GPUs (a GPU MachineProfile's), whose
  // kernels keep their own; there an MoE layer's routing state is host
  // memory too (reference/moe.h), not the device's.
  bool host_kernels = true;
  std::string machine;         // the profile's name (plan --machine), empty when typed by hand
  // Measured GEMM rates by shape at the plan's precision: when given (and the
  // model's shape), the model's GEMM efficiency is its GEMMs' (rank_gemms)
  // flops over their time at these rates, instead of gemm_efficiency; with
  // the attention core's time measured (attention_fwd_s), without the core's
  // per-head GEMMs (they are in that time).
  std::vector<GemmRate> gemm_rates;
  // Measured alpha-beta fits per op by group size: an intra-node row of that
  // op costs calls x alpha + bus bytes / GBps with the fit of the nearest
  // group size (alpha scaled by the ring steps), instead of latency_us and
  // bw_intra_GBps.
  std::map<std::string, std::vector<CollectiveFit>, std::less<>> collectives;
};

// The memory-bound kernel kinds' own rates (Hardware::norm_mem_bw_GBps ...)
// and their names in a machine profile: the one list the profile's reader,
// writer and default sources, the input check and plan's --mem-bw go over.
struct KindRate {
  const char* key;
  double Hardware::* rate;
};
inline constexpr KindRate kKindRates[] = {
    {"norm_mem_bw_GBps", &Hardware::norm_mem_bw_GBps},
    {"softmax_mem_bw_GBps", &Hardware::softmax_mem_bw_GBps},
    {"loss_mem_bw_GBps", &Hardware::loss_mem_bw_GBps},
    {"elementwise_mem_bw_GBps", &Hardware::elementwise_mem_bw_GBps},
    {"eager_norm_mem_bw_GBps", &Hardware::eager_norm_mem_bw_GBps}};
// Whether any kind has a rate of its own (none: every memory-bound byte at
// mem_bw_GBps and the calibrated classes' rates, as before the kinds).
inline bool has_kind_rates(const Hardware& h) {
  for (const KindRate& k : kKindRates)
    if (h.*k.rate > 0) return true;
  return false;
}

// How the run's optimizer step moves memory (PlanInput::optimizer_step; plan
// --optimizer, --validate's `optimizer` column). Per parameter the rank
// updates, counted from each framework's code at the commit its runs used
// (docs/planner.md "What a plan accounts for"; the byte counts are
// optimizer_step_bytes'):
// - fused: one pass that reads params (the master is in the state when
//   mixed), grads and states and writes params and states (28 bytes at
//   bf16-mixed): the planner's default and the engine's.
// - megatron_fp16: Megatron-LM's Float16OptimizerWithFloat16Params with
//   --fp16 (NVIDIA/Megatron-LM 6985e58938 megatron/optimizer/optimizer.py,
//   clip_grads.py): the fp16 grads copied to fp32 main grads (.float(),
//   2 + 4), unscaled with the inf check (_amp_foreach_non_finite_check_
//   and_unscale_, 4 + 4), the norm (multi_tensor_l2norm, 4), apex FusedAdam
//   (fp32 param, grad, exp_avg, exp_avg_sq read, three written: 16 + 12),
//   the main params copied to the fp16 model params (multi_tensor_scale,
//   4 + 2): 52 bytes. The clip scale runs only `if clip_coeff < 1.0` (on the
//   step's gradient norm, unknown to a plan), so it is not counted; zero_grad
//   sets the grads to None (no pass).
// - torch_foreach: PyTorch's torch.optim.AdamW(foreach=True) with weight
//   decay (torch/optim/adamw.py _multi_tensor_adamw: _foreach_mul_ of the
//   params 8, lerp_ of exp_avg 12, mul_ 8 and addcmul_ 12 of exp_avg_sq,
//   sqrt 8, div_ 8, add_ 8, addcdiv_ into the params 16: 80 bytes over fp32
//   tensors) and torch.nn.utils.clip_grad_norm_(foreach=True) (_foreach_norm
//   4, _foreach_mul_ by the clamped coefficient, unconditional, 8): 92 bytes
//   (torchtitan's build_optimizers and train.py at 1ea476e, 3faaa1a,
//   9dec370).
// - composer: composer v0.16.4's DecoupledAdamW with weight_decay 0 (a loop
//   over the params: exp_avg mul_ 8 and add_ 12, exp_avg_sq mul_ 8 and
//   addcmul_ 12, sqrt 8, the division 8, add_ 8, addcdiv_ 16: 80 bytes) and
//   its GradientClipping on an FSDP root, FullyShardedDataParallel.
//   clip_grad_norm_ (each grad's norm 4, the clamped scale 8): 92 bytes
//   (llm-foundry 061f2c7's MPT yamls).
// addcmul_(grad, grad) reads one tensor twice; counted once (the second load
// is the same address).
enum class OptimizerStep { fused, megatron_fp16, torch_foreach, composer };
// The bytes an optimizer step moves per parameter the rank updates.
int64_t optimizer_step_bytes(OptimizerStep step, Precision precision);
// How the LM head's loss moves memory (PlanInput::loss; plan --loss,
// --validate's `loss` column): fused (head_traffic_bytes' 4 elements per
// local vocabulary entry and token, the default), Megatron-LM's
// vocab_parallel_cross_entropy(output.float(), labels)
// (head_megatron_traffic_bytes), flash-attn 1.0.9's fused cross entropy
// (flash_xentropy: 3 elements per entry and token), or that and composer's
// two training metrics over the same logits (composer_flash_xentropy, as
// llm-foundry's MPT runs it; head_flash_xentropy_traffic_bytes).
enum class LossKernel { fused, megatron_fp32, flash_xentropy, composer_flash_xentropy };
// The training loop around the model (PlanInput::train_loop; plan
// --train-loop, --validate's `train_loop` column): none (the default: the
// step's model work, its optimizer and one host synchronization) or
// megatron_lm, Megatron-LM's (6985e58938 and 2755bcb87b pretrain_gpt.py,
// megatron/training.py and schedules.py): per microbatch its batch and mask
// (megatron_batch_traffic_bytes), timer and broadcast_data synchronizations
// (host_overhead), the batch's tp broadcast and the loss's dp all-reduce,
// per step the model-parallel norm and found_inf all-reduces
// (planner_comm.cc megatron_loop_comm).
enum class TrainLoop { none, megatron_lm };
// Tensor-parallel communication overlapped with compute (PlanInput::
// tp_overlap; plan --tp-overlap, --validate's `tp_overlap` column). none:
// every TP collective is waited for (exposed). wgrad: Megatron-LM's
// LinearWithGradAccumulationAndAsyncCommunication.backward (NVIDIA/
// Megatron-LM 2755bcb87b megatron/mpu/layers.py; on by default there,
// --no-async-tensor-model-parallel-allreduce turns it off, and with
// --sequence-parallel the path is always taken): in a column-parallel
// linear's backward (QKV, fc1, the LM head) the input gradient's all-reduce,
// with sequence parallel its reduce-scatter, is issued async and runs beside
// the weight-gradient GEMM; with sequence parallel the all-gather of the
// saved input runs beside the input-gradient GEMM. Each such collective hides
// up to its GEMM's time, the excess exposed; row-parallel and forward
// collectives stay exposed. Device profiles only (planner_comm.cc time_comm).
enum class TpOverlap { none, wgrad };

struct PlanInput {
  std::optional<ModelConfig> shape;  // absent: only a parameter count
  int64_t params = 0;                // used when shape is absent
  int64_t seq = 0;                   // 0: the shape's context length (1024 without shape)
  int dp = 1, tp = 1, cp = 1, pp = 1;
  int ep = 1;                        // expert parallel (a mixture-of-experts shape; divides dp and the experts)
  bool sp = false;                   // Megatron sequence parallel (needs tp > 1)
  CpAlgo cp_algo = CpAlgo::ring;     // context parallel: ring attention or Ulysses
  bool zigzag = true;                // ring's placement; the model is the same (only a measured attention core differs)
  pipeline::ScheduleKind schedule = pipeline::ScheduleKind::one_f_one_b;
  int virtual_stages = 1;            // interleaved only
  dp::Shard shard = dp::Shard::none;
  int64_t hsdp_group = 0;
  int prefetch = 1;                  // ZeRO-3 family: units gathered ahead (0: each gather waited for at once)
  dp::Offload offload = dp::Offload::none;
  Precision precision = Precision::bf16_mixed;
  int64_t microbatch_size = 1;
  int64_t global_batch = 0;          // sequences; 0: dp * microbatch_size * pp
  Recompute recompute = Recompute::none;
  bool dropout = false;              // the canonical model has none
  bool overlap = false;
  int64_t ranks_per_node = 0;        // 0: one node
  // Placement order of the axes over global ranks, fastest first: Megatron's
  // tp-cp-dp-pp (default) or Llama 3's [TP, CP, PP, DP] (pp_inside_dp): it
  // decides which groups share a node and which collectives cross which link.
  bool pp_inside_dp = false;
  // The run's attention is FlashAttention (the kernel the profile's
  // flash_attention_tflops times); false: scores materialized, their GEMMs
  // and softmax timed like the rest (Megatron's 2021-2022 kernels).
  bool flash_attention = false;
  // With flash_attention: the kernel is Tri Dao's Triton FlashAttention
  // (llm-foundry's attn_impl: triton in 2023), at its own rates.
  bool flash_triton = false;
  // torchtitan's op-level selective activation checkpointing
  // (selective_ac_option = "op"): each block keeps the outputs of its odd
  // matmuls and of the attention kernel and recomputes in backward the even
  // matmuls' forward (Llama: wk, wo, w3; GPT: the attention projection and
  // fc2) and every memory-bound op. Planned with recompute none, one stage,
  // dense blocks (docs/published-runs.md).
  bool recompute_even_matmuls = false;
  // The memory-bound ops run as PyTorch eager kernels, one per op with the
  // model source's fp32 upcasts (torchtitan without torch.compile; the llama
  // family only: llama_layer_eager_traffic_bytes); false: fused kernels
  // (Megatron's fused LayerNorm, bias-GELU and softmax).
  bool eager_kernels = false;
  // With eager_kernels: the RMSNorms as one Triton kernel each (torchtitan's
  // norm_type = "fused_rmsnorm" of April 2024), the other ops eager
  // (llama_layer_eager_traffic_bytes, block_forward_ops; the plan's memory
  // stays the eager one's).
  bool fused_norm = false;
  // Without sp, on a device profile, a tp > 1 stage boundary goes as
  // Megatron-LM sends it: 1/t per tp rank, all-gathered by the receiver
  // (planner_comm.cc). false: whole, as parabench's executor sends it
  // (what the planner tests hold the stand-in device ranks to).
  bool pp_scatter_gather = true;
  // Sequence parallel's backward re-gathers each column-parallel GEMM's input
  // (the stored norm outputs, 2 per block, and the LM head's), as Megatron-LM
  // keeps them sharded (impl/tensor_parallel/cost.h). false: the gathered
  // input is kept for the weight gradient, as PyTorch's DTensor tensor
  // parallel does (torchtitan's SequenceParallel + PrepareModuleInput: the
  // all-gathered tensor is the matmul's saved input), so the backward has 2
  // all-gathers per block and 1 for the head fewer (planner_comm.cc).
  bool sp_regather = true;
  // FSDP's backward prefetch on a device (PyTorch FullyShardedDataParallel's
  // BackwardPrefetch, torch/distributed/fsdp/api.py): false is BACKWARD_PRE
  // (the next unit's all-gather issued before the current unit's gradient
  // computation, which hides it; FSDP2's fully_shard always prefetches so),
  // true BACKWARD_POST (issued after it: "This overlaps the *current
  // reduce-scatter* and the *next gradient computation*", so each backward
  // all-gather is waited for; composer's FSDP default, the MPT rows).
  bool backward_prefetch_post = false;
  // The bytes per element of the data-parallel gradient reduction (the dp
  // groups' reduce_scatter and all_reduce rows; not the parameter
  // all_gathers): 0 keeps the precision's gradient bytes (2 under
  // bf16-mixed); 4 is an fp32 reduce of bf16 gradients (FSDP2's
  // MixedPrecisionPolicy(reduce_dtype=float32), torchtitan's default;
  // Megatron-LM's --accumulate-allreduce-grads-in-fp32), 2 a bf16/fp16 one
  // (composer's PURE). plan --grad-reduce, --validate's grad_reduce column
  // (docs/published-runs.md).
  int grad_reduce_bytes = 0;
  // The optimizer step's and the loss's kernels as the run's framework runs
  // them (above; the defaults keep the planner's own fused passes).
  OptimizerStep optimizer_step = OptimizerStep::fused;
  LossKernel loss = LossKernel::fused;
  // How a DDP run (shard none) holds its gradients. false: the engine's
  // buffer, zeroed once per step, each microbatch's gradients accumulated
  // where they are produced (dp::local_traffic_bytes). true: PyTorch
  // autograd's .grad, as torch DDP under no_sync and Megatron-LM's local DDP
  // without contiguous buffers (6985e58938 megatron/model/distributed.py)
  // run it: each microbatch after the first adds its gradients into .grad
  // (AccumulateGrad's in-place add: both read, one written, 3 elements per
  // parameter), and the all-reduce copies them into a flat bucket, divides
  // and copies them back (_flatten_dense_tensors, coalesced /= dp,
  // buf.copy_(synced): 6 elements per parameter, with dp > 1); no zeroing
  // (Megatron's zero_grad sets them to None). Elements of the gradient
  // reduce's bytes (grad_reduce_bytes, else the precision's gradient's).
  // plan --grad-accum, the grad_accum column.
  bool grad_accum_autograd = false;
  // plan --tp-overlap, the tp_overlap column (TpOverlap above).
  TpOverlap tp_overlap = TpOverlap::none;
  TrainLoop train_loop = TrainLoop::none;  // the loop around the model (TrainLoop)
  Hardware hw;
};

// One communication record: a group's collective, totalled over the step.
struct CommRow {
  std::string group;   // dp, dp_shard, dp_replica, dp_intra, dp_inter, tp, cp, pp
  std::string phase;   // fwd | bwd | step
  std::string op;      // all_reduce | reduce_scatter | all_gather | send_recv
  int64_t group_size = 1;
  int64_t calls = 0;
  int64_t bytes = 0;   // logical (nccl-tests convention)
  double bus_bytes = 0;
  bool inter_node = false;
  double time_s = 0;   // alpha-beta estimate; 0 without hardware figures
  int64_t per_node = 1;  // the group's members on one node (inter-node rows; Hardware::rails)
  // With PlanInput::tp_overlap wgrad, of a tp backward row: the column-
  // parallel linears' collectives (of `calls`), by the GEMM each runs beside:
  // that many calls of `bytes` logical bytes each, the GEMM's seconds per
  // call at the profile's rates (before compute_scale). Empty: none hidden.
  struct Overlap {
    int64_t calls = 0, bytes = 0;
    double gemm_s = 0;
  };
  std::vector<Overlap> overlaps;
};

struct StageMemory {
  int stage = 0;                     // pipeline rank
  int64_t params = 0, grads = 0, optimizer = 0, optimizer_host = 0;
  int64_t activations = -1;  // -1: unknown (parameter count only)
  // Comm buffers: dp::comm_buffer_peak_bytes without a pipeline, the
  // executor's buffers replayed in the stage's schedule order with one
  // (pipeline::stage_comm_peak_bytes); -1: unknown (no shape).
  int64_t comm = 0;
  // The runner's scratch on one stage without cp: the reference's
  // (MicrobatchRunner::workspace_bytes), or with tp or recompute the
  // tensor-parallel runner's (tp::runner_workspace_bytes). -1: not modeled.
  int64_t workspace = -1;
  // Not memory: the bytes its data-parallel components stream through their
  // own buffers per step (dp::local_traffic_bytes), timed as memory-bound work.
  int64_t local_traffic = 0;
  // Activations and comm buffers known (a total is then worth stating; the
  // workspace is counted when modeled and said to be missing otherwise).
  bool all_known() const { return activations >= 0 && comm >= 0; }
  int64_t device_total() const {  // the known tags
    return params + grads + optimizer + (activations > 0 ? activations : 0) + (comm > 0 ? comm : 0) +
           (workspace > 0 ? workspace : 0);
  }
};

struct PlanResult {
  int64_t world = 1;
  int64_t params_total = 0;          // whole model
  int64_t seq = 0, global_batch = 0, microbatches = 1;  // microbatches per replica
  std::vector<StageMemory> stages;   // one per pipeline rank
  StageMemory worst;                 // the stage with the largest device total
  std::vector<CommRow> comm;         // per rank of the worst stage
  double model_flops = 0, hardware_flops = 0;  // per iteration, whole job
  bool flops_exact = true;           // false: 6*N*tokens estimate (no shape)
  bool timed = false;                // hardware figures given
  double compute_s = 0, bubble_s = 0, comm_s = 0, exposed_comm_s = 0, step_s = 0;
  // Collective calls a rank issues without waiting for them, per step (async_call); their
  // cost on time-shared cores (Hardware::async_call_cost, 0 otherwise), part of exposed_comm_s.
  int64_t async_calls = 0;
  double async_cost_s = 0;
  double memory_bytes = 0;           // non-GEMM bytes per step on the rank that sets the pace: the slowest
                                     // pipeline stage (GEMMs and these together), else the worst rank (needs a shape)
  double memory_s = 0;               // memory_bytes / mem_bw (0 without a bandwidth); part of compute_s
  // Of memory_bytes, by kind (Hardware::norm_mem_bw_GBps ...): the norms', the
  // scores' softmax's (not a measured attention core's), the loss's, the
  // optimizer step's and the data-parallel buffers'; the rest elementwise.
  // memory_norm_bytes the norms run as one kernel each way, memory_eager_norm_bytes
  // those run as eager ops (Hardware::eager_norm_mem_bw_GBps).
  double memory_norm_bytes = 0, memory_eager_norm_bytes = 0, memory_softmax_bytes = 0, memory_loss_bytes = 0,
         memory_optimizer_bytes = 0, memory_buffer_bytes = 0;
  double buffer_s = 0;               // of memory_s, the data-parallel buffers' at their own rate
                                     // (Hardware::buffer_mem_bw_GBps), which compute_scale leaves alone
  double corun = 1;                  // compute's factor for a node's ranks side by side (Hardware::corun_scale)
  // The GEMM-bound compute's factor for the slowest of the world's GPUs
  // (Hardware::gemm_spread): 1 + gemm_spread x expected_max_normal(world).
  double slowest_gpu = 1;
  double gemm_efficiency = 1;        // what compute_s used: the hardware's, or its GEMM table's at the model's shapes
  double bubble_over_ideal = 0;      // the schedule's declared bubble / ideal compute
  std::string bubble_formula;
  double tokens_per_s = 0, mfu = 0, hfu = 0;
  // Of exposed_comm_s, on a device (!Hardware::host_kernels): what no overlap
  // can hide by construction (the ZeRO-3 family's first unit's all-gather
  // before forward and its reduce-scatter after backward; DDP's last bucket
  // after backward), and the compute slowdown beside the hidden collectives
  // (Hardware::overlap_compute_slowdown). planner_comm.cc's time_comm.
  double unhidden_comm_s = 0, overlap_slowdown_s = 0;
  // PlanInput::tp_overlap wgrad: the column-parallel backward collectives'
  // time (CommRow::overlaps), what of it their GEMMs hide, and of
  // overlap_slowdown_s the compute slowdown beside those hidden.
  double tp_overlap_comm_s = 0, tp_hidden_s = 0, tp_overlap_slowdown_s = 0;
  // The first data-parallel unit's share of the worst rank's parameters
  // (its units' sizes; 0: none), which the first all-gather and last
  // reduce-scatter of a microbatch move.
  double dp_first_unit_share = 0;
  // Framework per-op host overhead (Hardware::host_op_us): the kernels the
  // pace rank's host issues per step and the issue time the device waits
  // for (part of step_s; 0 without host_op_us).
  int64_t host_ops = 0;
  // Of those, Megatron-LM's training loop's torch.cuda.synchronize() calls
  // (its timers, broadcast_data, p2p; PlanInput::train_loop megatron_lm), each
  // exposing one op's host time (in host_overhead_s).
  int64_t loop_syncs = 0;
  double host_overhead_s = 0;
};

// Throws pb::InputError naming the flag when the input is inconsistent.
// The FlashAttention rate a plan uses, TFLOP/s: the profile's table for the
// kernel (Hardware::flash_rates) at the nearest head dimension, log-linear in
// the sequence between two lengths, the nearest beyond them; without a table
// for the kernel, FlashAttention-2's flash_attention_tflops (0 for Triton's:
// its core is then timed as GEMMs).
double flash_attention_rate(const Hardware& hw, bool triton, int head_dim, int64_t seq);

// Kernels one dense block issues per microbatch in forward on a rank
// (plan.shape required), counted from the ops docs/planner.md lists
// ("Per-op host overhead"): fused kernels (Megatron's: norm, QKV, attention,
// projection, bias-dropout-add, norm, fc1, bias-GELU, fc2, bias-dropout-add;
// the llama family's three projections, RoPE, SwiGLU) or PyTorch eager ops
// (plan.eager_kernels, llama only: torchtitan's RMSNorm as 8 ops, RoPE as 6,
// repeat_kv's copies, SiLU and the product apart). Attention: FlashAttention
// one kernel; unfused two batched GEMMs and the softmax (and its dropout).
int64_t block_forward_ops(const PlanInput& plan);
// Launches of one multi-tensor (foreach) op over `tensors` tensors of
// `elements` elements in all: at most 36 tensors (four lists, AdamW's) and
// 320 chunks of 65536 elements per launch (PyTorch
// aten/src/ATen/native/cuda/MultiTensorApply.cuh; apex's is the same).
int64_t multi_tensor_launches(int64_t tensors, double elements);

// Whether the ZeRO-3 family's gathers run ahead of compute on a device
// (PyTorch FSDP's prefetch, planner_comm.cc time_comm): a sharded-parameter
// data axis (zero3, hsdp, hzero) with units gathered ahead (prefetch > 0),
// timed on a GPU profile. Only then does BACKWARD_PRE or _POST plan anything.
bool device_prefetches(const PlanInput& in);

PlanResult plan(const PlanInput& in);

// The bandwidth (GB/s) of inter-node row c on hw: with rails, its members on
// one node (c.per_node) reach per_node x rails / ranks_per_node NICs of
// bw_inter_GBps each (an all-to-all one NIC), at most bw_intra_GBps; without,
// bw_inter_GBps; divided by the oversubscription when the group spans more
// than hw.leaf_nodes nodes.
double inter_node_GBps(const CommRow& c, const Hardware& hw, int64_t ranks_per_node);

// The Hardware::compute_scale that makes a step planned as `est` (at
// compute_scale 1) take `measured_s`: the measured time over the plan's, the
// data-parallel buffers' time (PlanResult::buffer_s, which compute_scale
// leaves alone) taken out of both; the plain ratio when the buffers are all
// of either. The sweep's plan rows and parabench calibrate both calibrate a
// single-rank step so.
double compute_scale_for(const PlanResult& est, double measured_s);

}  // namespace pb::planner
