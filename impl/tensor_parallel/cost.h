// What the tensor axis costs, as functions of the config: the one source the
// tensor-parallel rank declares (the conformance engine holds its measured
// figures equal to these) and the planner evaluates at any scale.
//
// Activations (Korthikanti et al. 2022, "Reducing Activation Recomputation
// in Large Transformer Models", Sec. 4.1, eq. 1-2 and Table 2): bytes one
// microbatch of b sequences of s tokens leaves stored in one layer of width
// h with a heads on one rank. Stored per token, in elements of e bytes:
//   replicated across tp: the LayerNorm inputs and outputs (x_in, ln1, xmid,
//     ln2: 4h), sharded over tp with sequence parallel (4h/t);
//   split over tp: QKV (3h), the attention output (h), the MLP's 4h before
//     and after GELU (8h): 12h/t;
//   the attention probabilities: a*s/t per token (dropped by selective
//     recomputation);
//   with dropout (the paper's model): the attention dropout's 1-byte mask and
//     output (a*s/t (1 + e)), and the 1-byte masks after attention-out and
//     MLP-down (2h, /t with SP);
//   LayerNorm statistics (mean and 1/std of both LayerNorms: 4 values per
//     token of stats_bytes each, /t with SP) — stored by an implementation
//     but left out by the paper (stats_bytes = 0 reproduces it);
//   full recomputation: only the layer input (h, /t with SP).
// At e = 2, dropout, stats_bytes = 0 this is the paper's
// sbh(10 + 24/t + 5as/(ht)) (34/t with SP); the canonical model has no
// dropout and stores its statistics: sbh(8 + 24/t + 2as/(ht)) + 16sb at bf16.
//
// Communication of one microbatch on the tp group (logical bytes, comm_log.h),
// NCe = b*s*h*e: see comm_per_microbatch.
#pragma once
#include <cstdint>
#include <vector>

#include "harness/comm/comm_log.h"
#include "impl/context_parallel/cost.h"
#include "impl/spec/run_spec.h"
#include "reference/model_config.h"

namespace pb::tp {

struct ActivationShape {
  int64_t b = 1, s = 1, h = 1, a = 1;
  int tp = 1, cp = 1;
  bool sp = false;
  bool dropout = false;
  int elem_bytes = 2;
  int stats_bytes = 0;  // LayerNorm mean/rstd element size (0: not counted, as the paper)
  CpAlgo algo = CpAlgo::ring;  // with cp > 1: what attention keeps (context_parallel/cost.h)
};
// One layer on one rank (s/cp tokens held per sequence with cp > 1; then
// attention keeps cp::kept_bytes instead of the probabilities).
int64_t layer_activation_bytes(const ActivationShape& x, Recompute r);

// The shape of a tensor-parallel rank of the canonical model.
struct TpShape {
  ModelConfig model;
  int tp = 1;
  bool sp = false;
  Recompute recompute = Recompute::none;
  int Bm = 1, Tn = 1;            // microbatch sequences and tokens per (whole) sequence
  int elem_bytes = 4, acc_bytes = 4;  // storage and accumulation types
  int cp = 1;                    // context parallel: Tn / cp tokens of each sequence held
  int64_t moe_scope_tokens = 0;  // MoE: the capacity scope's tokens (0: this rank's microbatch)
  int ep = 1;                    // MoE: the expert-parallel group's size
  bool moe_on_device = false;    // MoE: a device's bytes (the routing state on the host, moe.h)
  CpAlgo algo = CpAlgo::ring;
  int64_t tokens() const { return int64_t(Bm) * Tn / cp; }  // a microbatch's, on this rank
};
// The attention shape of a rank of x (its heads after tp).
cp::AttnShape attn_shape(const TpShape& x);
ActivationShape layer_shape(const TpShape& x);
// The shape of a rank of `p` (storage and accumulation bytes from the precision).
TpShape make_shape(const ModelConfig& m, int tp, bool sp, Recompute r, int64_t Bm, int64_t Tn, Precision p);

// Activation bytes a rank holds (reference layout, no dropout): tokens and
// targets (int32), the embedding output (h per token, /t with SP), L layers,
// and the head: final LayerNorm output and statistics (/t with SP), the
// probabilities over this rank's V/t (padded) vocabulary rows for every
// token, and the token losses.
int64_t activation_bytes(const TpShape& x);
// The same for a pipeline chunk of `blocks` layers (its input; the tokens
// with the embedding; the head and the targets with it). The whole model is
// stage_activation_bytes(x, L, true, true) == activation_bytes(x).
// moe_blocks: how many of the chunk's layers are MoE blocks (MoeActs for the
// dense MLP's activations); -1: the whole model's when blocks == L, else none.
int64_t stage_activation_bytes(const TpShape& x, int64_t blocks, bool embedding, bool head, int64_t moe_blocks = -1);
// zb-h1: one block's B -> W gradient stash (runner.h TpModel::Stash): the
// output gradients of the MLP (C per token, gathered) and its up GEMM
// (4C/t; llama gate|up 2F/t), of the attention output (C, gathered) and its
// q|k|v (3C/t; llama the projection's width), the two norms' input
// gradients (C per held token), and with SP the two gathered norm outputs.
int64_t block_stash_bytes(const TpShape& x);

// Parameters a tp rank holds, per unit (embeddings with ceil(V/t) token rows;
// per block 12C^2/t + 7C/t + 6C: QKV, attention-out and MLP weights and the
// column-parallel biases split, row-parallel biases and LayerNorms whole;
// the final LayerNorm).
std::vector<int64_t> unit_params(const ModelConfig& m, int tp);
// Elements of the tp-replicated parameters (LayerNorms, row-parallel biases,
// wpe, final LayerNorm): the ones whose gradients sequence parallel all-reduces
// and the clip norm counts once.
int64_t replicated_params(const ModelConfig& m);
// The same on a pipeline rank holding `layers` blocks and maybe the
// embedding (wpe) and the head (final LayerNorm).
int64_t replicated_params(const ModelConfig& m, int64_t layers, bool embedding, bool head);
// Bytes a tp rank all-reduces over tp once per step: the clip norm's partial
// sum (8) and, with SP, the gradients of the replicated parameters it holds
// (`held` elements of elem_bytes; all of them without data-parallel sharding).
int64_t step_bytes(bool sp, int64_t held, int elem_bytes);

// Bytes one microbatch moves on the tp group, by op, and the forward /
// backward split the planner times. Without SP: all-reduces of NCe — the
// embedding's partial lookups, 2 per layer forward (attention-out, MLP-down)
// and 2 backward (the column-parallel inputs' gradients), the head's
// LM-head input gradient — plus the vocabulary-parallel cross-entropy's max
// (N accumulator values) and sum-of-exponentials + target logit (2N).
// With SP the all-reduces become reduce-scatters (embedding, 2 per layer
// forward, 2 backward, head backward) and all-gathers (2 per layer forward;
// backward: the output gradient before both row-parallel GEMMs and both
// stored LayerNorm outputs re-gathered; the head's input forward and again
// backward; the embedding's output gradient). Full recomputation reruns each
// layer's forward communication in backward.
struct TpComm {
  int64_t all_reduce = 0, all_gather = 0, reduce_scatter = 0;
  int64_t forward = 0, backward = 0;  // the same bytes split by pass
};
TpComm comm_per_microbatch(const TpShape& x);
// A pipeline chunk's share: `blocks` layers, maybe the embedding and the head.
TpComm stage_comm_per_microbatch(const TpShape& x, int64_t blocks, bool embedding, bool head);

// The same by piece and pass, with call counts (the planner's rows: a
// pipeline rank holds some layers and maybe the embedding or the head).
struct TpCalls {
  int64_t calls = 0, bytes = 0;
};
struct TpPass {
  TpCalls all_reduce, all_gather, reduce_scatter;
};
struct TpPieceComm {
  TpPass fwd, bwd;
};
TpPieceComm layer_comm(const TpShape& x);      // one layer, one microbatch
TpPieceComm embedding_comm(const TpShape& x);  // the vocabulary-parallel lookup
TpPieceComm head_comm(const TpShape& x);       // LM head + vocabulary-parallel cross-entropy

}  // namespace pb::tp
