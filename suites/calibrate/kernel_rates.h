// The compute side of a training shape, measured on this machine: the GEMM
// efficiency of a rank's GEMMs at their own shapes, the memory-bound kernels'
// effective bandwidth, and a context-parallel attention core as its ranks run
// it. The sweep's plan rows and `parabench calibrate --model` both use these.
#pragma once
#include <cstdint>
#include <map>
#include <tuple>

#include "harness/mesh.h"
#include "impl/spec/run_spec.h"
#include "reference/model_config.h"

namespace pb::calibrate {

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

// The same with the shapes' rates kept in `rate` across calls (each shape
// timed once), for the splits of one shape.
using GemmRates = std::map<std::tuple<int64_t, int64_t, int64_t, bool, bool>, double>;  // GFLOP/s by shape
double gemm_efficiency_timed(const ModelConfig& m, int Bm, int seq, double peak_flops, double seconds, int tp, int cp,
                             bool attention_core, GemmRates& rate);

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


}  // namespace pb::calibrate
