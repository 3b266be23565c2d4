// Causal multi-head attention over a sequence split across the cp ranks of a
// context-parallel group (placement: options.h). Every rank holds the Q, K, V
// of its own tokens for its (tensor-parallel local) heads, as the canonical
// model's qkv (N, 3Ct): N = Bm * Tl tokens in (sequence, local token) order,
// [q | k | v], heads interleaved in Ct = H * hs.
//
// Ring attention (Liu et al. 2023; the zigzag placement of Megatron-LM's
// context parallel and ring-flash-attn): K/V blocks travel around the ring
// (rank r sends to r+1, receives from r-1). At step j a rank holds the block
// of rank r-j; the transfer of the next block is posted non-blocking before
// the current block's compute, so it overlaps it. Each step's partial output
// (o, m, l) is merged into the running one by log-sum-exp rescaling
// (kernels' attention_block_merge); the mask of each (query run, key run)
// pair is by true position. The rank keeps its output and lse (Bm, H, Tl).
// Backward (FlashAttention-2's, with lse and D = rowsum(dO * O)): K/V travel
// the ring again; the dK/dV a rank computes for a visiting block are added to
// the block's travelling accumulator (fp32, or fp64 at fp64) and sent on one
// hop behind the K/V, so after cp-1 hops each block's accumulator reaches its
// owner, which adds its own contribution. Per layer and microbatch a rank
// sends (cp-1) K/V blocks forward, and (cp-1) K/V blocks plus (cp-1) dK/dV
// accumulators backward.
//
// Ulysses (DeepSpeed-Ulysses, Jacobs et al. 2023): all-to-all from
// sequence-sharded to head-sharded (each rank gets every token of H/cp
// heads, put back in position order), ordinary causal attention, all-to-all
// back: Q, K, V and the output forward (four all-to-alls), the output's
// gradient and dQ, dK, dV backward (four). Needs H % cp == 0.
//
// Both run on a device (kernels/common/device_ops.h): the packing is strided
// row copies, the attention (blocks, merges, row sums) the device's, and the
// messages are posted in groups whose order matches on both sides of every
// pair, so a backend that matches by order (nccl) pairs them as tags would.
#pragma once
#include <cstdint>
#include <vector>

#include "harness/comm/comm.h"
#include "harness/memory.h"
#include "harness/tensor.h"
#include "impl/context_parallel/options.h"
#include "kernels/common/device_ops.h"

namespace pb::cp {

// What a rank's attention did (accumulated over calls).
struct AttentionStats {
  int64_t flops = 0;       // 4 * hs per visible (query, key) pair, forward only
  double compute_s = 0;    // time in block compute (ring)
  double wait_s = 0;       // time blocked on K/V transfers (ring: the exposed part)
};

template <class T>
class RingAttention {
 public:
  using A = acc_t<T>;
  // cp: the context-parallel group (size o.cp). Bm sequences of Tn tokens
  // (Tl = Tn / cp here), H local heads of hs. `overlap` false: each transfer
  // is waited for before the next compute (the benchmark's baseline).
  // ops: the device (the CPU by default).
  // KV: grouped-query attention's kv heads (0: H, multi-head); H % KV == 0,
  // query head h attends with kv head h / (H / KV); qkv is then
  // (N, Ct + 2 KV hs), [q | k | v], and the K/V blocks that travel the ring
  // (and their dK/dV accumulators) are KV heads wide.
  RingAttention(const CpOptions& o, Communicator* cp, MemoryTracker* mt, int Bm, int Tn, int H, int hs,
                bool overlap = true, const kernels::DeviceOps<T>& ops = kernels::cpu_ops<T>(), int KV = 0);
  // out (N, Ct); lse (Bm, H, Tl).
  void forward(T* out, A* lse, const T* qkv);
  // dqkv (N, Ct + 2 KV hs) += the gradient, from dout (N, Ct) and the forward's out, lse.
  void backward(T* dqkv, const T* dout, const T* qkv, const T* out, const A* lse);
  const AttentionStats& stats() const { return stats_; }
  static int64_t workspace_bytes(int Bm, int Tn, int cp, int H, int hs, int KV = 0);

 private:
  template <class F>
  void blocks(int src, F&& f) const;  // f(b, h, query run, key run, causal, q_pos0, k_pos0)
  void pack_kv(T* kv, const T* qkv) const;
  // One hop of the K/V ring: `cur` to the next rank, the previous rank's into `nxt`.
  struct Hop {
    Request recv, send;
    void wait() { recv.wait(), send.wait(); }
  };
  Hop post_kv(const T* cur, T* nxt) const;
  Hop post_hop(const T* cur, T* nxt) const;  // post_kv as a group of its own

  CpOptions o_;
  Communicator* comm_;
  const kernels::DeviceOps<T>* ops_;
  bool overlap_;
  int Bm_, Tn_, Tl_, H_, hs_, Ct_, N_;
  int KV_, KVc_, g_;  // kv heads, their width KV hs, query heads per kv head
  std::vector<Placement> place_;  // every rank's
  Buffer<T> kv_a_, kv_b_;
  Buffer<A> o_acc_, m_, l_, o2_, m2_, l2_, D_, dq_, dkv_own_, part_a_, part_b_, trav_;
  AttentionStats stats_;
};

template <class T>
class UlyssesAttention {
 public:
  using A = acc_t<T>;
  // KV: grouped-query attention's kv heads (0: H), split over cp like the
  // query heads (KV % cp == 0; the caller replicates kv heads to reach it,
  // tensor_parallel/runner.cc): qkv is (N, Ct + 2 KV hs) and rank d gets
  // query heads [d H/cp, (d+1) H/cp) with the kv heads [d KV/cp, (d+1) KV/cp)
  // they attend with.
  UlyssesAttention(const CpOptions& o, Communicator* cp, MemoryTracker* mt, int Bm, int Tn, int H, int hs,
                   const kernels::DeviceOps<T>& ops = kernels::cpu_ops<T>(), int KV = 0);
  // out (N, Ct); keeps qkvh (Bm, Tn, (Ct + 2 KV hs)/cp) (this rank's heads,
  // every token in position order) and the probabilities att (Bm, H/cp, Tn, Tn) for backward.
  void forward(T* out, T* qkvh, T* att, const T* qkv);
  // The probabilities again from the kept qkvh (selective recomputation).
  void probabilities(T* att, const T* qkvh);
  void backward(T* dqkv, const T* dout, const T* qkvh, const T* att);
  const AttentionStats& stats() const { return stats_; }
  // kernel_ws: the CPU attention kernel's workspace too (device_ops.h).
  static int64_t workspace_bytes(int Bm, int Tn, int cp, int H, int hs, bool kernel_ws = true, int KV = 0);

 private:
  // cc: the columns each peer gets (a head group's, Cc_ or KVcc_).
  void to_heads(T* dst, int dst_cols, int dst_off, const T* src, int src_cols, int src_off, int cc);
  void to_sequence(T* dst, int dst_cols, int dst_off, const T* src, int src_cols, int src_off, int cc, bool add);
  void attention(T* out, T* att, const T* qkvh);

  CpOptions o_;
  Communicator* comm_;
  const kernels::DeviceOps<T>* ops_;
  int Bm_, Tn_, Tl_, H_, hs_, Ct_, N_, Hc_, Cc_;
  int KV_, KVc_, KVcc_;  // kv heads, their width, this rank's kv heads' width (KVc / cp)
  std::vector<Placement> place_;
  Buffer<T> send_, recv_, outh_, douth_, dqkvh_, datt_;
  Buffer<A> ws_;
  AttentionStats stats_;
};

}  // namespace pb::cp
