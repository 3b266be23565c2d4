// A GPU behind the device seam: CudaMemory (cudaMalloc + a zero fill) and
// CudaOps<T>, each op the kernels/cuda function of the same name on the Gpu's
// stream. pb::bf16 and __nv_bfloat16 are both 16 bits with bf16's layout, so
// a bf16 buffer is passed as __nv_bfloat16 (reinterpret_cast, no copy).
#include "kernels/cuda/gpu.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cuda/check.h"
#include "kernels/cuda/ops.h"

namespace pb::kernels::cuda {
namespace {

using detail::check;
static_assert(sizeof(bf16) == sizeof(__nv_bfloat16), "bf16 and __nv_bfloat16 share a layout");

// The device's stream and cuBLAS handle, shared by its fp32 and bf16 ops.
struct Context {
  int ordinal = 0;
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  explicit Context(int dev) : ordinal(dev) {
    check(cudaSetDevice(dev), "cudaSetDevice");
    check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    check(cublasCreate(&blas), "cublasCreate");
    check(cublasSetStream(blas, stream), "cublasSetStream");
  }
  ~Context() {
    if (blas) cublasDestroy(blas);
    if (stream) cudaStreamDestroy(stream);
  }
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;
  void sync() const { check(cudaStreamSynchronize(stream), "cudaStreamSynchronize"); }
};

class CudaMemory final : public DeviceMemory {
 public:
  explicit CudaMemory(std::shared_ptr<Context> c) : c_(std::move(c)) {}
  void* allocate(size_t bytes) override {
    void* p = nullptr;
    check(cudaMalloc(&p, bytes), "cudaMalloc");
    try {
      check(cudaMemsetAsync(p, 0, bytes, c_->stream), "cudaMemsetAsync");
    } catch (...) {
      cudaFree(p);
      throw;
    }
    return p;
  }
  void deallocate(void* p) noexcept override {
    cudaStreamSynchronize(c_->stream);  // nothing queued may still touch it
    cudaFree(p);
  }

 private:
  std::shared_ptr<Context> c_;
};

// CUDA events on the device's stream, created as marks first need them and
// reused after clear(); seconds() waits for the later event only.
class CudaTimeline final : public DeviceTimeline {
 public:
  explicit CudaTimeline(std::shared_ptr<Context> c) : c_(std::move(c)) {}
  ~CudaTimeline() override {
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
  }
  CudaTimeline(const CudaTimeline&) = delete;
  CudaTimeline& operator=(const CudaTimeline&) = delete;
  int mark() override {
    if (used_ == events_.size()) {
      cudaEvent_t e = nullptr;
      check(cudaEventCreate(&e), "cudaEventCreate");
      events_.push_back(e);
    }
    check(cudaEventRecord(events_[used_], c_->stream), "cudaEventRecord");
    return int(used_++);
  }
  double seconds(int from, int to) override {
    if (from < 0 || to < 0 || size_t(from) >= used_ || size_t(to) >= used_)
      throw std::out_of_range("CudaTimeline: mark " + std::to_string(std::max(from, to)) + " of " +
                              std::to_string(used_));
    check(cudaEventSynchronize(events_[size_t(to)]), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, events_[size_t(from)], events_[size_t(to)]), "cudaEventElapsedTime");
    return double(ms) / 1e3;
  }
  void clear() override { used_ = 0; }

 private:
  std::shared_ptr<Context> c_;
  std::vector<cudaEvent_t> events_;
  size_t used_ = 0;
};

template <class T>
using dev_t = std::conditional_t<std::is_same_v<T, bf16>, __nv_bfloat16, T>;
template <class T>
dev_t<T>* d(T* p) {
  return reinterpret_cast<dev_t<T>*>(p);
}
template <class T>
const dev_t<T>* d(const T* p) {
  return reinterpret_cast<const dev_t<T>*>(p);
}

template <class T>
class CudaOps final : public DeviceOps<T> {
 public:
  using A = typename DeviceOps<T>::A;
  using M = typename DeviceOps<T>::M;
  static_assert(std::is_same_v<A, float> && std::is_same_v<M, float>, "the CUDA kernels take fp32 statistics");

  CudaOps(std::shared_ptr<Context> c, std::string name) : c_(std::move(c)), name_(std::move(name)) {}
  std::string name() const override { return name_; }
  bool is_host() const override { return false; }

  void copy(void* dst, const void* src, size_t bytes) const override {
    if (bytes) check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s()), "cudaMemcpyAsync D2D");
  }
  void zero(void* dst, size_t bytes) const override {
    if (bytes) check(cudaMemsetAsync(dst, 0, bytes, s()), "cudaMemsetAsync");
  }
  // From pageable host memory: waits, so the caller may reuse its buffer.
  void to_device(void* dst, const void* src, size_t bytes) const override {
    if (!bytes) return;
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s()), "cudaMemcpyAsync H2D");
    c_->sync();
  }
  void to_host(void* dst, const void* src, size_t bytes) const override {
    if (!bytes) return;
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s()), "cudaMemcpyAsync D2H");
    c_->sync();
  }
  void synchronize() const override { c_->sync(); }
  std::unique_ptr<DeviceTimeline> timeline() const override { return std::make_unique<CudaTimeline>(c_); }

  void encoder_forward(T* out, const int32_t* inp, const T* wte, const T* wpe, int B, int Tn,
                       int C) const override {
    cuda::encoder_forward(d(out), inp, d(wte), d(wpe), B, Tn, C, s());
  }
  void encoder_backward(T* dwte, T* dwpe, const T* dout, const int32_t* inp, int B, int Tn, int C) const override {
    cuda::encoder_backward(d(dwte), d(dwpe), d(dout), inp, B, Tn, C, s());
  }
  void layernorm_forward(T* out, A* mean, A* rstd, const T* inp, const T* w, const T* b, int N,
                         int C) const override {
    cuda::layernorm_forward(d(out), mean, rstd, d(inp), d(w), d(b), N, C, 1e-5, s());  // the CPU kernel's eps
  }
  void layernorm_backward(T* dinp, T* dw, T* db, const T* dout, const T* inp, const T* w, const A* mean,
                          const A* rstd, int N, int C) const override {
    cuda::layernorm_backward(d(dinp), d(dw), d(db), d(dout), d(inp), d(w), mean, rstd, N, C, s());
  }
  void matmul_forward(T* out, const T* inp, const T* w, const T* b, int N, int C, int OC, float*) const override {
    cuda::matmul_forward(c_->blas, d(out), d(inp), d(w), d(b), N, C, OC, s());
  }
  void matmul_backward(T* dinp, T* dw, T* db, const T* dout, const T* inp, const T* w, int N, int C, int OC,
                       float*) const override {
    cuda::matmul_backward(c_->blas, d(dinp), d(dw), d(db), d(dout), d(inp), d(w), N, C, OC, s());
  }
  void attention_forward(T* out, T* att, const T* qkv, int B, int Tn, int C, int NH, A*) const override {
    cuda::attention_forward(d(out), d(att), d(qkv), B, Tn, C, NH, s());
  }
  void attention_backward(T* dqkv, T* datt, const T* dout, const T* qkv, const T* att, int B, int Tn, int C, int NH,
                          A*) const override {
    cuda::attention_backward(d(dqkv), d(datt), d(dout), d(qkv), d(att), B, Tn, C, NH, s());
  }
  void attention_block_forward(A* o, A* m, A* l, const T* q, const T* k, const T* v, int Tq, int Tk, int hs,
                               int q_stride, int kv_stride, int q_pos0, int k_pos0, bool causal) const override {
    cuda::attention_block_forward(o, m, l, d(q), d(k), d(v), Tq, Tk, hs, q_stride, kv_stride, q_pos0, k_pos0, causal,
                                  s());
  }
  void attention_block_finalize(T* out, A* lse, const A* o, const A* m, const A* l, int Tq, int hs,
                                int out_stride) const override {
    cuda::attention_block_finalize(d(out), lse, o, m, l, Tq, hs, out_stride, s());
  }
  void attention_block_merge(A* o, A* m, A* l, const A* o2, const A* m2, const A* l2, int Tq, int hs) const override {
    cuda::attention_block_merge(o, m, l, o2, m2, l2, Tq, hs, s());
  }
  void attention_block_backward(A* dq, A* dk, A* dv, const T* q, const T* k, const T* v, const T* dout, const A* lse,
                                const A* Drow, int Tq, int Tk, int hs, int q_stride, int kv_stride, int dout_stride,
                                int q_pos0, int k_pos0, bool causal) const override {
    cuda::attention_block_backward(dq, dk, dv, d(q), d(k), d(v), d(dout), lse, Drow, Tq, Tk, hs, q_stride, kv_stride,
                                   dout_stride, q_pos0, k_pos0, causal, s());
  }
  void attention_row_dot(A* D, const T* dout, const T* out, int rows, int cols, int stride) const override {
    cuda::attention_row_dot(D, d(dout), d(out), rows, cols, stride, s());
  }
  void gelu_forward(T* out, const T* inp, size_t N) const override { cuda::gelu_forward(d(out), d(inp), N, s()); }
  void gelu_backward(T* dinp, const T* inp, const T* dout, size_t N) const override {
    cuda::gelu_backward(d(dinp), d(inp), d(dout), N, s());
  }
  void residual_forward(T* out, const T* a, const T* b, size_t N) const override {
    cuda::residual_forward(d(out), d(a), d(b), N, s());
  }
  void accumulate(T* dst, const T* src, size_t N) const override { cuda::accumulate(d(dst), d(src), N, s()); }
  void copy_rows(T* dst, size_t dst_stride, const T* src, size_t src_stride, size_t cols,
                 size_t rows) const override {
    if (!cols || !rows) return;
    check(cudaMemcpy2DAsync(dst, dst_stride * sizeof(T), src, src_stride * sizeof(T), cols * sizeof(T), rows,
                            cudaMemcpyDeviceToDevice, s()),
          "cudaMemcpy2DAsync D2D");
  }
  void accumulate_rows(T* dst, size_t dst_stride, const T* src, size_t src_stride, size_t cols,
                       size_t rows) const override {
    cuda::accumulate_rows(d(dst), dst_stride, d(src), src_stride, cols, rows, s());
  }
  void fill_acc(A* x, double value, size_t n) const override { cuda::fill(x, float(value), n, s()); }
  void accumulate_acc(A* dst, const A* src, size_t n) const override { cuda::accumulate(dst, src, n, s()); }
  void accumulate_rows_acc(T* dst, size_t dst_stride, const A* src, size_t src_stride, size_t cols,
                           size_t rows) const override {
    cuda::accumulate_rows(d(dst), dst_stride, src, src_stride, cols, rows, s());
  }
  void crossentropy_forward(A* losses, T* probs, const T* logits, const int32_t* targets, int N,
                            int V) const override {
    cuda::crossentropy_forward(losses, d(probs), d(logits), targets, N, V, s());
  }
  void crossentropy_backward(T* dlogits, const T* probs, const int32_t* targets, double dloss, int N,
                             int V) const override {
    cuda::crossentropy_backward(d(dlogits), d(probs), targets, dloss, N, V, s());
  }
  void embedding_lookup(T* out, const int32_t* idx, const T* table, int N, int C, int64_t first,
                        int rows) const override {
    cuda::embedding_lookup(d(out), idx, d(table), N, C, first, rows, s());
  }
  void add_rows(T* x, const T* table, const int32_t* idx, int N, int C) const override {
    cuda::add_rows(d(x), d(table), idx, N, C, s());
  }
  void add_rows_backward(T* dtable, const T* dout, const int32_t* idx, int N, int C, int64_t first,
                         int rows) const override {
    cuda::add_rows_backward(d(dtable), d(dout), idx, N, C, first, rows, s());
  }
  void vocab_logit_max(A* mx, const T* logits, int N, int Vr, int valid) const override {
    cuda::vocab_logit_max(mx, d(logits), N, Vr, valid, s());
  }
  void vocab_sum_exp(A* sum, A* target_logit, const T* logits, const A* mx, const int32_t* targets, int64_t first,
                     int N, int Vr, int valid) const override {
    cuda::vocab_sum_exp(sum, target_logit, d(logits), mx, targets, first, N, Vr, valid, s());
  }
  void vocab_softmax_loss(A* losses, T* probs, const T* logits, const A* mx, const A* sum, const A* target_logit,
                          int N, int Vr, int valid) const override {
    cuda::vocab_softmax_loss(losses, d(probs), d(logits), mx, sum, target_logit, N, Vr, valid, s());
  }
  void vocab_crossentropy_backward(T* dlogits, const T* probs, const int32_t* targets, int64_t first, double dloss,
                                   int N, int Vr, int valid) const override {
    cuda::vocab_crossentropy_backward(d(dlogits), d(probs), targets, first, dloss, N, Vr, valid, s());
  }
  void moe_scatter_rows(T* xe, const T* x, const int32_t* choice, const int32_t* slot, int N, int K, int C,
                        int rows) const override {
    cuda::moe_scatter_rows(d(xe), d(x), choice, slot, N, K, C, rows, s());
  }
  void moe_combine(T* out, const T* y, const int32_t* choice, const int32_t* slot, const A* weight, int N, int K,
                   int C, int rows, bool accumulate) const override {
    cuda::moe_combine(d(out), d(y), choice, slot, weight, N, K, C, rows, accumulate, s());
  }
  void moe_combine_backward(T* dy, A* dw, const T* dout, const T* y, const int32_t* choice, const int32_t* slot,
                            const A* weight, int N, int K, int C, int rows) const override {
    cuda::moe_combine_backward(d(dy), dw, d(dout), d(y), choice, slot, weight, N, K, C, rows, s());
  }
  // Read back, then summed in index order on the host (the CPU's order).
  double sum(const A* x, size_t n) const override {
    std::vector<A> host(n);
    to_host(host.data(), x, n * sizeof(A));
    double total = 0;
    for (A v : host) total += double(v);
    return total;
  }
  void adamw_step(M* master, T* param_out, const T* grad, M* m, M* v, size_t n, const AdamWHyper& h,
                  bool decay) const override {
    cuda::adamw_step(master, d(param_out), d(grad), m, v, n, h.lr, h.beta1, h.beta2, h.eps, h.weight_decay, h.step,
                     h.grad_scale, decay, s());
  }
  double sum_squares(const T* g, size_t n) const override { return cuda::sum_squares(d(g), n, s()); }

 private:
  cudaStream_t s() const { return c_->stream; }
  std::shared_ptr<Context> c_;
  std::string name_;
};

}  // namespace

double measure_gemm_flops(int ordinal, bool bf16, int n, double min_seconds) {
  if (n <= 0 || !(min_seconds >= 0)) throw std::invalid_argument("measure_gemm_flops: n > 0, min_seconds >= 0");
  Context ctx(ordinal);
  const size_t elems = size_t(n) * size_t(n), bytes = elems * (bf16 ? 2 : 4);
  void* buf[3] = {nullptr, nullptr, nullptr};
  cudaEvent_t start = nullptr, stop = nullptr;
  auto release = [&] {
    for (void* p : buf) cudaFree(p);
    if (start) cudaEventDestroy(start);
    if (stop) cudaEventDestroy(stop);
  };
  try {
    for (void*& p : buf) {
      check(cudaMalloc(&p, bytes), "cudaMalloc");
      check(cudaMemsetAsync(p, 0, bytes, ctx.stream), "cudaMemsetAsync");  // zeros: no denormals, no overflow
    }
    check(cudaEventCreate(&start), "cudaEventCreate");
    check(cudaEventCreate(&stop), "cudaEventCreate");
    const float one = 1.f, zero = 0.f;
    const cudaDataType t = bf16 ? CUDA_R_16BF : CUDA_R_32F;
    auto gemm = [&] {
      check(cublasGemmEx(ctx.blas, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, buf[0], t, n, buf[1], t, n, &zero, buf[2],
                         t, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            "cublasGemmEx");
    };
    gemm();
    ctx.sync();
    long calls = 0;
    double seconds = 0;
    for (int batch = 1; seconds < min_seconds || calls == 0; batch *= 2) {
      check(cudaEventRecord(start, ctx.stream), "cudaEventRecord");
      for (int i = 0; i < batch; ++i) gemm();
      check(cudaEventRecord(stop, ctx.stream), "cudaEventRecord");
      check(cudaEventSynchronize(stop), "cudaEventSynchronize");
      float ms = 0;
      check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
      calls += batch;
      seconds += double(ms) * 1e-3;
    }
    release();
    return 2.0 * double(n) * double(n) * double(n) * double(calls) / seconds;
  } catch (...) {
    release();
    throw;
  }
}

int device_count(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    if (why) *why = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(e);
    return 0;
  }
  if (n == 0 && why) *why = "no CUDA device is visible";
  return n;
}

int current_device() {
  int d = 0;
  check(cudaGetDevice(&d), "cudaGetDevice");
  return d;
}

Gpu open_gpu(int ordinal) {
  std::string why;
  const int n = device_count(&why);
  if (n == 0) throw std::runtime_error(why);
  if (ordinal < 0 || ordinal >= n)
    throw std::runtime_error("CUDA device " + std::to_string(ordinal) + " does not exist (" + std::to_string(n) +
                             " visible)");
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, ordinal), "cudaGetDeviceProperties");
  auto ctx = std::make_shared<Context>(ordinal);
  Gpu g;
  g.name = "cuda:" + std::to_string(ordinal) + " " + prop.name;
  g.f32 = std::make_shared<CudaOps<float>>(ctx, g.name);
  g.bf16_ops = std::make_shared<CudaOps<bf16>>(ctx, g.name);
  g.memory = std::make_shared<CudaMemory>(ctx);
  g.stream = ctx->stream;  // lives as long as the ops and memory above hold ctx
  return g;
}

}  // namespace pb::kernels::cuda
