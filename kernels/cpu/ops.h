// The math of one op: forward + backward on raw buffers (llm.c style).
// Conventions for every op, on storage type T in {double, float, bf16}, with
// compute/accumulation type A = acc_t<T> (double for double, float otherwise):
//  - outputs first, then inputs; gradient buffers are prefixed d;
//  - dimension letters are fixed: B batch, T sequence, C channels, V vocab,
//    NH heads, hs head size (C / NH), N rows (B*T), OC output channels;
//  - forward outputs are overwritten; backward outputs ACCUMULATE
//    (d += contribution). For bf16 the contribution is computed fully in fp32
//    and the destination rounded once: d = bf16(float(d) + contribution);
//  - a null backward output pointer means "do not compute it" (zero-bubble's
//    B/W split computes input and weight gradients separately);
//  - kernels are single-threaded except GEMM, whose thread count the caller sets
//    once per rank with set_blas_threads(); results are deterministic for a
//    fixed thread count.
#pragma once
#include <cstddef>
#include <cstdint>

#include "harness/dtype.h"
#include "kernels/common/adamw_hyper.h"

namespace pb::kernels {

void set_blas_threads(int n);

// ---- token + position embedding -------------------------------------------
// out (B,T,C) = wte[inp[b,t], :] + wpe[t, :];  wte (V,C), wpe (maxT,C).
template <class T>
void encoder_forward(T* out, const int32_t* inp, const T* wte, const T* wpe, int B, int Tn, int C);
// dwte (V,C) += scatter of dout by token; dwpe (maxT,C) += sum over b.
template <class T>
void encoder_backward(T* dwte, T* dwpe, const T* dout, const int32_t* inp, int B, int Tn, int C);

// ---- LayerNorm over the last dim C of N rows -------------------------------
// mean, rstd (N) are saved in A for the backward; either may be null.
template <class T>
void layernorm_forward(T* out, acc_t<T>* mean, acc_t<T>* rstd, const T* inp, const T* weight,
                       const T* bias, int N, int C, double eps = 1e-5);
template <class T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                        const acc_t<T>* mean, const acc_t<T>* rstd, int N, int C);

// ---- matmul: out (N,OC) = inp (N,C) @ weight (OC,C)^T + bias (OC) -----------
// ws: fp32 staging for bf16 (matmul_workspace_floats elements); unused otherwise.
// bias may be null (no bias; e.g. the tied LM head).
template <class T>
size_t matmul_workspace_floats(int N, int C, int OC);
template <class T>
void matmul_forward(T* out, const T* inp, const T* weight, const T* bias, int N, int C, int OC,
                    float* ws);
// dinp (N,C) += dout @ weight; dweight (OC,C) += dout^T @ inp; dbias (OC) += colsum(dout).
template <class T>
void matmul_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                     int N, int C, int OC, float* ws);

// The same two with every inner sum (C forward; OC for dinp, N for dweight)
// taken in `parts` consecutive slices, each slice's product accumulated into
// the result in slice order: the products in another correct order of
// summation, as a strategy that splits an inner dimension over ranks sums
// them (fp32 and fp64; kernels/common/device_ops.h cpu_ops_sliced).
template <class T>
void matmul_forward_sliced(T* out, const T* inp, const T* weight, const T* bias, int N, int C, int OC, int parts);
template <class T>
void matmul_backward_sliced(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, int N, int C,
                            int OC, int parts);

// ---- causal multi-head attention -------------------------------------------
// qkv (B,T,3C) as [q | k | v], heads interleaved in C; out (B,T,C);
// att (B,NH,T,T) keeps the softmax probabilities (upper triangle zero);
// scale 1/sqrt(hs). ws: the caller's workspace of
// attention_workspace_elems<T>(Tn, C, NH) elements (per (batch, head) score
// and product buffers; the caller tracks it), shared by forward and backward.
template <class T>
size_t attention_workspace_elems(int Tn, int C, int NH);
template <class T>
void attention_forward(T* out, T* att, const T* qkv, int B, int Tn, int C, int NH, acc_t<T>* ws);
// datt: scratch of the size of att (overwritten with dL/datt; may be null).
template <class T>
void attention_backward(T* dqkv, T* datt, const T* dout, const T* qkv, const T* att, int B, int Tn,
                        int C, int NH, acc_t<T>* ws);

// ---- grouped-query attention (Ainslie et al. 2023) ---------------------------
// The same with KVH key/value heads (KVH divides NH; 1: multi-query): qkv
// (B,T,C + 2*KVH*hs) as [q (NH heads) | k (KVH heads) | v (KVH heads)], query
// head h attending with key/value head h / (NH/KVH). KVH = NH is
// attention_forward/backward exactly (they call these). dqkv's k and v parts
// sum their group's query heads in head order.
template <class T>
size_t attention_workspace_elems_gqa(int Tn, int C, int NH, int KVH);
template <class T>
void attention_forward_gqa(T* out, T* att, const T* qkv, int B, int Tn, int C, int NH, int KVH, acc_t<T>* ws);
template <class T>
void attention_backward_gqa(T* dqkv, T* datt, const T* dout, const T* qkv, const T* att, int B, int Tn, int C,
                            int NH, int KVH, acc_t<T>* ws);

// ---- rotary position embedding (Su et al. 2021), Hugging Face's rotate-half --
// Rows (b, t) of `heads` heads of hs (even) elements, row r at x + r * stride:
// head element i < hs/2 pairs with i + hs/2 and both turn by the angle
// pos[t] * theta^(-2i/hs), cos and sin evaluated in fp64 (pos: each token's
// true position, Tn entries shared by the B sequences):
//   out[i] = x[i] cos - x[i + hs/2] sin;  out[i + hs/2] = x[i + hs/2] cos + x[i] sin.
// Forward: out may alias inp (in place). Backward: the transposed rotation,
// dinp += R^T dout (dinp must not alias dout).
template <class T>
void rope_forward(T* out, const T* inp, const int32_t* pos, int B, int Tn, int heads, int hs, int stride,
                  double theta);
template <class T>
void rope_backward(T* dinp, const T* dout, const int32_t* pos, int B, int Tn, int heads, int hs, int stride,
                   double theta);

// ---- RMSNorm (Zhang & Sennrich 2019) over the last dim C of N rows ---------
// out = x * rstd * weight, rstd = 1 / sqrt(mean(x^2) + eps); rstd (N) saved in A (may be null).
template <class T>
void rmsnorm_forward(T* out, acc_t<T>* rstd, const T* inp, const T* weight, int N, int C, double eps);
template <class T>
void rmsnorm_backward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight, const acc_t<T>* rstd,
                      int N, int C);

// ---- SwiGLU (Shazeer 2020): out (N,H) = silu(gate) * up ----------------------
// gu (N,2H) holds each row's [gate (H) | up (H)] (the fused gate/up projection's
// output); silu(g) = g * sigmoid(g). dgu (N,2H) += [dgate | dup].
template <class T>
void swiglu_forward(T* out, const T* gu, int N, int H);
template <class T>
void swiglu_backward(T* dgu, const T* gu, const T* dout, int N, int H);

// ---- blockwise (online-softmax) attention, for one (batch, head) ------------
// Flash-attention style pieces that ring attention reuses: queries q (Tq,hs)
// with row stride q_stride at absolute positions q_pos0.., keys/values
// (Tk,hs) with row stride kv_stride at positions k_pos0... Causal masking is by
// absolute position (key pos > query pos is masked).
// Running state per query row, in A: o (Tq,hs) unnormalized output, m (Tq)
// running max (init -inf), l (Tq) running sum (init 0).
template <class T>
void attention_block_forward(acc_t<T>* o, acc_t<T>* m, acc_t<T>* l, const T* q, const T* k,
                             const T* v, int Tq, int Tk, int hs, int q_stride, int kv_stride,
                             int q_pos0, int k_pos0, bool causal);
// out (Tq,hs, row stride out_stride) = o / l; lse (Tq) = m + log l.
template <class T>
void attention_block_finalize(T* out, acc_t<T>* lse, const acc_t<T>* o, const acc_t<T>* m,
                              const acc_t<T>* l, int Tq, int hs, int out_stride);
// Merges two partial states (o2,m2,l2) into (o,m,l) (e.g. from two ring steps).
template <class T>
void attention_block_merge(acc_t<T>* o, acc_t<T>* m, acc_t<T>* l, const acc_t<T>* o2,
                           const acc_t<T>* m2, const acc_t<T>* l2, int Tq, int hs);
// Backward of one block, given lse and Drow = rowsum(dout * out) (Tq):
// dq (Tq,hs), dk, dv (Tk,hs) accumulate, in A.
template <class T>
void attention_block_backward(acc_t<T>* dq, acc_t<T>* dk, acc_t<T>* dv, const T* q, const T* k,
                              const T* v, const T* dout, const acc_t<T>* lse,
                              const acc_t<T>* Drow, int Tq, int Tk, int hs, int q_stride,
                              int kv_stride, int dout_stride, int q_pos0, int k_pos0, bool causal);
// D (rows) = the row sums of dout * out (rows, cols; row stride `stride`),
// in A in column order: the backward's Drow.
template <class T>
void attention_row_dot(acc_t<T>* D, const T* dout, const T* out, int rows, int cols, int stride);
// Whole causal attention built from the block pieces, block size bs: same
// contract as attention_forward/backward but keeps lse (B,NH,T) instead of att.
template <class T>
void attention_forward_blockwise(T* out, acc_t<T>* lse, const T* qkv, int B, int Tn, int C, int NH,
                                 int bs);
template <class T>
void attention_backward_blockwise(T* dqkv, const T* dout, const T* out, const T* qkv,
                                  const acc_t<T>* lse, int B, int Tn, int C, int NH, int bs);

// ---- tanh-GELU -------------------------------------------------------------
template <class T>
void gelu_forward(T* out, const T* inp, size_t N);
template <class T>
void gelu_backward(T* dinp, const T* inp, const T* dout, size_t N);

// ---- residual add and elementwise helpers -----------------------------------
template <class T>
void residual_forward(T* out, const T* a, const T* b, size_t N);  // out = a + b
template <class T>
void accumulate(T* dst, const T* src, size_t N);  // dst += src (the residual's backward)
template <class T>
void scale(T* x, double s, size_t N);  // x *= s

// ---- softmax cross-entropy ---------------------------------------------------
// probs (N,V) = softmax(logits) (probs may alias logits); losses (N) = -log p[target].
// A target outside [0, V) throws std::out_of_range (forward and backward).
template <class T>
void crossentropy_forward(acc_t<T>* losses, T* probs, const T* logits, const int32_t* targets,
                          int N, int V);
// dlogits (N,V) += (probs - onehot(target)) * dloss  (dloss: d mean-loss / d token-loss).
template <class T>
void crossentropy_backward(T* dlogits, const T* probs, const int32_t* targets, double dloss, int N,
                           int V);

// ---- rows of a table and a vocabulary shard's softmax cross-entropy ----------
// The pieces of a tensor-parallel rank (impl/tensor_parallel/runner.h): its
// shard's embedding lookup, position rows and biases added, their gradients
// scattered back, and the cross-entropy whose row max, sum of exponentials and
// target logit are reduced over the shards between the calls.
// out (N,C) = table row idx[n] - first when idx[n] is in [first, first + rows),
// zeros otherwise (the tokens another shard holds).
template <class T>
void embedding_lookup(T* out, const int32_t* idx, const T* table, int N, int C, int64_t first, int rows);
// x (N,C) += table row idx[n]; idx null: row 0 for every n (a bias).
template <class T>
void add_rows(T* x, const T* table, const int32_t* idx, int N, int C);
// dtable row r - first += the sum of dout's rows n with idx[n] = r, for r in
// [first, first + rows): summed in A in n order, added once (rows nobody
// holds untouched). idx null: row 0 += the sum of every row (a bias).
template <class T>
void add_rows_backward(T* dtable, const T* dout, const int32_t* idx, int N, int C, int64_t first, int rows);
// logits (N,Vr): a shard of vocabulary rows [first, first + Vr) whose first
// `valid` columns are real (the rest padding, outside every softmax).
// mx (N) = the max of the valid logits (-inf when there are none).
template <class T>
void vocab_logit_max(acc_t<T>* mx, const T* logits, int N, int Vr, int valid);
// sum (N) = the sum of exp(logit - mx) over the valid logits; target_logit
// (N) = the target's logit where this shard holds it, else 0.
template <class T>
void vocab_sum_exp(acc_t<T>* sum, acc_t<T>* target_logit, const T* logits, const acc_t<T>* mx,
                   const int32_t* targets, int64_t first, int N, int Vr, int valid);
// With mx, sum and target_logit reduced over the shards: probs (N,Vr; may
// alias logits) = the probabilities (0 in the padding), losses (N) = the loss.
template <class T>
void vocab_softmax_loss(acc_t<T>* losses, T* probs, const T* logits, const acc_t<T>* mx, const acc_t<T>* sum,
                        const acc_t<T>* target_logit, int N, int Vr, int valid);
// dlogits (N,Vr) += (probs - onehot(target - first)) * dloss over the valid columns.
template <class T>
void vocab_crossentropy_backward(T* dlogits, const T* probs, const int32_t* targets, int64_t first, double dloss,
                                 int N, int Vr, int valid);

// ---- rows of a mixture-of-experts MLP (reference/moe.h) ---------------------
// A token n's k choices (n, j): expert choice[n*K+j] and slot[n*K+j], its row
// in that expert's buffer (-1: dropped past capacity). The expert-major
// buffers hold expert e's rows at e * rows, so (n, j) admitted is row
// choice * rows + slot. The routing itself (top-k, capacity, load balance) is
// host code (moe.cc); these move the rows it decided.
// xe row of every admitted (n, j) = x row n (rows of dropped choices untouched).
template <class T>
void moe_scatter_rows(T* xe, const T* x, const int32_t* choice, const int32_t* slot, int N, int K, int C,
                      int rows);
// out row n = the sum in A over its admitted choices, best first, of
// weight[n*K+j] * y row (n, j) (weight null: the rows themselves). Stored
// (zeros when every choice was dropped), or, accumulate: added into out once,
// only when some choice was admitted.
template <class T>
void moe_combine(T* out, const T* y, const int32_t* choice, const int32_t* slot, const acc_t<T>* weight, int N,
                 int K, int C, int rows, bool accumulate);
// The forward combine's backward: dy row (n, j) = weight[n*K+j] * dout row n
// and dw[n*K+j] = dout row n . y row (n, j) in A, for each admitted choice;
// dw = 0 for a dropped one (its dy row untouched).
template <class T>
void moe_combine_backward(T* dy, acc_t<T>* dw, const T* dout, const T* y, const int32_t* choice,
                          const int32_t* slot, const acc_t<T>* weight, int N, int K, int C, int rows);

// ---- optimizer -----------------------------------------------------------------
// AdamWHyper: kernels/common/adamw_hyper.h (the CUDA side takes it too).
// PyTorch AdamW (decoupled decay): master -= lr*wd*master (if decay);
// m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; master -= lr * mhat / (sqrt(vhat) + eps).
// M is the master/state type (double for T=double, float otherwise); param_out
// receives cast<T>(master) and may alias master when T == M.
template <class T, class M>
void adamw_step(M* master, T* param_out, const T* grad, M* m, M* v, size_t n, const AdamWHyper& h,
                bool decay);

// Sum of squares of g, accumulated in double in index order (global-norm clipping).
template <class T>
double sum_squares(const T* g, size_t n);

}  // namespace pb::kernels
