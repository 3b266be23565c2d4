// What one pipeline rank holds and keeps, as pure functions of the config:
// its parameter pieces (the flat ranges of its chunks' units, in chunk order,
// plus the last rank's copy of the tied wte; the llama family's head is
// untied and has none), the flat ranges its gradient-norm
// partial sums, and the activation bytes one in-flight (microbatch, chunk)
// keeps. The executor (executor.h) and the conformance engine both use these,
// so the engine's replay plan and declared bytes cannot drift from the run.
// Invariant: pieces are disjoint in local storage and each is one contiguous
// flat range, so a unit's parameters are one pointer; wte is counted in the
// norm once, on rank 0 (the last rank's copy is `tied`).
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "impl/data_parallel/shard.h"
#include "impl/pipeline/cost.h"
#include "impl/pipeline/schedule.h"
#include "impl/tensor_parallel/options.h"
#include "reference/layout.h"
#include "reference/train_config.h"

namespace pb::pipeline {

struct Piece {
  int64_t flat_lo = 0, flat_hi = 0;  // in the flat parameter vector
  int64_t local_off = 0;             // in the rank's own buffers
  bool tied = false;                 // the last rank's copy of wte (pp > 1)
};

struct StagePieces {
  std::vector<Piece> pieces;
  int64_t size = 0;  // real elements held
  // Local offset of flat element `flat` (must be held; the non-tied copy wins).
  int64_t local(int64_t flat) const;
  // Local offset of the tied LM head weight (wte) on the rank holding the head.
  int64_t head_wte_local() const;
};

// Rank `rank`'s pieces: for each chunk c, the units of virtual stage
// c * pp + rank (unit 0 on stage 0, the final LN unit on the last stage).
StagePieces stage_pieces(const ParamLayout& l, const Partition& part, int rank);

// The units a stage's data-parallel component (impl/data_parallel/
// component.h) holds and shards: the model units of its pieces in piece
// order, the embedding unit held as two, wte then wpe (so the tied wte is one
// unit of equal size, sharded alike, on the first and the last stage), and on
// the last stage of pp > 1 the tied wte copy, outside the norm. The llama
// family (untied head, no position table, docs/models.md): the embedding is
// one unit (wpe -1), the final unit is held as two, model.norm then lm_head
// (the size of wte's, sharded alike), and nothing is tied. With no padding
// (DDP) the units lie back to back in piece order, as the pieces do.
struct StageUnits {
  std::vector<dp::UnitSpan> units;
  std::vector<int> of_model;  // model unit -> index (unit 0: wte's; the final unit: its norm's); -1 when not held
  int wte = -1, wpe = -1, tied = -1;
  // The unit the LM head's weight is read from and its gradient written to:
  // wte at pp = 1, the tied copy on the last stage of pp > 1, or the llama
  // family's lm_head; -1 off the last stage.
  int head = -1;
  // Reads of unit i's parameters per microbatch, forward and backward: one
  // each for blocks, the final LN and the head's wte (tied copy, or wte at
  // pp = 1, where it is also read by the embedding); the embedding's wte and
  // wpe once in forward (its backward reads none). A ZeRO-3-family stage
  // gathers a unit once per read.
  std::vector<int> fwd_uses, bwd_uses;
};
// A mixture-of-experts block's unit stops before its first expert: the
// experts are the stage's expert units (stage_experts), a component of their
// own over the expert-data-parallel group.
StageUnits stage_units(const ParamLayout& l, const Partition& part, int rank);

// The experts a pipeline rank holds: for each MoE block of its chunks (chunk,
// then block order), the contiguous range of ep rank `ep_rank`'s E / ep
// experts (expert_parallel/options.h expert_units, one stage's share).
struct StageExperts {
  std::vector<dp::UnitSpan> units;
  std::vector<int> of_layer;  // model layer -> expert unit index; -1: dense, or not on this rank
};
StageExperts stage_experts(const ParamLayout& l, const Partition& part, int rank, int ep, int ep_rank);

// What a stage's MoE blocks keep beyond a dense block's attention half: the
// capacity scope (reference/moe.h MoeScope::tokens: the microbatch's tokens
// over the data ranks sharing capacity; 0: this rank's own) and the
// expert-parallel group's size.
struct MoeStage {
  int64_t scope_tokens = 0;
  int ep = 1;
  bool on_device = false;  // a device's bytes (the routing state on the host, reference/moe.h)
};

using Ranges = std::vector<std::pair<int64_t, int64_t>>;
// The flat ranges whose squares this rank sums: its non-tied pieces, cut to
// the local window [lo, hi) of its buffers (ZeRO-1: the owned slice), in
// local order.
Ranges norm_ranges(const StagePieces& sp, int64_t lo, int64_t hi);

// Activation bytes one in-flight (microbatch, chunk) keeps from its F to its
// last backward: the chunk's input, every block's BlockActs (plus the B -> W
// gradient stash when split), the tokens on the first stage, HeadActs and the
// targets on the last. Sizes as reference/gpt.cc allocates them.
// An MoE block keeps MoeActs (reference/moe.h moe_activation_bytes) instead
// of the dense MLP's two (N, 4C) activations.
int64_t chunk_activation_bytes(const ModelConfig& m, const StageSlice& st, int64_t B, int64_t T,
                               int64_t dtype_bytes, int64_t acc_bytes, bool split_backward, MoeStage moe = {});

// zb-h1 with MoE blocks: an MoE block's backward runs whole in B, so W has
// weight gradients to form on (rank, chunk) only where a dense block is.
bool has_dense_block(const ModelConfig& m, const StageSlice& st);

// True when a stage runs the tensor-parallel stage model's pieces
// (tensor_parallel/runner.h TpModel) instead of the reference's blocks:
// tp or cp > 1, or recomputation, which only that model does (at tp = cp = 1
// it runs with tp 1, as outside pipelines).
bool runs_stage_model(const tp::TpOptions& o);

// Bytes one in-flight (microbatch, chunk) keeps, for every chunk of every
// rank (rows: pipeline ranks): chunk_activation_bytes, or where the stage
// model runs (runs_stage_model) the tensor-parallel stage's
// (tensor_parallel/cost.h stage_activation_bytes).
std::vector<std::vector<int64_t>> chunk_bytes_table(const ModelConfig& m, const Partition& part, int64_t B,
                                                     int64_t T, Precision p, const tp::TpOptions& o, bool split,
                                                     MoeStage moe = {});
// Full recompute in the stage model with MoE blocks on the rank: the one
// MoeActs (reference/moe.h) the backward's rerun of an MoE block fills, held
// beside the in-flight units, whose MoE blocks keep their output alone
// (chunk_bytes_table); 0 otherwise.
int64_t moe_rerun_bytes(const ModelConfig& m, int64_t B, int64_t T, Precision p, const tp::TpOptions& o, MoeStage moe,
                        bool moe_blocks_here);
// A rank's declared peak activation bytes under schedule `kind`: its peak
// in-flight units x their bytes with one chunk, else the peak of live bytes
// in the generated order (peak_activation_bytes).
int64_t stage_activation_peak(ScheduleKind kind, const ScheduleConfig& sc,
                              const std::vector<std::vector<int64_t>>& table, int rank);

// Workspace bytes a pipeline rank allocates: the backward's two gradient
// buffers and the step's token/target staging, plus the reference's Scratch
// (tp = 1) or the tensor-parallel model's workspace (impl/tensor_parallel),
// and an MoE model's MoeScratch. kernel_ws: the CPU kernels' workspaces in
// Scratch (on the host; a device's kernels keep their own).
int64_t stage_workspace_bytes(const ModelConfig& m, int64_t B, int64_t T, Precision p, const tp::TpOptions& o,
                              MoeStage moe = {}, bool kernel_ws = true);

// The buffers a pipeline rank holds in MemTag::comm, replayed in its
// schedule order as the executor (executor.cc) allocates and frees them:
//  - a ZeRO-3-family unit's gathered parameters (padded) from its read until
//    released after the use (hZeRO's forward gather also lands in a padded
//    staging buffer, freed when waited on; its backward reads the node-local
//    secondary and needs none);
//  - a ZeRO-2/3-family unit's gradient per (microbatch, unit), padded, from
//    its first backward write until reduce-scattered through a slice-sized
//    buffer (hZeRO across nodes: a padded/r intermediate too); at pp = 1 the
//    head's wte gradient lives until the embedding's backward;
//  - the gradient of the boundary: received before a backward and freed at
//    its end; the input gradient a backward produces (not on the embedding's
//    chunk), held until sent (sends complete eagerly, as on the local
//    backend: the buffer is freed after the send) or, at pp = 1, until the
//    previous chunk's backward;
//  - after the flush (and at PipeDream-2BW's weight updates): ZeRO-1's
//    reduce-scatter of every unit, then ZeRO-1/2's all-gather of every updated
//    slice over dp > 1, one slice-sized buffer at a time.
// DDP's reductions run in place. The planner's pipeline comm figure; the
// executor's measured peak equals it on the local backend (stage_test.cc).
struct StageCommShape {
  StageUnits units;         // the dense component's (stage_units of the tp-local layout)
  StageExperts experts;     // an MoE model's expert units (stage_experts); empty for a dense one
  dp::DataAxis dense, expert;  // the two components' data axes (data_axis)
  int64_t boundary_bytes = 0;  // one (microbatch, chunk) boundary tensor on this rank
  bool tp = false;             // the tensor/context-parallel stage model runs the blocks
};
int64_t stage_comm_peak_bytes(const Schedule& s, const Partition& part, const ParamLayout& l, int rank,
                              const StageCommShape& x);
// Microbatches enough for that peak: past pp x v in flight every schedule
// repeats its steady state, and nothing the replay holds outlives its
// microbatch's backward, so the peak at min(m, comm_peak_microbatches) is the
// peak at m (stage_test.cc checks it to 3x past the bound). Keeps the
// planner's replay O(pp v) at any global batch.
int comm_peak_microbatches(const ScheduleConfig& cfg);
// Peak over the rank's action order of the summed bytes of live (microbatch,
// chunk) units (F done, last backward not), given bytes per chunk of that rank.
// With one chunk this is peak_in_flight x bytes.
std::vector<int64_t> peak_activation_bytes(const Schedule& s,
                                           const std::vector<std::vector<int64_t>>& chunk_bytes);

// True when, for every (rank, chunk), the weight-gradient accumulations (BW or
// W; B too, which carries the head's and embedding's) run in increasing
// microbatch order: the condition for bit equality with the reference's
// in-order accumulation.
bool accumulates_in_microbatch_order(const Schedule& s);

}  // namespace pb::pipeline
