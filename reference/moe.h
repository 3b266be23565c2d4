// The mixture-of-experts MLP of the canonical model (model_config.h
// MoeConfig says the rules: softmax router, top-k with ties to the lower
// expert, weights renormalized over the k chosen, capacity with first
// choices admitted first and each choice rank in token order, dropped
// choices contributing nothing, Switch load-balancing loss), forward and
// backward on one microbatch of N tokens: x (N, C) is the block's ln2 output,
// the MLP's output goes to the residual like the dense MLP's.
// On a device (a DeviceOps that is not the host's): the router GEMM, the
// rows moved to and from the experts, the experts' GEMMs and GELU, the
// combine and its backward run on the device; the routing decisions (router
// softmax, top-k, capacity admission, the load-balancing loss and the
// router's softmax backward: O(N E) values) run on the host between them:
// forward reads the logits back and sends the choices, slots and weights up,
// backward reads the combine weights' gradient back and sends the router's
// gradient up (each a wait on the device's stream), as the per-expert counts
// an expert-parallel dispatch needs on the host anyway.
// Invariant: the same arithmetic in the same order whoever calls it.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "harness/dtype.h"
#include "harness/memory.h"
#include "kernels/common/device_ops.h"
#include "reference/layout.h"

namespace pb {

// Tokens an expert admits out of `tokens` (ceil(cf * tokens * k / E), at
// most `tokens`: a token chooses an expert once).
int64_t moe_capacity(const MoeConfig& c, int64_t tokens);
// Rows one expert's buffer holds for a rank of N tokens whose capacity scope
// has scope_tokens (0: N alone): the scope's capacity, at most N.
int64_t moe_buffer_rows(const MoeConfig& c, int64_t N, int64_t scope_tokens);

// Injected faults (test-only), each caught by the conformance engine (their
// names and where they apply: impl/expert_parallel/faults.h).
enum class MoeFault : uint8_t {
  local_capacity,       // global capacity computed and admitted over this rank's tokens alone
  aux_per_rank,         // the load-balancing loss's f and P over this rank's tokens, not the scope's
  router_grad_missing,  // no gradient to the router through the top-k weights (only the aux's)
  ep_combine_permuted,  // expert parallel: each expert's returned rows land on its tokens in reverse order
  ep_expert_grads_dp,   // expert parallel: expert gradients reduced over the whole data group, not edp
  ep_grads_ep_times,    // expert parallel: the reduced expert gradients ep times too large
  // Tensor parallel's gate_up_mismatch (impl/tensor_parallel/options.h) on
  // the llama family's experts: each tp rank pairs its experts' gate rows
  // with their up rows in reverse order. Set by the tensor-parallel rank
  // from its own fault, not declared by name here.
  expert_gate_up_mismatch,
  // Full recompute (impl/tensor_parallel/runner.cc): the backward's rerun of
  // the MoE block adds its load-balancing term to the objective a second time
  // (the loss and the router's aux gradient count it twice).
  recompute_aux_twice,
};

// The rows an expert-parallel exchange moves, `width` elements of `dtype`
// each, by `copy` (bytes, within the rows' memory: the device's): this
// rank's expert e's count[e] rows at e * rows (expert-major = owner-major);
// an owner's local expert le's at le * ep * rows, every source's rows in
// group rank order, recv[s * E/ep + le] of them from source s. send and
// staged: buffers of E * rows rows the exchange packs into and receives in.
struct MoeRows {
  const int32_t* count = nullptr;  // (E)
  const int32_t* recv = nullptr;   // (ep, E/ep)
  int experts = 0;
  size_t rows = 0, width = 0;
  DType dtype = DType::f64;
  void* send = nullptr;
  void* staged = nullptr;
  std::function<void(void* dst, const void* src, size_t bytes)> copy;
};

// Every collective an MoE layer makes, behind one interface: the
// single-device reference's is LocalMoeExchange (one rank, no communicator);
// impl/expert_parallel/exchange.h's runs them over a rank's groups.
//
// Global capacity (capacity_ranks() > 1): the ranks sharing a microbatch's
// capacity; their tokens come before or after this rank's in the global
// token order (group rank order), and they agree on admission by
// all-gathering their per-(choice rank, expert) counts, not their tokens.
//
// Expert parallel (ep_size() > 1): the ep group splits the experts into ep
// equal contiguous ranges, rank r of the group owning experts [r*E/ep,
// (r+1)*E/ep). Routing and admission stay with the token's rank; the
// admitted rows go to their expert's owner (after the per-expert counts),
// come back, and backward sends the output gradients there and the input
// gradients back the same way. An owner runs each local expert on the rows
// of every source rank, concatenated in group rank order.
//
// Tensor parallel (tp_size() > 1, a ParamLayout of tp > 1): each expert's
// c_fc rows and c_proj columns are split over tp like the dense MLP's
// (Megatron-core's expert tensor parallel = tp), the router and c_proj's bias
// replicated. Every tp rank holds the same tokens (no sequence parallel), so
// it routes, admits and dispatches exactly as its peers; its experts' outputs
// are partial sums over the hidden split, summed over tp (then the bias
// added), and in backward so are the experts' input gradients. The llama
// family's experts (Mixtral): w1 (gate) and w3 (up) split by the same rows,
// w2 by those columns, no bias.
class MoeExchange {
 public:
  virtual ~MoeExchange() = default;
  virtual int capacity_ranks() const = 0;  // ranks sharing a microbatch's capacity (1: this rank alone)
  virtual int capacity_rank() const = 0;   // this rank's place among them
  virtual int ep_size() const = 0;
  virtual int tp_size() const = 0;
  // Global capacity: every sharing rank's n counts, rank-major, into all
  // (capacity_ranks() * n); the router probabilities' sums over them, in place.
  virtual void gather_routed(const double* mine, double* all, size_t n) const = 0;
  virtual void sum_probs(double* p, size_t n) const = 0;
  // Expert parallel: recv (ep, E/ep) = the rows each source admitted for this
  // rank's experts, from count (E) of every rank.
  virtual void exchange_counts(const int32_t* count, int32_t* recv, int experts) const = 0;
  // This rank's rows (src, expert-major) to their owners, landing in dst
  // (MoeRows says where); combine is its reverse, the owner's rows back to
  // their sources at e * rows. permute: each expert's rows land in reverse
  // order (the ep_combine_permuted fault).
  virtual void dispatch(void* dst, const void* src, const MoeRows& r) const = 0;
  virtual void combine(void* dst, const void* src, const MoeRows& r, bool permute) const = 0;
  // Tensor parallel: n elements summed over the tp group, in place.
  virtual void tp_sum(void* rows, size_t n, DType t) const = 0;
};

// One rank alone: no communicator; the rows stay where they are.
class LocalMoeExchange final : public MoeExchange {
 public:
  int capacity_ranks() const override { return 1; }
  int capacity_rank() const override { return 0; }
  int ep_size() const override { return 1; }
  int tp_size() const override { return 1; }
  void gather_routed(const double* mine, double* all, size_t n) const override;
  void sum_probs(double*, size_t) const override {}
  void exchange_counts(const int32_t* count, int32_t* recv, int experts) const override;
  void dispatch(void* dst, const void* src, const MoeRows& r) const override;
  void combine(void* dst, const void* src, const MoeRows& r, bool permute) const override;
  void tp_sum(void*, size_t, DType) const override {}
};

// An MoE layer's scope on a rank: its exchange (null: LocalMoeExchange) and
// its injected faults. impl/expert_parallel/exchange.h moe_scope builds one
// over a rank's groups.
//
// Context parallel: the capacity ranks' tokens interleave in the microbatch's
// token order (a sequence's chunks on every cp rank), so `order` holds each
// capacity rank's tokens' places in it, rank-major (capacity_ranks() x N);
// the ranks then all-gather their tokens' choices (not the counts) and each
// finds its pairs' places in the admission order from them. The cp ranks of a
// data rank share its microbatch under either capacity mode.
struct MoeScope {
  std::shared_ptr<const MoeExchange> exchange;
  std::set<MoeFault> faults;
  std::shared_ptr<const std::vector<int64_t>> order;  // null: the ranks' tokens in group rank order
  int ep_size() const { return exchange ? exchange->ep_size() : 1; }
  int tp_size() const { return exchange ? exchange->tp_size() : 1; }
  int capacity_ranks() const { return exchange ? exchange->capacity_ranks() : 1; }
  bool has(MoeFault f) const { return faults.count(f) > 0; }
  bool shared(const MoeConfig& c) const {
    return capacity_ranks() > 1 && (c.capacity == MoeCapacity::global || order != nullptr);
  }
  int64_t tokens(const MoeConfig& c, int64_t local) const { return shared(c) ? local * capacity_ranks() : local; }
};

// Routing totals of MoE layer forwards (a runner's since its last reset; a
// sweep row's over its measured steps): load statistics for results.
struct MoeLoad {
  int64_t calls = 0;            // MoE layer forwards
  int64_t choices = 0;          // (token, choice) pairs routed
  int64_t dropped = 0;          // of them past capacity
  int64_t sent_rows = 0;        // admitted rows dispatched (this rank's tokens)
  int64_t owner_rows = 0;       // rows this rank's experts ran on
  int64_t expert_calls = 0;     // (call, local expert) pairs
  int64_t max_expert_rows = 0;  // the most rows one local expert ran on in one call
  double dropped_fraction() const { return choices ? double(dropped) / double(choices) : 0.0; }
  // Load imbalance: the busiest expert's rows over the mean rows per expert (1: balanced; 0: no MoE).
  double max_over_mean() const {
    return owner_rows ? double(max_expert_rows) * double(expert_calls) / double(owner_rows) : 0.0;
  }
};

// An expert's hidden width on a rank of tp: 4C / tp (llama: ffn / tp), and
// its first projection's output width (llama: gate|up, twice that).
int moe_hidden(const ModelConfig& m, int tp);
int moe_hidden_in(const ModelConfig& m, int tp);

// Bytes one MoeActs of N tokens holds (elem_bytes: storage, acc_bytes:
// accumulation type): what an MoE block keeps instead of the dense MLP's
// two (N, 4C) activations.
// Expert parallel (ep > 1) adds the received counts and the owner's input rows.
// on_device: the device's bytes of a run on a device (the routing state is
// host memory there; the choices, slots and weights a copy on the device).
int64_t moe_activation_bytes(const ModelConfig& m, int64_t N, int64_t scope_tokens, int elem_bytes, int acc_bytes,
                             int ep = 1, int tp = 1, bool on_device = false);

// What one MoE MLP keeps for backward (activations).
template <class T>
struct MoeActs {
  using A = acc_t<T>;
  int cap = 0;             // tokens an expert admits over the scope
  int rows = 0;            // rows per expert here: min(cap, this rank's tokens)
  Buffer<A> probs;         // (N, E) router softmax
  Buffer<int32_t> choice;  // (N, k) chosen experts, best first
  Buffer<A> weight;        // (N, k) probabilities renormalized over the k
  Buffer<int32_t> slot;    // (N, k) row in the expert's buffer; -1: dropped
  Buffer<int32_t> count;   // (E) tokens admitted
  Buffer<T> fch, fchg, y;  // (E * cap, Hin), (E * cap, H), (E * cap, C): each expert's rows (moe_hidden)
  Buffer<A> frac;          // (E) f_e: fraction of (token, choice) pairs routed to e
  // Expert parallel (ep > 1): fch, fchg are the owner's, local expert le's
  // rows at le * ep * rows (every source's admitted rows, sources in order),
  // and xr holds their inputs; y stays this rank's (its tokens' outputs).
  int ep = 1;
  Buffer<int32_t> recv;    // (ep, E/ep) rows source s sent for local expert le
  Buffer<T> xr;            // (E * rows, C)
  // On a device: the device's copies of choice, slot and weight (the
  // combine's arguments); empty on the host, where the routing buffers are.
  Buffer<int32_t> choice_dev, slot_dev;
  Buffer<A> weight_dev;
  const int32_t* dchoice() const { return choice_dev.empty() ? choice.data() : choice_dev.data(); }
  const int32_t* dslot() const { return slot_dev.empty() ? slot.data() : slot_dev.data(); }
  const A* dweight() const { return weight_dev.empty() ? weight.data() : weight_dev.data(); }
  double aux = 0;          // this microbatch's load-balancing loss (coef included)
  int64_t dropped = 0;     // choices past capacity
  MoeActs() = default;
  // N: this rank's tokens; scope_tokens: the capacity scope's (N alone); ep: the expert-parallel group's size.
  // tp: the tensor-parallel split of the experts' hidden width (4C / tp per rank).
  // on_device: the rows on the tracker's device, the routing state on the host (Place::host).
  MoeActs(MemoryTracker* mt, const ModelConfig& m, int N, int64_t scope_tokens = 0, int ep = 1, int tp = 1,
          bool on_device = false);
  int64_t owner_rows() const;  // admitted rows this rank's experts ran on (ep > 1: from every source)
  int64_t sent_rows() const;   // rows this rank dispatched (its admitted choices)
  int expert_rows(int le) const;  // rows local expert le ran on (ep > 1: summed over the sources)
  void add_to(MoeLoad& l, int experts, int top_k) const;  // this forward's routing
};

// Workspace shared by the MoE MLPs of a microbatch. On a device (on_device):
// no CPU GEMM workspace (the device's kernels keep their own), the router
// gradient dp on the host, and host copies of the logits and dw to route on.
template <class T>
struct MoeScratch {
  Buffer<T> logits, xe, dy, dfchg, dfch, dxe;
  Buffer<acc_t<T>> dp, dw;  // (N, E) router gradient (host); (N, k) the combine weights' gradient
  Buffer<float> mm_ws;
  Buffer<T> send, recv, rows;  // expert parallel: packed rows out, in, and the owner's rows (E * rows, C)
  Buffer<T> host_logits;       // on a device: logits read back (and the router's gradient sent up)
  Buffer<acc_t<T>> host_dw;    // on a device: dw read back
  MoeScratch() = default;
  MoeScratch(MemoryTracker* mt, const ModelConfig& m, int N, int64_t scope_tokens = 0, int ep = 1, int tp = 1,
             bool on_device = false);
  // The tracked bytes of the tracker's device (Place::device) the constructor allocates.
  static int64_t bytes(const ModelConfig& m, int N, int64_t scope_tokens = 0, int ep = 1, int tp = 1,
                       bool on_device = false);
};

template <class T>
class MoeMlp {
 public:
  using A = acc_t<T>;
  // ops: the device the buffers live on and the row ops run on (the CPU's by default).
  MoeMlp(const ParamLayout& layout, int N, MoeScope scope = {},
         const kernels::DeviceOps<T>& ops = kernels::cpu_ops<T>());
  // out (N, C) = the MoE MLP of x; u: the block unit's parameters; ue: this
  // rank's experts' (E / ep contiguous expert ranges; null: u's own, which
  // then holds every expert).
  void forward(MoeActs<T>& a, T* out, const T* x, const T* u, MoeScratch<T>& s, const T* ue = nullptr) const;
  // dx (N, C) and du (due: the experts', null: du's) accumulate; aux_weight:
  // the weight of this microbatch's load-balancing term in the objective
  // (that term's share of the step's tokens: dloss x the scope's tokens).
  void backward(T* dx, T* du, const T* dout, const T* x, const MoeActs<T>& a, const T* u, double aux_weight,
                MoeScratch<T>& s, const T* ue = nullptr, T* due = nullptr) const;

 private:
  template <class P> P* expert(P* ue, int le) const { return ue + int64_t(le) * o_.expert_size; }
  void gather(T* xe, const T* x, const MoeActs<T>& a) const;  // every admitted token's row to its slot
  // The routing of forward on the host, from the logits (host memory): a's
  // probabilities, choices, weights, slots, counts, f_e and aux.
  void route(MoeActs<T>& a, const T* logits) const;
  // Expert parallel: a's rows as the exchange moves them, staged in s.
  MoeRows rows_of(const MoeActs<T>& a, MoeScratch<T>& s) const;
  // Tensor parallel: each local expert's rows (le at le * stride) summed over tp.
  void tp_sum_rows(T* rows, const MoeActs<T>& a, size_t stride) const;
  // The expert_gate_up_mismatch fault: the up half of each of `rows` gate|up
  // rows reversed in place (its own inverse); tmp: `rows` elements of scratch.
  void reverse_up(T* gu, int rows, T* tmp) const;

  const kernels::DeviceOps<T>* ops_;
  MoeConfig c_;
  MoeOffsets o_;
  MoeScope scope_;
  std::shared_ptr<const MoeExchange> x_;  // scope_'s, or a LocalMoeExchange
  int N_, C_, E_, k_, ep_ = 1, El_;
  int tp_ = 1, H_;  // tensor parallel: the experts' hidden width here (4C / tp; llama: F / tp)
  int Hin_;         // the first projection's output width (H; llama: 2H, gate|up)
  bool swiglu_;     // the llama family's SwiGLU experts (Mixtral): no biases
  bool mismatch_;   // the expert_gate_up_mismatch fault (llama, tp > 1)
  int64_t scope_tokens_;
};

}  // namespace pb
