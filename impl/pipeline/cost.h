// Declared costs of the pipeline axis, as pure functions of the config: the
// bubble, the peak in-flight microbatches per rank, the p2p volume per step,
// the tied-embedding gradient exchange, and the stage partitioning of the
// canonical model. The simulator and the executor are checked against these;
// the planner evaluates them at any scale.
//
// Bubble (over ideal; the definitions are in simulator.h), p2p latency excluded:
//   gpipe, 1f1b  (p-1)/m                 (Narayanan et al. SC'21, Sec. 2.2.1;
//                                         GPipe, Huang et al. 2019, states the
//                                         fraction form (p-1)/(m+p-1))
//   interleaved  (p-1)/(v m)             (Narayanan et al. SC'21, Sec. 2.2.2)
//   zb-h1        (p-1)(F+B-W)/(m(F+B+W)) (Qi et al. ICLR'24, Sec. 2.1: bubble
//                (p-1)(T_F+T_B-T_W) vs 1F1B's (p-1)(T_F+T_B+T_W), i.e. (p-1)/(3m)
//                with equal costs, as their README table); stated for
//                W <= min(F, B), outside that no value is declared
//   2bw          (p-1)/(K m) over a window of K steps (one fill and drain; 0 in
//                the steady state)
// Peak in-flight (microbatch, chunk) units on rank r, F done and last backward
// not (simulator.h): gpipe m; 1f1b and 2bw min(p-r, K m); interleaved v > 1
// min(2(p-r-1) + (v-1)p + 1, v m) (Megatron's warmup + 1); zb-h1 p (p - r until B).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "impl/data_parallel/cost.h"
#include "impl/pipeline/schedule.h"

namespace pb::pipeline {

struct Costs {
  double f = 1, b = 1, w = 1;  // per microbatch through a full stage (all of a rank's layers)
  double p2p = 0;              // latency of one SEND -> RECV
};

struct DeclaredBubble {
  std::optional<double> over_ideal;  // nullopt: no formula for these costs
  std::optional<double> fraction;    // x / (1 + x)
  std::string formula;               // e.g. "(p-1)/m"
};

DeclaredBubble declared_bubble(ScheduleKind kind, const ScheduleConfig& cfg, const Costs& c);
std::vector<int> declared_peak_in_flight(ScheduleKind kind, const ScheduleConfig& cfg);
std::vector<int> declared_peak_until_b(ScheduleKind kind, const ScheduleConfig& cfg);

// Bytes of one microbatch's boundary tensor (the residual stream between
// blocks, and its gradient): B * T * C * dtype_bytes.
int64_t boundary_bytes(int64_t B, int64_t T, int64_t C, int64_t dtype_bytes);

// Point-to-point volume of one optimizer step (m microbatches): every one of the
// p v - 1 virtual-stage boundaries carries one activation forward and one
// gradient backward per microbatch. pp = 1 hands over locally: zero.
struct P2PVolume {
  int64_t messages = 0;             // 2 m (p v - 1)
  int64_t bytes = 0;                // messages * boundary bytes
  std::vector<int64_t> send_bytes;  // [rank] m A (2v - [r = p-1] - [r = 0])
};
P2PVolume p2p_per_step(const ScheduleConfig& cfg, int64_t boundary_bytes);

// The tied token embedding lives on rank 0 (wte lookup) and rank pp-1 (LM
// head); their two gradients are summed once per step by an all-reduce over
// {0, pp-1} (Megatron's embedding group) of V*C elements. Logical bytes of that
// all-reduce (nccl-tests convention: the buffer size); 0 when pp = 1.
int64_t tied_embedding_grad_bytes(int64_t V, int64_t C, int64_t dtype_bytes, int pp);

// Partition of the canonical model's L blocks over pp * v virtual stages.
struct StageSlice {
  int rank = 0, chunk = 0, vstage = 0;
  int first_block = 0, num_blocks = 0;  // blocks [first_block, first_block + num_blocks)
  bool embedding = false;               // wte + wpe lookup: virtual stage 0
  bool head = false;                    // final LayerNorm, tied LM head, loss: last stage
};
struct Partition {
  int layers = 0, pp = 1, v = 1;
  std::vector<StageSlice> stages;  // by virtual stage
  const StageSlice& at(int rank, int chunk) const { return stages[size_t(chunk * pp + rank)]; }
};

// Contiguous and balanced: every virtual stage gets floor(L / (p v)) blocks;
// the L mod (p v) extra blocks go to the interior stages 1, 2, ... and then to
// stage 0, never to the last stage, which already carries the LM head (the
// largest matmul). InputError when p v > L ("more stages than layers") or any
// argument is < 1.
Partition partition_layers(int L, int pp, int v);

// InputError unless pp >= 1 divides world (world = dp * tp * cp * pp).
void check_pipeline_mesh(int world, int pp);

// Data-parallel traffic of one pipeline stage per optimizer step, the
// executor's protocol (executor.h) for the stage's units (stage.h
// stage_units: sizes and parameter reads per microbatch), m microbatches:
//   none   all_reduce of every unit once, after the flush           group dp
//   zero1  reduce_scatter of every padded unit once + all_gather once after the step
//   zero2  reduce_scatter of every padded unit per microbatch + all_gather after the step
//   zero3  per microbatch: all_gather(P) of a padded unit at every read, reduce_scatter(G) of
//          every padded unit (group dp)
//   hsdp   zero3 on dp_shard (F ranks) + all_reduce of the gradient shard over dp_replica once
//   hzero  forward reads all_gather over dp; backward reads from the node-local secondary
//          (dp_intra); reduce_scatter over dp_intra, then of the node's 1/r over dp_inter
// Logical bytes, nccl-tests convention (dp cost.h CollCost); groups of size 1
// issue nothing. The planner evaluates the same function at any scale.
using StageUnitUse = dp::UnitUse;
std::vector<dp::CollCost> stage_dp_comm_per_step(const std::vector<StageUnitUse>& units, const dp::DataAxis& a,
                                                 int microbatches);

}  // namespace pb::pipeline
