// One tensor-parallel rank's forward and backward of a microbatch (Megatron-LM,
// Shoeybi et al. 2019; sequence parallel and selective recomputation,
// Korthikanti et al. 2022), on its shard of the canonical model
// (reference/layout.h ParamLayout(m, tp, rank)).
//  - Column-parallel QKV and MLP-up (this rank's heads / 4C/tp columns),
//    row-parallel attention-out and MLP-down: Megatron's conjugate regions
//    f (identity forward, all-reduce of the input gradient backward) and
//    g (all-reduce of the partial output forward, identity backward). The
//    row-parallel biases are added once, after the reduction.
//  - Vocabulary-parallel embedding (each rank looks up its rows, the partial
//    embeddings are summed over tp) and cross-entropy (max, sum of exponentials
//    and target logit reduced over tp); the LM head is this rank's embedding
//    shard. Padded vocabulary rows (past V) are outside every softmax, so
//    their logits, probabilities and gradients are never formed.
//  - Sequence parallel: the LayerNorm/residual regions hold N/tp tokens (a
//    contiguous chunk of the microbatch's B*T tokens in (b, t) order, which is
//    the sequence split when B = 1); all-gather before each column-parallel
//    GEMM, reduce-scatter after each row-parallel one; the backward
//    re-gathers the stored LayerNorm outputs (they are kept sharded, as
//    Megatron-LM does) and all-gathers the output gradient before each
//    row-parallel GEMM. Gradients of tp-replicated parameters are partial
//    (each rank saw its tokens) and are summed over tp by the caller.
//  - Recompute: none; selective keeps everything but the attention
//    probabilities, recomputed from the stored QKV in backward; full keeps only
//    each block's output (the next block's input) and reruns the block's
//    forward, communication included, before its backward. Both are the same
//    arithmetic as none, so the results are bit-identical.
//  - Context parallel (o.context.cp > 1): the rank holds Tn/cp tokens of each
//    sequence (impl/context_parallel/options.h placement), each at its true
//    position; attention is ring or Ulysses over the cp group
//    (impl/context_parallel/attention.h), everything else is per token. The
//    loss the head returns is the sum over this rank's tokens (the caller
//    reduces it over cp).
// The llama family (docs/models.md; reference/llama_block.cc's arithmetic on
// the shard): RMSNorm for the LayerNorms (weights replicated), q column-
// parallel by heads, k and v by kv heads when tp divides them, or computed
// for every kv head from their whole (replicated) weights when kv_heads < tp
// and this rank's one kv head taken (the other heads' gradients are zero
// here; the caller sums the replicated k/v gradients over tp), RoPE by each
// token's true position, grouped-query attention on this rank's heads, gate
// and up column-parallel by the same rows, o_proj and down_proj row-parallel,
// no biases; the untied lm_head vocabulary-parallel like the tied one; an
// MoE block (tiny-mixtral) the llama attention and the MoE MLP as GPT-2's.
// Calls UnitHooks in MicrobatchRunner's order (reference/runner.h), so every
// data-parallel family composes with it unchanged.
// On a device (kernels/common/device_ops.h): every op goes through the seam
// (the vocabulary shard's lookup and cross-entropy, rows and biases added and
// their gradients included), the collectives take the device's buffers, and
// the tokens are drawn on the host and moved once per microbatch; context
// parallel's attention pieces and the MoE MLP's rows and experts run on the
// device too (the MoE routing on the host between them, reference/moe.h).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "harness/comm/comm.h"
#include "harness/memory.h"
#include "impl/context_parallel/attention.h"
#include "impl/tensor_parallel/options.h"
#include "kernels/common/device_ops.h"
#include "reference/data.h"
#include "reference/moe.h"
#include "reference/runner.h"

namespace pb::tp {

// The pieces of one tensor-parallel rank's model (embedding, one block, the
// head), on caller-held activations, with the workspace they share: what the
// microbatch runner below and every pipeline stage (impl/pipeline) call.
template <class T>
class TpModel {
 public:
  using A = acc_t<T>;
  struct Block {  // one block's saved activations (local shapes)
    Buffer<T> ln1, qkv, att, atty, xmid, ln2, fch, fchg, xout;
    Buffer<A> ln1_mean, ln1_rstd, ln2_mean, ln2_rstd;
    Buffer<A> lse;   // ring attention: log-sum-exp per (sequence, head, token)
    Buffer<T> qkvh;  // Ulysses: this rank's heads of every token
  };
  // zb-h1's B -> W gradient stash of one block (local shapes): what W's
  // weight GEMMs and norm weights read, kept by B (the output gradients of
  // the row-parallel GEMMs and of the column-parallel ones, the norms' input
  // gradients, and with SP the gathered norm outputs, so W communicates
  // nothing).
  struct Stash {
    Buffer<T> dof, dfch, dln2, dres, dqkv, dln1, in2, in1;
  };
  struct Head {  // the final LayerNorm, the probabilities over this rank's vocabulary rows
    Buffer<T> lnf, probs;
    Buffer<A> lnf_mean, lnf_rstd, losses;
  };
  // `tp` is the tensor-parallel group (size o.tp; may be null when o.tp == 1),
  // `cp` the context-parallel one (size o.context.cp; null when 1). Tn: the
  // whole sequence's tokens.
  // moe: a mixture-of-experts model's scope (reference/moe.h; its tp is
  // `tp`, data_parallel/model_states.h make_moe_scope): its MoE blocks run the MoE MLP with tensor-parallel
  // experts on every token of the microbatch (under sequence parallel ln2's
  // output gathered over tp, as the dense MLP's input; under context parallel
  // its cp rank's tokens, the scope's order theirs).
  // ops: the device (the CPU by default; InputError for cp > 1 or MoE off the host).
  TpModel(const ParamLayout& local, const TpOptions& o, Communicator* tp, Communicator* cp, MemoryTracker* mt, int Bm,
          int Tn, MoeScope moe = {}, const kernels::DeviceOps<T>& ops = kernels::cpu_ops<T>());
  ~TpModel();
  int tokens_held() const { return Nl_; }  // tokens of the LayerNorm regions (N/tp with SP)
  int tokens() const { return N_; }        // the microbatch's tokens on this rank (Bm * Tn / cp)
  // The true position in its sequence of local token n (of N).
  int position(int n) const;
  int cp_rank() const { return place_ ? place_->rank() : 0; }
  // This rank's tokens and targets (N) of the microbatch's whole sequences
  // (Bm, Tn): each token at its true position (and the zigzag_targets fault).
  // Either output may be null.
  void select_tokens(const int32_t* all_tokens, const int32_t* all_targets, int32_t* tokens, int32_t* targets) const;
  const kernels::DeviceOps<T>& ops() const { return *ops_; }
  // A block's saved activations: everything, or (full recompute) the output
  // alone; the probabilities only when recompute is none.
  // dense_mlp false: an MoE block's (no fch, fchg: its MLP keeps MoeActs).
  void alloc_block(Block& b, MemoryTracker* mt, bool xout_only, bool dense_mlp = true) const;
  void alloc_head(Head& h, MemoryTracker* mt) const;

  // x0 (Nl,C); tokens (N) of the microbatch.
  void embed_forward(T* x0, const int32_t* tokens, const T* wte, const T* wpe);
  void embed_backward(T* dwte, T* dwpe, const T* dx0, const int32_t* tokens);
  void block_forward(Block& a, const T* x_in, const T* u, T* xout);
  void block_backward(T* dx_in, T* du, const T* dout, const T* x_in, const Block& a, const T* u);
  // The split backward (zb-h1; reference/gpt.h block_backward_input and
  // block_backward_weight): B runs block_backward's input-gradient path,
  // collectives included, and fills the stash; W adds the weight gradients
  // (sums over tp of SP's replicated ones stay the caller's, per step).
  // wrong_rows: the zb_w_wrong_rows fault (SP: the bias rows of tp rank 0's
  // tokens on every rank).
  void alloc_stash(Stash& s, MemoryTracker* mt) const;
  void block_backward_input(T* dx_in, Stash& g, const T* dout, const T* x_in, const Block& a, const T* u);
  void block_backward_weight(T* du, const Stash& g, const T* x_in, const Block& a, bool wrong_rows = false);
  // A mixture-of-experts block: the tensor-parallel attention half, then the
  // MoE MLP on ln2's output (reference/moe.h MoeMlp with MoeScope::tp);
  // experts / dexperts as in reference/gpt.h moe_block_forward.
  void moe_block_forward(Block& a, MoeActs<T>& m, const T* x_in, const T* u, T* xout, const T* experts = nullptr);
  void moe_block_backward(T* dx_in, T* du, const T* dout, const T* x_in, const Block& a, const MoeActs<T>& m,
                          const T* u, double aux_weight, const T* experts = nullptr, T* dexperts = nullptr);
  const MoeScope& moe_scope() const { return moe_scope_; }
  // Returns the sum of the microbatch's token losses (the same on every tp rank).
  double head_forward(Head& h, const T* x, const int32_t* targets, const T* lnf, const T* wte);
  void head_backward(T* dx, T* dlnf, T* dwte, const T* x, const int32_t* targets, const Head& h, const T* lnf,
                     const T* wte, double dloss);
  // Full recompute: the block the backward reruns (workspace).
  Block& work() { return work_; }
  // Workspace bytes the constructor allocates, without allocating.
  // (an MoE model: its MoeScratch too, for the scope's tokens and ep size;
  // kernel_ws: the CPU kernels' GEMM and attention workspaces too, held on
  // the host only: device_ops.h)
  static int64_t workspace_bytes(const ModelConfig& m, const TpOptions& o, int Bm, int Tn, int64_t moe_scope_tokens = 0,
                                 int ep = 1, bool kernel_ws = true);

 private:
  template <class F>
  static void walk_workspace(TpModel* self, const ModelConfig& m, const TpOptions& o, int Bm, int Tn, bool kernel_ws,
                             F&& f);
  template <class X>
  void zero(const Buffer<X>& b) const {
    ops_->zero(b.data(), b.size() * sizeof(X));
  }
  void all_reduce(T* buf, size_t n);
  void gather(const T* shard, T* full);   // (Nl,C) -> (N,C) under SP
  void scatter(const T* full, T* shard);  // (N,C) partials -> (Nl,C) sums under SP
  void add_bias(T* y, const T* b, int rows);
  void row_parallel(T* y_out, const T* in, const T* w, const T* b, int in_cols);
  void round_to_bf16(T* x, size_t n);  // Fault::row_reduce_bf16

  int embed_position(int n) const;  // position(n), or the fault's
  void attend(Block& a, T* att);
  // Up to ln2's output; and from d xmid (in dres_) down to dx_in.
  void attention_forward(Block& a, const T* x_in, const T* u);
  void attention_backward(T* dx_in, T* du, const T* x_in, const Block& a, const T* u);
  void attend_backward(const Block& a);

  const ParamLayout* layout_;
  const kernels::DeviceOps<T>* ops_;
  TpOptions o_;
  Communicator* tp_;
  Communicator* cp_;
  int Bm_, Tn_, Tl_, N_, Nl_, C_, Ct_, H_, Vr_, valid_ = 0;
  // The llama family: this rank's kv heads, the width of its q|k|v rows
  // (Wl, attention's) and of its projection's (Wf: every kv head when
  // replicated), the kv head it attends with when replicated, the MLP's ffn / tp.
  // Under Ulysses, KVu_ kv heads go over cp (lcm(KVl, cp): each kv head
  // replicated KVu/KVl times when the KVl do not split over cp).
  bool llama_ = false, kv_rep_ = false;
  int KVl_ = 0, Wl_ = 0, Wf_ = 0, kv0_ = 0, Ft_ = 0, KVu_ = 0;
  void expand_kv(T* qkve, const T* qkv) const;  // KVl_ -> KVu_ kv heads (Ulysses)
  void sum_kv(T* dqkv, const T* dqkve) const;   // its backward: dK/dV summed over the copies
  // Both walk the same pieces: piece(expanded column, local column, width).
  template <class F>
  void kv_copies(F&& piece) const;
  void llama_attention_forward(Block& a, const T* x_in, const T* u);
  void llama_attention_backward(T* dx_in, T* du, const T* x_in, const Block& a, const T* u);
  void reverse_up(T* gu);
  std::optional<cp::Placement> place_;
  std::unique_ptr<cp::RingAttention<T>> ring_;
  std::unique_ptr<cp::UlyssesAttention<T>> ulysses_;
  int64_t vb_ = 0;
  Stash* stash_ = nullptr;          // B of a split backward: weight gradients skipped, kept here
  Block work_;                      // full recompute: the block being rerun
  Buffer<T> att_work_, atty_work_;  // selective recompute
  Buffer<T> gat_, part_, tmp_, dres_, dln_, datty_, dqkv_, datt_, dfch_, dfchg_, dlogits_;
  Buffer<T> moe_x_;  // MoE under SP: ln2's output gathered over tp (N, C), the MoE MLP's input
  Buffer<A> cmax_, csum_, att_ws_;
  Buffer<float> mm_ws_;
  Buffer<T> drot_, qkvf_;  // llama: d (q|k|v) before RoPE; the whole-kv projection's rows (replicated kv)
  Buffer<T> qkve_, dqkve_;  // llama under Ulysses with replicated kv heads: q|k|v of KVu_ kv heads, its gradient
  Buffer<int32_t> rpos_;   // llama: RoPE's positions of the Tl tokens a rank holds of a sequence (true ones)
  Buffer<int32_t> pos_;  // the position of each token this rank's LayerNorm regions hold (Nl)
  MoeScope moe_scope_;
  std::optional<MoeMlp<T>> moe_;
  MoeScratch<T> moe_scratch_;
};

// Writes a tp rank's values (flat in its shard's layout `local`, zeros where
// another rank of its data-parallel group owns them) into `full` (the whole
// model's flat layout): split tensors at their full-tensor indices, padding
// dropped, replicated tensors from tp rank 0 only. Summing every rank's
// `full` gives the whole vector, each element once.
void add_to_full(const ParamLayout& local, const ParamLayout& full_layout, int tp_rank,
                 const std::vector<double>& values, std::vector<double>& full);

// Workspace bytes a TpRunner allocates (its model's and the two gradient
// ping-pong buffers) at precision p: the planner's declared workspace.
// kernel_ws: as TpModel::workspace_bytes's.
int64_t runner_workspace_bytes(const ModelConfig& m, const TpOptions& o, int Bm, int Tn, Precision p,
                               int64_t moe_scope_tokens = 0, int ep = 1, bool kernel_ws = true);

// One tensor-parallel rank's microbatch through the whole model.
template <class T>
class TpRunner {
 public:
  // moe, ops: as TpModel's.
  TpRunner(const ParamLayout& local, const TpOptions& o, Communicator* tp, Communicator* cp, const MarkovSource& data,
           MemoryTracker* mt, int Bm, int Tn, MoeScope moe = {},
           const kernels::DeviceOps<T>& ops = kernels::cpu_ops<T>());
  // Samples [first, first + Bm) of step `step` (this rank's tokens of them);
  // dloss = 1 / (tokens of the global batch). Returns the sum of this
  // microbatch's token losses on this rank's tokens (the same on every tp rank),
  // plus, for a mixture-of-experts model, its load-balancing terms times its
  // tokens (reference/runner.h MicrobatchRunner::run).
  double run(int64_t step, int64_t first, double dloss, UnitHooks<T>& hooks);
  const MoeLoad& moe_load() const { return load_; }
  void reset_moe_load() { load_ = {}; }
  const MoeScope& moe_scope() const { return model_.moe_scope(); }

 private:
  using Block = typename TpModel<T>::Block;
  const ParamLayout* layout_;
  TpOptions o_;
  const MarkovSource* data_;
  int Bm_, Tn_;
  TpModel<T> model_;
  Buffer<int32_t> tokens_, targets_, all_tokens_, all_targets_;  // all_: the whole sequences (cp > 1)
  std::vector<int32_t> host_tokens_, host_targets_;              // staging when tokens_ is not host memory
  Buffer<T> x0_, dx_a_, dx_b_;
  std::vector<Block> blocks_;
  std::vector<MoeActs<T>> moe_;  // per layer; empty for dense blocks (and every one under full recompute)
  MoeActs<T> moe_work_;          // full recompute: the one MoE MLP's the backward reruns (routing included)
  MoeLoad load_;
  typename TpModel<T>::Head head_;
};

}  // namespace pb::tp
