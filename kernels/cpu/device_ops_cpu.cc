// The CPU side of the device seam (kernels/common/device_ops.h): every call
// forwards to the kernel of kernels/cpu/ops.h with the same arguments, so the
// model through the seam computes exactly what it computed calling the
// kernels directly.
#include <algorithm>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>

#include "kernels/common/device_ops.h"
#include "kernels/cpu/numeric.h"
#include "kernels/cpu/ops.h"

namespace pb::kernels {
namespace {

template <class T>
class CpuOps final : public DeviceOps<T> {
 public:
  using A = typename DeviceOps<T>::A;
  using M = typename DeviceOps<T>::M;

  // parts > 1: every matmul's inner sums in that many slices (fp32, fp64).
  explicit CpuOps(int parts = 1) : parts_(parts) {}

  std::string name() const override {
    return parts_ == 1 ? "cpu" : "cpu (inner sums in " + std::to_string(parts_) + " slices)";
  }
  bool is_host() const override { return true; }

  void copy(void* dst, const void* src, size_t bytes) const override {
    if (bytes) std::memmove(dst, src, bytes);
  }
  void zero(void* dst, size_t bytes) const override {
    if (bytes) std::memset(dst, 0, bytes);
  }
  void to_device(void* dst, const void* src, size_t bytes) const override { copy(dst, src, bytes); }
  void to_host(void* dst, const void* src, size_t bytes) const override { copy(dst, src, bytes); }
  void synchronize() const override {}

  void encoder_forward(T* out, const int32_t* inp, const T* wte, const T* wpe, int B, int Tn,
                       int C) const override {
    kernels::encoder_forward(out, inp, wte, wpe, B, Tn, C);
  }
  void encoder_backward(T* dwte, T* dwpe, const T* dout, const int32_t* inp, int B, int Tn, int C) const override {
    kernels::encoder_backward(dwte, dwpe, dout, inp, B, Tn, C);
  }
  void layernorm_forward(T* out, A* mean, A* rstd, const T* inp, const T* weight, const T* bias, int N,
                         int C) const override {
    kernels::layernorm_forward(out, mean, rstd, inp, weight, bias, N, C);
  }
  void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, const A* mean,
                          const A* rstd, int N, int C) const override {
    kernels::layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
  }
  void matmul_forward(T* out, const T* inp, const T* weight, const T* bias, int N, int C, int OC,
                      float* mm_ws) const override {
    if constexpr (!std::is_same_v<T, bf16>)
      if (parts_ > 1) return kernels::matmul_forward_sliced(out, inp, weight, bias, N, C, OC, parts_);
    kernels::matmul_forward(out, inp, weight, bias, N, C, OC, mm_ws);
  }
  void matmul_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, int N, int C,
                       int OC, float* mm_ws) const override {
    if constexpr (!std::is_same_v<T, bf16>)
      if (parts_ > 1) return kernels::matmul_backward_sliced(dinp, dweight, dbias, dout, inp, weight, N, C, OC, parts_);
    kernels::matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC, mm_ws);
  }
  void attention_forward(T* out, T* att, const T* qkv, int B, int Tn, int C, int NH, A* att_ws) const override {
    kernels::attention_forward(out, att, qkv, B, Tn, C, NH, att_ws);
  }
  void attention_backward(T* dqkv, T* datt, const T* dout, const T* qkv, const T* att, int B, int Tn, int C, int NH,
                          A* att_ws) const override {
    kernels::attention_backward(dqkv, datt, dout, qkv, att, B, Tn, C, NH, att_ws);
  }
  void attention_block_forward(A* o, A* m, A* l, const T* q, const T* k, const T* v, int Tq, int Tk, int hs,
                               int q_stride, int kv_stride, int q_pos0, int k_pos0, bool causal) const override {
    kernels::attention_block_forward<T>(o, m, l, q, k, v, Tq, Tk, hs, q_stride, kv_stride, q_pos0, k_pos0, causal);
  }
  void attention_block_finalize(T* out, A* lse, const A* o, const A* m, const A* l, int Tq, int hs,
                                int out_stride) const override {
    kernels::attention_block_finalize<T>(out, lse, o, m, l, Tq, hs, out_stride);
  }
  void attention_block_merge(A* o, A* m, A* l, const A* o2, const A* m2, const A* l2, int Tq, int hs) const override {
    kernels::attention_block_merge<T>(o, m, l, o2, m2, l2, Tq, hs);
  }
  void attention_block_backward(A* dq, A* dk, A* dv, const T* q, const T* k, const T* v, const T* dout, const A* lse,
                                const A* Drow, int Tq, int Tk, int hs, int q_stride, int kv_stride, int dout_stride,
                                int q_pos0, int k_pos0, bool causal) const override {
    kernels::attention_block_backward<T>(dq, dk, dv, q, k, v, dout, lse, Drow, Tq, Tk, hs, q_stride, kv_stride,
                                         dout_stride, q_pos0, k_pos0, causal);
  }
  void attention_row_dot(A* D, const T* dout, const T* out, int rows, int cols, int stride) const override {
    kernels::attention_row_dot(D, dout, out, rows, cols, stride);
  }
  void gelu_forward(T* out, const T* inp, size_t N) const override { kernels::gelu_forward(out, inp, N); }
  void gelu_backward(T* dinp, const T* inp, const T* dout, size_t N) const override {
    kernels::gelu_backward(dinp, inp, dout, N);
  }
  void residual_forward(T* out, const T* a, const T* b, size_t N) const override {
    kernels::residual_forward(out, a, b, N);
  }
  void accumulate(T* dst, const T* src, size_t N) const override { kernels::accumulate(dst, src, N); }
  void copy_rows(T* dst, size_t dst_stride, const T* src, size_t src_stride, size_t cols,
                 size_t rows) const override {
    for (size_t r = 0; r < rows; ++r) copy(dst + r * dst_stride, src + r * src_stride, cols * sizeof(T));
  }
  void accumulate_rows(T* dst, size_t dst_stride, const T* src, size_t src_stride, size_t cols,
                       size_t rows) const override {
    for (size_t r = 0; r < rows; ++r) kernels::accumulate(dst + r * dst_stride, src + r * src_stride, cols);
  }
  void fill_acc(A* x, double value, size_t n) const override { std::fill(x, x + n, A(value)); }
  void accumulate_acc(A* dst, const A* src, size_t n) const override { kernels::accumulate(dst, src, n); }
  void accumulate_rows_acc(T* dst, size_t dst_stride, const A* src, size_t src_stride, size_t cols,
                           size_t rows) const override {
    for (size_t r = 0; r < rows; ++r)
      for (size_t c = 0; c < cols; ++c) detail::add_into(dst[r * dst_stride + c], src[r * src_stride + c]);
  }
  void crossentropy_forward(A* losses, T* probs, const T* logits, const int32_t* targets, int N,
                            int V) const override {
    kernels::crossentropy_forward(losses, probs, logits, targets, N, V);
  }
  void crossentropy_backward(T* dlogits, const T* probs, const int32_t* targets, double dloss, int N,
                             int V) const override {
    kernels::crossentropy_backward(dlogits, probs, targets, dloss, N, V);
  }
  void embedding_lookup(T* out, const int32_t* idx, const T* table, int N, int C, int64_t first,
                        int rows) const override {
    kernels::embedding_lookup(out, idx, table, N, C, first, rows);
  }
  void add_rows(T* x, const T* table, const int32_t* idx, int N, int C) const override {
    kernels::add_rows(x, table, idx, N, C);
  }
  void add_rows_backward(T* dtable, const T* dout, const int32_t* idx, int N, int C, int64_t first,
                         int rows) const override {
    kernels::add_rows_backward(dtable, dout, idx, N, C, first, rows);
  }
  void vocab_logit_max(A* mx, const T* logits, int N, int Vr, int valid) const override {
    kernels::vocab_logit_max(mx, logits, N, Vr, valid);
  }
  void vocab_sum_exp(A* sum, A* target_logit, const T* logits, const A* mx, const int32_t* targets, int64_t first,
                     int N, int Vr, int valid) const override {
    kernels::vocab_sum_exp(sum, target_logit, logits, mx, targets, first, N, Vr, valid);
  }
  void vocab_softmax_loss(A* losses, T* probs, const T* logits, const A* mx, const A* sum, const A* target_logit,
                          int N, int Vr, int valid) const override {
    kernels::vocab_softmax_loss(losses, probs, logits, mx, sum, target_logit, N, Vr, valid);
  }
  void vocab_crossentropy_backward(T* dlogits, const T* probs, const int32_t* targets, int64_t first, double dloss,
                                   int N, int Vr, int valid) const override {
    kernels::vocab_crossentropy_backward(dlogits, probs, targets, first, dloss, N, Vr, valid);
  }
  void moe_scatter_rows(T* xe, const T* x, const int32_t* choice, const int32_t* slot, int N, int K, int C,
                        int rows) const override {
    kernels::moe_scatter_rows(xe, x, choice, slot, N, K, C, rows);
  }
  void moe_combine(T* out, const T* y, const int32_t* choice, const int32_t* slot, const A* weight, int N, int K,
                   int C, int rows, bool accumulate) const override {
    kernels::moe_combine(out, y, choice, slot, weight, N, K, C, rows, accumulate);
  }
  void moe_combine_backward(T* dy, A* dw, const T* dout, const T* y, const int32_t* choice, const int32_t* slot,
                            const A* weight, int N, int K, int C, int rows) const override {
    kernels::moe_combine_backward(dy, dw, dout, y, choice, slot, weight, N, K, C, rows);
  }
  void attention_forward_gqa(T* out, T* att, const T* qkv, int B, int Tn, int C, int NH, int KVH,
                             A* att_ws) const override {
    kernels::attention_forward_gqa(out, att, qkv, B, Tn, C, NH, KVH, att_ws);
  }
  void attention_backward_gqa(T* dqkv, T* datt, const T* dout, const T* qkv, const T* att, int B, int Tn, int C,
                              int NH, int KVH, A* att_ws) const override {
    kernels::attention_backward_gqa(dqkv, datt, dout, qkv, att, B, Tn, C, NH, KVH, att_ws);
  }
  void rope_forward(T* out, const T* inp, const int32_t* pos, int B, int Tn, int heads, int hs, int stride,
                    double theta) const override {
    kernels::rope_forward(out, inp, pos, B, Tn, heads, hs, stride, theta);
  }
  void rope_backward(T* dinp, const T* dout, const int32_t* pos, int B, int Tn, int heads, int hs, int stride,
                     double theta) const override {
    kernels::rope_backward(dinp, dout, pos, B, Tn, heads, hs, stride, theta);
  }
  void rmsnorm_forward(T* out, A* rstd, const T* inp, const T* weight, int N, int C, double eps) const override {
    kernels::rmsnorm_forward(out, rstd, inp, weight, N, C, eps);
  }
  void rmsnorm_backward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight, const A* rstd, int N,
                        int C) const override {
    kernels::rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, N, C);
  }
  void swiglu_forward(T* out, const T* gu, int N, int H) const override { kernels::swiglu_forward(out, gu, N, H); }
  void swiglu_backward(T* dgu, const T* gu, const T* dout, int N, int H) const override {
    kernels::swiglu_backward(dgu, gu, dout, N, H);
  }
  double sum(const A* x, size_t n) const override {
    double s = 0;
    for (size_t i = 0; i < n; ++i) s += double(x[i]);
    return s;
  }
  void adamw_step(M* master, T* param_out, const T* grad, M* m, M* v, size_t n, const AdamWHyper& h,
                  bool decay) const override {
    kernels::adamw_step<T, M>(master, param_out, grad, m, v, n, h, decay);
  }
  double sum_squares(const T* g, size_t n) const override {
    if (parts_ <= 1) return kernels::sum_squares(g, n);
    // Sliced, the norm's sum of squares too (in parts_ consecutive slices,
    // as a sharded norm sums it): a norm summed in another correct order
    // differs from the sequential one by far more than four ulps.
    double s = 0;
    for (int p = 0; p < parts_; ++p) {
      const size_t lo = n * size_t(p) / size_t(parts_), hi = n * size_t(p + 1) / size_t(parts_);
      s += kernels::sum_squares(g + lo, hi - lo);
    }
    return s;
  }

 private:
  int parts_ = 1;
};

}  // namespace

template <class T>
const DeviceOps<T>& cpu_ops() {
  static const CpuOps<T> ops;
  return ops;
}

template <class T>
std::shared_ptr<const DeviceOps<T>> cpu_ops_sliced(int parts) {
  if (parts < 1) throw std::invalid_argument("cpu_ops_sliced: parts must be >= 1, got " + std::to_string(parts));
  return std::make_shared<const CpuOps<T>>(parts);
}

template const DeviceOps<double>& cpu_ops<double>();
template const DeviceOps<float>& cpu_ops<float>();
template const DeviceOps<bf16>& cpu_ops<bf16>();
template std::shared_ptr<const DeviceOps<double>> cpu_ops_sliced<double>(int);
template std::shared_ptr<const DeviceOps<float>> cpu_ops_sliced<float>(int);

}  // namespace pb::kernels
