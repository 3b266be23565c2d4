// One seam between the model and the device it runs on: every op the
// single-device model step calls (reference/gpt.cc, reference/runner.cc, the
// optimizer and the norm), the pieces a tensor- or context-parallel rank adds
// (impl/tensor_parallel/runner.cc, impl/context_parallel/attention.cc: its
// vocabulary shard's lookup and cross-entropy, rows by index, blockwise
// attention, strided row moves), the rows of a mixture-of-experts MLP, plus the memory moves around them, behind one
// interface with a CPU and a CUDA implementation. The model code is written
// once against it; the CPU implementation forwards to kernels/cpu exactly (so
// the model through this seam is bit-identical to the CPU kernels called
// directly, which the conformance baseline witnesses), the CUDA one to
// kernels/cuda on the implementation's stream and cuBLAS handle.
// Invariants:
//  - time is the device's: timeline() marks points on the implementation's
//    stream (CUDA events) and reads the time between them;
//  - pointers are the implementation's memory (host for the CPU, device for
//    CUDA); to_device/to_host move between it and host memory, and to_host
//    and sum() return only after the device is done (they synchronize);
//  - the contract of each op is kernels/cpu/ops.h's (outputs first, backward
//    outputs accumulate, a null backward output is skipped);
//  - `mm_ws` (matmul) and `att_ws` (attention) are the CPU kernels'
//    workspaces (Scratch holds them, on the host only); off the host callers
//    pass null and allocate none: a device's kernels keep what they need
//    (CUDA: cuBLAS's, and none for attention), so a GPU's memory figures do
//    not carry the CPU's GEMM staging and score buffers.
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "harness/dtype.h"
#include "kernels/common/adamw_hyper.h"

namespace pb::kernels {

// Device time along an implementation's stream. mark() records the present
// point, after every op issued before it (CUDA: an event recorded on the
// stream), and returns its index; seconds(from, to) is the device time
// between two marks of this timeline, waiting until `to` is reached; clear()
// forgets the marks (their storage is reused). So a step or a pipeline action
// is timed without waiting for the device between marks. Not thread-safe:
// one per timed loop.
class DeviceTimeline {
 public:
  virtual ~DeviceTimeline() = default;
  virtual int mark() = 0;
  virtual double seconds(int from, int to) = 0;
  virtual void clear() = 0;
};

// The timeline of an implementation whose ops are done when they return
// (the CPU; a stand-in device): the steady clock when mark() is called.
class HostTimeline final : public DeviceTimeline {
 public:
  int mark() override {
    marks_.push_back(std::chrono::steady_clock::now());
    return int(marks_.size()) - 1;
  }
  double seconds(int from, int to) override {
    return std::chrono::duration<double>(marks_.at(size_t(to)) - marks_.at(size_t(from))).count();
  }
  void clear() override { marks_.clear(); }

 private:
  std::vector<std::chrono::steady_clock::time_point> marks_;
};

template <class T>
class DeviceOps {
 public:
  using A = acc_t<T>;  // LayerNorm statistics, attention workspace, losses
  using M = std::conditional_t<std::is_same_v<T, double>, double, float>;  // optimizer master and moments
  virtual ~DeviceOps() = default;

  virtual std::string name() const = 0;  // "cpu", "cuda:0 NVIDIA H100 80GB HBM3", ...
  virtual bool is_host() const = 0;      // the memory is host-addressable

  // Memory (bytes). copy: within the implementation's memory.
  virtual void copy(void* dst, const void* src, size_t bytes) const = 0;
  virtual void zero(void* dst, size_t bytes) const = 0;
  virtual void to_device(void* dst, const void* host_src, size_t bytes) const = 0;
  virtual void to_host(void* host_dst, const void* src, size_t bytes) const = 0;
  virtual void synchronize() const = 0;
  // A timeline of this implementation's stream (DeviceTimeline above); the
  // default is the host clock, right for ops that are done when they return.
  virtual std::unique_ptr<DeviceTimeline> timeline() const { return std::make_unique<HostTimeline>(); }

  // The model's ops (kernels/cpu/ops.h).
  virtual void encoder_forward(T* out, const int32_t* inp, const T* wte, const T* wpe, int B, int Tn,
                               int C) const = 0;
  virtual void encoder_backward(T* dwte, T* dwpe, const T* dout, const int32_t* inp, int B, int Tn,
                                int C) const = 0;
  virtual void layernorm_forward(T* out, A* mean, A* rstd, const T* inp, const T* weight, const T* bias, int N,
                                 int C) const = 0;
  virtual void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                                  const A* mean, const A* rstd, int N, int C) const = 0;
  virtual void matmul_forward(T* out, const T* inp, const T* weight, const T* bias, int N, int C, int OC,
                              float* mm_ws) const = 0;
  virtual void matmul_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                               int N, int C, int OC, float* mm_ws) const = 0;
  virtual void attention_forward(T* out, T* att, const T* qkv, int B, int Tn, int C, int NH,
                                 A* att_ws) const = 0;
  virtual void attention_backward(T* dqkv, T* datt, const T* dout, const T* qkv, const T* att, int B, int Tn,
                                  int C, int NH, A* att_ws) const = 0;
  // Blockwise attention for one (batch, head) slice: the pieces ring attention
  // runs per visiting block (kernels/cpu/ops.h), and the backward's row sums.
  virtual void attention_block_forward(A* o, A* m, A* l, const T* q, const T* k, const T* v, int Tq, int Tk, int hs,
                                       int q_stride, int kv_stride, int q_pos0, int k_pos0, bool causal) const = 0;
  virtual void attention_block_finalize(T* out, A* lse, const A* o, const A* m, const A* l, int Tq, int hs,
                                        int out_stride) const = 0;
  virtual void attention_block_merge(A* o, A* m, A* l, const A* o2, const A* m2, const A* l2, int Tq,
                                     int hs) const = 0;
  virtual void attention_block_backward(A* dq, A* dk, A* dv, const T* q, const T* k, const T* v, const T* dout,
                                        const A* lse, const A* Drow, int Tq, int Tk, int hs, int q_stride,
                                        int kv_stride, int dout_stride, int q_pos0, int k_pos0,
                                        bool causal) const = 0;
  virtual void attention_row_dot(A* D, const T* dout, const T* out, int rows, int cols, int stride) const = 0;
  virtual void gelu_forward(T* out, const T* inp, size_t N) const = 0;
  virtual void gelu_backward(T* dinp, const T* inp, const T* dout, size_t N) const = 0;
  virtual void residual_forward(T* out, const T* a, const T* b, size_t N) const = 0;
  virtual void accumulate(T* dst, const T* src, size_t N) const = 0;
  // `rows` rows of `cols` elements, row r at src + r * src_stride, to (copy)
  // or added into (accumulate, as accumulate()) dst + r * dst_stride: the
  // strided moves of Ulysses' all-to-all packing.
  virtual void copy_rows(T* dst, size_t dst_stride, const T* src, size_t src_stride, size_t cols,
                         size_t rows) const = 0;
  virtual void accumulate_rows(T* dst, size_t dst_stride, const T* src, size_t src_stride, size_t cols,
                               size_t rows) const = 0;
  // The same from (and within) the accumulation type: fill with a value,
  // dst += src in A, and A rows added into T rows (each rounded once).
  virtual void fill_acc(A* x, double value, size_t n) const = 0;
  virtual void accumulate_acc(A* dst, const A* src, size_t n) const = 0;
  virtual void accumulate_rows_acc(T* dst, size_t dst_stride, const A* src, size_t src_stride, size_t cols,
                                   size_t rows) const = 0;
  virtual void crossentropy_forward(A* losses, T* probs, const T* logits, const int32_t* targets, int N,
                                    int V) const = 0;
  virtual void crossentropy_backward(T* dlogits, const T* probs, const int32_t* targets, double dloss, int N,
                                     int V) const = 0;
  // A tensor-parallel rank's pieces (kernels/cpu/ops.h): its vocabulary
  // shard's lookup and cross-entropy, rows added by index, their gradients.
  virtual void embedding_lookup(T* out, const int32_t* idx, const T* table, int N, int C, int64_t first,
                                int rows) const = 0;
  virtual void add_rows(T* x, const T* table, const int32_t* idx, int N, int C) const = 0;
  virtual void add_rows_backward(T* dtable, const T* dout, const int32_t* idx, int N, int C, int64_t first,
                                 int rows) const = 0;
  virtual void vocab_logit_max(A* mx, const T* logits, int N, int Vr, int valid) const = 0;
  virtual void vocab_sum_exp(A* sum, A* target_logit, const T* logits, const A* mx, const int32_t* targets,
                             int64_t first, int N, int Vr, int valid) const = 0;
  virtual void vocab_softmax_loss(A* losses, T* probs, const T* logits, const A* mx, const A* sum,
                                  const A* target_logit, int N, int Vr, int valid) const = 0;
  virtual void vocab_crossentropy_backward(T* dlogits, const T* probs, const int32_t* targets, int64_t first,
                                           double dloss, int N, int Vr, int valid) const = 0;
  // A mixture-of-experts MLP's rows (kernels/cpu/ops.h): admitted tokens to
  // their experts' rows, the experts' outputs combined back with the router
  // weights, and that combine's backward. choice, slot and weight are the
  // implementation's memory like the rest (the routing that fills them runs
  // on the host, reference/moe.cc).
  virtual void moe_scatter_rows(T* xe, const T* x, const int32_t* choice, const int32_t* slot, int N, int K, int C,
                                int rows) const = 0;
  virtual void moe_combine(T* out, const T* y, const int32_t* choice, const int32_t* slot, const A* weight, int N,
                           int K, int C, int rows, bool accumulate) const = 0;
  virtual void moe_combine_backward(T* dy, A* dw, const T* dout, const T* y, const int32_t* choice,
                                    const int32_t* slot, const A* weight, int N, int K, int C, int rows) const = 0;
  // The llama family's ops (kernels/cpu/ops.h): grouped-query attention,
  // rotary embedding, RMSNorm, SwiGLU. The CPU implements them; another
  // device does not yet (the default throws naming the op and the device;
  // train.device refuses the family first, reference/train_config.cc).
  virtual void attention_forward_gqa(T*, T*, const T*, int, int, int, int, int, A*) const {
    missing("attention_forward_gqa");
  }
  virtual void attention_backward_gqa(T*, T*, const T*, const T*, const T*, int, int, int, int, int, A*) const {
    missing("attention_backward_gqa");
  }
  virtual void rope_forward(T*, const T*, const int32_t*, int, int, int, int, int, double) const {
    missing("rope_forward");
  }
  virtual void rope_backward(T*, const T*, const int32_t*, int, int, int, int, int, double) const {
    missing("rope_backward");
  }
  virtual void rmsnorm_forward(T*, A*, const T*, const T*, int, int, double) const { missing("rmsnorm_forward"); }
  virtual void rmsnorm_backward(T*, T*, const T*, const T*, const T*, const A*, int, int) const {
    missing("rmsnorm_backward");
  }
  virtual void swiglu_forward(T*, const T*, int, int) const { missing("swiglu_forward"); }
  virtual void swiglu_backward(T*, const T*, const T*, int, int) const { missing("swiglu_backward"); }
  // Sum of x[0..n) in index order, in double, on the host (the loss).
  virtual double sum(const A* x, size_t n) const = 0;

  // The optimizer step and the clipping norm.
  virtual void adamw_step(M* master, T* param_out, const T* grad, M* m, M* v, size_t n, const AdamWHyper& h,
                          bool decay) const = 0;
  virtual double sum_squares(const T* g, size_t n) const = 0;

 private:
  [[noreturn]] void missing(const char* op) const {
    throw std::runtime_error(std::string(op) + ": not implemented on " + name() + " (the llama family runs on the CPU)");
  }
};

// The CPU implementation (kernels/cpu), one per storage type.
template <class T>
const DeviceOps<T>& cpu_ops();

// The CPU implementation with every matmul's inner sums taken in `parts`
// consecutive slices (kernels/cpu/ops.h matmul_forward_sliced; fp32 and
// fp64; parts >= 1, else std::invalid_argument): the same model in another
// correct order of summation, for a reference whose distance to the truth
// is a noise floor (the conformance engine's fp64 floor).
template <class T>
std::shared_ptr<const DeviceOps<T>> cpu_ops_sliced(int parts);

// `ops`, or the CPU's when null (a non-owning pointer to cpu_ops<T>()): what
// a trainer or rank given an optional device runs on.
template <class T>
std::shared_ptr<const DeviceOps<T>> ops_or_cpu(std::shared_ptr<const DeviceOps<T>> ops) {
  if (ops) return ops;
  return std::shared_ptr<const DeviceOps<T>>(&cpu_ops<T>(), [](const DeviceOps<T>*) {});
}

}  // namespace pb::kernels
