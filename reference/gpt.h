// The canonical GPT's forward and backward, as pieces a strategy can run
// separately: embedding, one block, head (final LN + tied LM head + loss).
// Parameters and gradients are reached through plain unit base pointers (see
// layout.h), so the same code serves the single-device reference, ZeRO-3
// (gathered units), and pipeline stages (a subset of units).
// Invariant: every piece does the same arithmetic in the same order whoever
// calls it — the ground on which strategies declare bitwise equality.
#pragma once
#include <cstdint>
#include <vector>

#include "harness/dtype.h"
#include "harness/memory.h"
#include "kernels/common/device_ops.h"
#include "reference/layout.h"
#include "reference/moe.h"

namespace pb {

// Saved activations of one block for one microbatch of B x T tokens. The
// llama family (docs/models.md): ln1, ln2 are the RMSNorms' outputs (no
// mean), qkv (B,T,C + 2*KVH*hs) holds q and k after the rotary embedding,
// fch the fused gate|up output (B,T,2F), fchg SwiGLU's (B,T,F).
template <class T>
struct BlockActs {
  using A = acc_t<T>;
  Buffer<T> ln1;              // (B,T,C)
  Buffer<A> ln1_mean, ln1_rstd;  // (B*T)
  Buffer<T> qkv;              // (B,T,3C)
  Buffer<T> att;              // (B,NH,T,T)
  Buffer<T> atty;             // (B,T,C)
  Buffer<T> xmid;             // (B,T,C) residual after attention
  Buffer<T> ln2;              // (B,T,C)
  Buffer<A> ln2_mean, ln2_rstd;  // (B*T)
  Buffer<T> fch;              // (B,T,4C)
  Buffer<T> fchg;             // (B,T,4C) after GELU
  Buffer<T> xout;             // (B,T,C) block output
  BlockActs() = default;
  // dense_mlp false: an MoE block's (no fch, fchg; its MLP keeps MoeActs).
  BlockActs(MemoryTracker* mt, const ModelConfig& m, int B, int Tn, bool dense_mlp = true);
};

// Saved activations of the head for one microbatch.
template <class T>
struct HeadActs {
  using A = acc_t<T>;
  Buffer<T> lnf;                 // (B,T,C)
  Buffer<A> lnf_mean, lnf_rstd;  // (B*T)
  Buffer<T> probs;               // (B,T,V)
  Buffer<A> losses;              // (B*T)
  HeadActs() = default;
  HeadActs(MemoryTracker* mt, const ModelConfig& m, int B, int Tn);
};

// Backward scratch shared by all pieces (workspace): sized for one microbatch.
template <class T>
struct Scratch {
  Buffer<T> tmp, dres, dln, datty;  // (B,T,C)
  Buffer<T> dqkv;                   // (B,T,3C) (llama: (B,T,C + 2*KVH*hs))
  Buffer<T> drot;                   // llama: dqkv before the rotary embedding; gpt2: none
  Buffer<T> datt;                   // (B,NH,T,T)
  Buffer<T> dfch, dfchg;            // (B,T,4C) (llama: (B,T,2F), (B,T,F))
  Buffer<T> dlogits;                // (B,T,V)
  Buffer<float> mm_ws;              // bf16 GEMM staging
  Buffer<acc_t<T>> att_ws;          // attention scores and products per (batch, head)
  Scratch() = default;
  // kernel_ws: whether to hold the CPU kernels' workspaces (mm_ws, att_ws):
  // ops.is_host(); a device's kernels keep their own (device_ops.h).
  Scratch(MemoryTracker* mt, const ModelConfig& m, int B, int Tn, bool kernel_ws = true);
  // Bytes the constructor allocates, without allocating (the planner's
  // declared workspace).
  static int64_t bytes(const ModelConfig& m, int B, int Tn, bool kernel_ws = true);
};

// Gradients at the outputs of one block's matmuls and layernorms for one
// microbatch: what the weight gradients need besides the saved activations.
// Filled by block_backward_input (B), consumed by block_backward_weight (W),
// so the zero-bubble split (Qi et al., ICLR'24, Sec. 2) can run W later.
template <class T>
struct BlockGradStash {
  Buffer<T> dout;  // (B,T,C) at the block output = fcproj's output
  Buffer<T> dfch;  // (B,T,4C) at fc's output (llama: (B,T,2F) at gate|up's)
  Buffer<T> dln2;  // (B,T,C) at ln2's output
  Buffer<T> dres;  // (B,T,C) at attproj's output (d xmid, both paths)
  Buffer<T> dqkv;  // (B,T,3C) at qkv's output (llama: (B,T,C + 2*KVH*hs), before the rotary embedding)
  Buffer<T> dln1;  // (B,T,C) at ln1's output
  BlockGradStash() = default;
  BlockGradStash(MemoryTracker* mt, const ModelConfig& m, int B, int Tn);
};

template <class T>
class Gpt {
 public:
  using A = acc_t<T>;
  // ops: the device the buffers live on and the kernels run on (the CPU by
  // default; kernels/common/device_ops.h), the MoE MLP's too (moe.h).
  Gpt(const ParamLayout& layout, int B, int Tn, const kernels::DeviceOps<T>& ops = kernels::cpu_ops<T>());
  const kernels::DeviceOps<T>& ops() const { return *ops_; }

  const ParamLayout& layout() const { return *layout_; }
  int B() const { return B_; }
  int Tn() const { return Tn_; }
  // The llama family: each of the Tn tokens' true position in its sequence,
  // which the rotary embedding turns q and k by (default 0..Tn-1; a rank
  // holding a slice of the sequence sets its tokens' global positions).
  const std::vector<int32_t>& positions() const { return positions_; }
  void set_positions(std::vector<int32_t> pos);

  // x0 (B,T,C) = wte[tokens] + wpe; emb = unit 0's params.
  void embed_forward(T* x0, const int32_t* tokens, const T* emb) const;
  void embed_backward(T* demb, const T* dx0, const int32_t* tokens) const;
  // The same with wte and wpe apart (a sharded stage holds them as two units).
  void embed_forward(T* x0, const int32_t* tokens, const T* wte, const T* wpe) const;
  void embed_backward(T* dwte, T* dwpe, const T* dx0, const int32_t* tokens) const;

  // One block: x_in (B,T,C) -> a.xout.
  void block_forward(BlockActs<T>& a, const T* x_in, const T* unit, Scratch<T>& s) const;
  // dx_in (B,T,C) is overwritten; dunit accumulates. dout may alias nothing in a.
  void block_backward(T* dx_in, T* dunit, const T* dout, const T* x_in, const BlockActs<T>& a,
                      const T* unit, Scratch<T>& s) const;
  // The same backward split in two (B then W); together bit-identical to
  // block_backward, because every kernel call is the fused one's with its
  // other outputs null. B: dx_in overwritten, g filled, no weight gradient.
  void block_backward_input(T* dx_in, BlockGradStash<T>& g, const T* dout, const T* x_in,
                            const BlockActs<T>& a, const T* unit, Scratch<T>& s) const;
  // W: dunit accumulates the weight and bias gradients from g and a.
  void block_backward_weight(T* dunit, const BlockGradStash<T>& g, const T* x_in,
                             const BlockActs<T>& a, Scratch<T>& s) const;

  // A mixture-of-experts block (model().is_moe(layer)): the same attention
  // half, the MoE MLP (moe.h) instead of the dense one. aux_weight: the
  // weight of this microbatch's load-balancing loss in the objective.
  // experts / dexperts: this rank's experts held apart from the unit
  // (expert parallel; null: the unit's own).
  void moe_block_forward(BlockActs<T>& a, MoeActs<T>& m, const T* x_in, const T* unit, Scratch<T>& s,
                         MoeScratch<T>& ms, MoeScope scope = {}, const T* experts = nullptr) const;
  void moe_block_backward(T* dx_in, T* dunit, const T* dout, const T* x_in, const BlockActs<T>& a,
                          const MoeActs<T>& m, const T* unit, double aux_weight, Scratch<T>& s,
                          MoeScratch<T>& ms, MoeScope scope = {}, const T* experts = nullptr,
                          T* dexperts = nullptr) const;

  // Final LN + logits against wte + loss. Returns the sum of token losses
  // (double, summed in token order). lnf = the final unit's params.
  double head_forward(HeadActs<T>& h, const T* x_last, const int32_t* targets, const T* lnf,
                      const T* wte, Scratch<T>& s) const;
  // dloss = d(mean loss)/d(token loss), e.g. 1 / tokens of the global batch.
  // dx_last overwritten; dlnf and dwte accumulate.
  void head_backward(T* dx_last, T* dlnf, T* dwte, const T* x_last, const int32_t* targets,
                     const HeadActs<T>& h, const T* lnf, const T* wte, double dloss,
                     Scratch<T>& s) const;

 private:
  // Up to ln2's output (forward); from d ln2 (s.dln) and d xmid's residual
  // part (s.dres) down to dx_in (backward): what dense and MoE blocks share.
  void attention_half_forward(BlockActs<T>& a, const T* x_in, const T* u, Scratch<T>& s) const;
  void attention_half_backward(T* dx_in, T* du, const T* x_in, const BlockActs<T>& a, const T* u,
                               Scratch<T>& s) const;
  // The llama family's block (reference/llama_block.cc): RMSNorm, q|k|v with
  // RoPE, grouped-query attention, o, RMSNorm, gate|up, SwiGLU, down.
  void llama_attention_half_forward(BlockActs<T>& a, const T* x_in, const T* u, Scratch<T>& s) const;
  void llama_attention_half_backward(T* dx_in, T* du, const T* x_in, const BlockActs<T>& a, const T* u,
                                     Scratch<T>& s) const;
  void llama_block_forward(BlockActs<T>& a, const T* x_in, const T* u, Scratch<T>& s) const;
  void llama_block_backward(T* dx_in, T* du, const T* dout, const T* x_in, const BlockActs<T>& a, const T* u,
                            Scratch<T>& s) const;
  // The zero-bubble split of llama_block_backward (block_backward_input / _weight).
  void llama_block_backward_input(T* dx_in, BlockGradStash<T>& g, const T* dout, const T* x_in, const BlockActs<T>& a,
                                  const T* u, Scratch<T>& s) const;
  void llama_block_backward_weight(T* du, const BlockGradStash<T>& g, const T* x_in, const BlockActs<T>& a,
                                   Scratch<T>& s) const;
  double llama_head_forward(HeadActs<T>& h, const T* x_last, const int32_t* targets, const T* norm,
                            const T* lm_head, Scratch<T>& s) const;
  void llama_head_backward(T* dx_last, T* dnorm, T* dlm_head, const T* x_last, const int32_t* targets,
                           const HeadActs<T>& h, const T* norm, const T* lm_head, double dloss, Scratch<T>& s) const;

  const ParamLayout* layout_;
  int B_, Tn_;
  std::vector<int32_t> positions_;
  const kernels::DeviceOps<T>* ops_;
};

}  // namespace pb
