// The CUDA counterparts of kernels/cpu/ops.h: every op, same names, same
// argument order and the same contract (outputs first; backward outputs
// accumulate, rounded once; a null backward output is skipped), on storage
// type T in {float, __nv_bfloat16} (pb::bf16's bit layout and rounding) with
// fp32 compute and accumulation, plus the stream to launch on and, for GEMM,
// the caller's cuBLAS handle (bound to that stream per call). The per-element
// math is kernels/common/math.h's, the CPU kernels' own.
// Invariant: every pointer is device memory; calls are asynchronous on
// `stream` except crossentropy_*, which read back one flag to report a target
// outside [0, V) as std::out_of_range (as the CPU kernels do); a failed launch
// or cuBLAS call throws std::runtime_error naming it. Results are
// deterministic: no atomics, every reduction in a fixed order.
#pragma once
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace pb::kernels::cuda {

// ---- token + position embedding ----------------------------------------------
template <class T>
void encoder_forward(T* out, const int32_t* inp, const T* wte, const T* wpe, int B, int Tn, int C,
                     cudaStream_t stream);
// dwte rows are summed over the positions holding each token in (b, t) order
// (a stable radix sort by token, as the CPU's stable_sort), then added once.
template <class T>
void encoder_backward(T* dwte, T* dwpe, const T* dout, const int32_t* inp, int B, int Tn, int C,
                      cudaStream_t stream);

// ---- LayerNorm over the last dim C of N rows (mean, rstd: fp32, may be null) --
template <class T>
void layernorm_forward(T* out, float* mean, float* rstd, const T* inp, const T* weight, const T* bias,
                       int N, int C, double eps, cudaStream_t stream);
template <class T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                        const float* mean, const float* rstd, int N, int C, cudaStream_t stream);

// ---- matmul: out (N,OC) = inp (N,C) @ weight (OC,C)^T + bias (OC) -------------
// cuBLAS GemmEx, fp32 accumulation (CUBLAS_COMPUTE_32F: plain FP32 math, no
// TF32); bf16 inputs and outputs are rounded once from fp32.
template <class T>
void matmul_forward(cublasHandle_t handle, T* out, const T* inp, const T* weight, const T* bias, int N,
                    int C, int OC, cudaStream_t stream);
// dinp (N,C) += dout @ weight; dweight (OC,C) += dout^T @ inp; dbias (OC) += colsum(dout).
template <class T>
void matmul_backward(cublasHandle_t handle, T* dinp, T* dweight, T* dbias, const T* dout, const T* inp,
                     const T* weight, int N, int C, int OC, cudaStream_t stream);

// ---- causal multi-head attention, probabilities kept (B,NH,T,T) ---------------
template <class T>
void attention_forward(T* out, T* att, const T* qkv, int B, int Tn, int C, int NH, cudaStream_t stream);
// datt: att's size, overwritten with dL/datt when not null (the device
// recomputes dL/datt from dout and v, so it needs no scratch). Head size <=
// kMaxHeadSize (one thread accumulates a row in registers).
template <class T>
void attention_backward(T* dqkv, T* datt, const T* dout, const T* qkv, const T* att, int B, int Tn, int C,
                        int NH, cudaStream_t stream);

// ---- blockwise (online-softmax) attention: the pieces ring attention reuses --
// Same layouts and contract as the CPU's (one (batch, head) slice; o, m, l,
// lse, Drow, dq, dk, dv in fp32). Keys are staged through shared memory in
// tiles of kKeyTile rows (half that above head size 128); one thread owns one
// query row (head size <= kMaxHeadSize, else std::invalid_argument).
inline constexpr int kKeyTile = 32;
inline constexpr int kMaxHeadSize = 256;
template <class T>
void attention_block_forward(float* o, float* m, float* l, const T* q, const T* k, const T* v, int Tq, int Tk,
                             int hs, int q_stride, int kv_stride, int q_pos0, int k_pos0, bool causal,
                             cudaStream_t stream);
template <class T>
void attention_block_finalize(T* out, float* lse, const float* o, const float* m, const float* l, int Tq,
                              int hs, int out_stride, cudaStream_t stream);
void attention_block_merge(float* o, float* m, float* l, const float* o2, const float* m2, const float* l2,
                           int Tq, int hs, cudaStream_t stream);
// dq accumulates over the block's keys (a thread per query row), dk and dv
// over its queries (a thread per key row): no atomics.
template <class T>
void attention_block_backward(float* dq, float* dk, float* dv, const T* q, const T* k, const T* v,
                              const T* dout, const float* lse, const float* Drow, int Tq, int Tk, int hs,
                              int q_stride, int kv_stride, int dout_stride, int q_pos0, int k_pos0, bool causal,
                              cudaStream_t stream);
// D (rows) = rowsum(dout * out) over cols, row stride `stride` (a thread per row).
template <class T>
void attention_row_dot(float* D, const T* dout, const T* out, int rows, int cols, int stride, cudaStream_t stream);
// Whole causal attention keeping lse (B,NH,T); bs is accepted for the CPU's
// signature (the device tiles by kKeyTile; the result does not depend on bs).
template <class T>
void attention_forward_blockwise(T* out, float* lse, const T* qkv, int B, int Tn, int C, int NH, int bs,
                                 cudaStream_t stream);
template <class T>
void attention_backward_blockwise(T* dqkv, const T* dout, const T* out, const T* qkv, const float* lse, int B,
                                  int Tn, int C, int NH, int bs, cudaStream_t stream);

// ---- tanh-GELU, residual and elementwise helpers ------------------------------
template <class T>
void gelu_forward(T* out, const T* inp, size_t N, cudaStream_t stream);
template <class T>
void gelu_backward(T* dinp, const T* inp, const T* dout, size_t N, cudaStream_t stream);
template <class T>
void residual_forward(T* out, const T* a, const T* b, size_t N, cudaStream_t stream);
template <class T>
void accumulate(T* dst, const T* src, size_t N, cudaStream_t stream);
// dst[r * dst_stride + c] += src[r * src_stride + c] for r < rows, c < cols
// (src: T, or fp32 into a bf16 dst).
template <class T, class S>
void accumulate_rows(T* dst, size_t dst_stride, const S* src, size_t src_stride, size_t cols, size_t rows,
                     cudaStream_t stream);
// x[0..n) = value.
void fill(float* x, float value, size_t n, cudaStream_t stream);
template <class T>
void scale(T* x, double s, size_t N, cudaStream_t stream);

// ---- softmax cross-entropy (losses fp32; probs may alias logits) --------------
template <class T>
void crossentropy_forward(float* losses, T* probs, const T* logits, const int32_t* targets, int N, int V,
                          cudaStream_t stream);
template <class T>
void crossentropy_backward(T* dlogits, const T* probs, const int32_t* targets, double dloss, int N, int V,
                           cudaStream_t stream);

// ---- rows of a table and a vocabulary shard's cross-entropy -----------------------
// kernels/cpu/ops.h's pieces of a tensor-parallel rank (statistics fp32).
// add_rows_backward: idx null, one thread per column sums the rows in order;
// otherwise the rows are stably radix-sorted by index (CUB) and one thread per
// (run of equal indices, column) sums its run in row order and adds it once,
// as encoder_backward's dwte. The vocab_* reductions: one 256-thread block per
// row (block_max / block_sum).
template <class T>
void embedding_lookup(T* out, const int32_t* idx, const T* table, int N, int C, int64_t first, int rows,
                      cudaStream_t stream);
template <class T>
void add_rows(T* x, const T* table, const int32_t* idx, int N, int C, cudaStream_t stream);
template <class T>
void add_rows_backward(T* dtable, const T* dout, const int32_t* idx, int N, int C, int64_t first, int rows,
                       cudaStream_t stream);
template <class T>
void vocab_logit_max(float* mx, const T* logits, int N, int Vr, int valid, cudaStream_t stream);
template <class T>
void vocab_sum_exp(float* sum, float* target_logit, const T* logits, const float* mx, const int32_t* targets,
                   int64_t first, int N, int Vr, int valid, cudaStream_t stream);
template <class T>
void vocab_softmax_loss(float* losses, T* probs, const T* logits, const float* mx, const float* sum,
                        const float* target_logit, int N, int Vr, int valid, cudaStream_t stream);
template <class T>
void vocab_crossentropy_backward(T* dlogits, const T* probs, const int32_t* targets, int64_t first, double dloss,
                                 int N, int Vr, int valid, cudaStream_t stream);

// ---- rows of a mixture-of-experts MLP --------------------------------------------
// kernels/cpu/ops.h's (weights and dw fp32): one thread per (choice, column)
// for the scatter and dy, per (token, column) for the combine (its choices
// summed best first), one 256-thread block per choice for dw (block_sum).
template <class T>
void moe_scatter_rows(T* xe, const T* x, const int32_t* choice, const int32_t* slot, int N, int K, int C, int rows,
                      cudaStream_t stream);
template <class T>
void moe_combine(T* out, const T* y, const int32_t* choice, const int32_t* slot, const float* weight, int N, int K,
                 int C, int rows, bool accumulate, cudaStream_t stream);
template <class T>
void moe_combine_backward(T* dy, float* dw, const T* dout, const T* y, const int32_t* choice, const int32_t* slot,
                          const float* weight, int N, int K, int C, int rows, cudaStream_t stream);

// ---- optimizer ---------------------------------------------------------------------
// AdamW on fp32 master and moments with a T gradient (kernels/cpu's
// adamw_step<T, float> with AdamWHyper's fields spelled out; param_out
// receives T(master) and may be null, or alias master when T is float).
template <class T>
void adamw_step(float* master, T* param_out, const T* grad, float* m, float* v, size_t n, double lr,
                double beta1, double beta2, double eps, double weight_decay, long step, double grad_scale,
                bool decay, cudaStream_t stream);
// Sum of squares of g in double: per-block partials, then summed in block
// order (deterministic; not the CPU's index order, so equal within rounding).
template <class T>
double sum_squares(const T* g, size_t n, cudaStream_t stream);

}  // namespace pb::kernels::cuda
