// What the context axis costs, as functions of the config: the one source the
// context-parallel rank declares (the conformance engine holds its measured
// figures equal to these) and the planner evaluates at any scale.
//
// A rank holds s/cp tokens of each of b sequences and a heads of hs (a = the
// model's heads / tp). Everything outside attention is per token, so its
// activations fall as 1/cp (tensor_parallel/cost.h counts them with s/cp);
// attention keeps, per layer, for backward:
//   ring:    the log-sum-exp per (sequence, head, token held): a*b*(s/cp) in
//            the accumulation type (no probabilities: blockwise attention);
//   Ulysses: the head-sharded Q, K, V of every token of its a/cp heads
//            (3*b*s*hs*a/cp elements) and, unless recomputed, their
//            probabilities b*(a/cp)*s*s — the whole sequence's, for 1/cp of
//            the heads. Nothing stays replicated over cp.
// Communication per layer and microbatch on the cp group (logical bytes,
// comm_log.h; a K/V block is 2*b*(s/cp)*a*hs elements; kv for a under
// grouped-query attention, AttnShape::kv):
//   ring:    forward cp-1 K/V sends; backward cp-1 K/V sends and cp-1 dK/dV
//            accumulator sends (accumulation type);
//   Ulysses: forward 4 all-to-alls (Q, K, V, output), backward 4 (the
//            output's gradient, dQ, dK, dV), each b*(s/cp)*a*hs elements.
//   Full recomputation reruns the forward's in backward.
#pragma once
#include <cstdint>

#include "impl/spec/run_spec.h"

namespace pb::cp {

struct AttnShape {
  int64_t b = 1, s = 1;  // sequences per microbatch, tokens per sequence (whole)
  int64_t a = 1, hs = 1; // heads on this rank (after tp), head size
  int cp = 1;
  CpAlgo algo = CpAlgo::ring;
  int elem_bytes = 4, acc_bytes = 4;
  // Grouped-query attention's kv heads on this rank (0: a, multi-head): the
  // ring's K/V blocks and dK/dV accumulators are kv heads wide; Ulysses' K
  // and V all-to-alls (and dK, dV) and its kept K, V too, kv a multiple of
  // cp there (the llama family's kv heads replicated to lcm(kv, cp),
  // tensor_parallel/runner.cc).
  int64_t kv = 0;
  int64_t kv_heads() const { return kv > 0 ? kv : a; }
};

// Bytes of attention state one layer keeps for backward (see above; cp = 1 is
// not this function's: the probabilities, tensor_parallel/cost.h).
int64_t kept_bytes(const AttnShape& x, Recompute r);

struct CpCalls {
  int64_t calls = 0, bytes = 0;
};
struct CpLayerComm {
  CpCalls fwd_send, bwd_send;  // ring
  CpCalls fwd_a2a, bwd_a2a;    // Ulysses
  int64_t forward() const { return fwd_send.bytes + fwd_a2a.bytes; }
  int64_t backward() const { return bwd_send.bytes + bwd_a2a.bytes; }
  int64_t send() const { return fwd_send.bytes + bwd_send.bytes; }
  int64_t all_to_all() const { return fwd_a2a.bytes + bwd_a2a.bytes; }
};
// One layer, one microbatch, on one rank.
CpLayerComm layer_comm(const AttnShape& x, Recompute r);

// Attention FLOPs (4*hs per visible query-key pair, forward) of rank `rank`
// per layer and microbatch: with zigzag every rank's are equal; contiguous,
// rank cp-1's are about 2cp-1 times rank 0's.
int64_t attention_flops(const AttnShape& x, int rank, bool zigzag);

}  // namespace pb::cp
