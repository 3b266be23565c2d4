// Elementwise CUDA kernels: tanh-GELU, residual add, accumulate, scale, AdamW
// (their per-element math is kernels/common/math.h's, the CPU kernels' own)
// and the sum of squares of global-norm clipping.
// Invariant: each output element is written by exactly one thread of a
// grid-stride loop, so results do not depend on the launch shape;
// sum_squares reduces in a fixed order (per block, then over blocks in order).
#include <cmath>
#include <stdexcept>
#include <vector>

#include "kernels/common/math.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/ops.h"

namespace pb::kernels::cuda {

using namespace detail;  // load/store, add_into, indexing, reductions, check

namespace {

template <class T>
__global__ void gelu_forward_kernel(T* out, const T* inp, size_t n) {
  for (size_t i = grid_index(); i < n; i += grid_stride()) out[i] = store<T>(math::gelu(load(inp[i])));
}

template <class T>
__global__ void gelu_backward_kernel(T* dinp, const T* inp, const T* dout, size_t n) {
  for (size_t i = grid_index(); i < n; i += grid_stride())
    add_into(dinp[i], math::gelu_grad(load(inp[i])) * load(dout[i]));
}

template <class T>
__global__ void adamw_kernel(float* master, T* param_out, const T* grad, float* m, float* v, size_t n,
                             math::AdamWCoefs<float> c, bool decay) {
  for (size_t i = grid_index(); i < n; i += grid_stride()) {
    const float p = math::adamw_update(master[i], m[i], v[i], load(grad[i]), c, decay);
    master[i] = p;
    if (param_out) param_out[i] = store<T>(p);
  }
}

template <class T>
__global__ void residual_kernel(T* out, const T* a, const T* b, size_t n) {
  for (size_t i = grid_index(); i < n; i += grid_stride()) out[i] = store<T>(math::add(load(a[i]), load(b[i])));
}

template <class T>
__global__ void accumulate_kernel(T* dst, const T* src, size_t n) {
  for (size_t i = grid_index(); i < n; i += grid_stride()) add_into(dst[i], load(src[i]));
}

template <class T, class S>
__global__ void accumulate_rows_kernel(T* dst, size_t dst_stride, const S* src, size_t src_stride, size_t cols,
                                       size_t n) {
  for (size_t i = grid_index(); i < n; i += grid_stride()) {
    const size_t r = i / cols, c = i % cols;
    add_into(dst[r * dst_stride + c], load(src[r * src_stride + c]));
  }
}

template <class T>
__global__ void scale_kernel(T* x, float s, size_t n) {
  for (size_t i = grid_index(); i < n; i += grid_stride()) x[i] = store<T>(load(x[i]) * s);
}

// One partial per block: each thread sums its grid-stride elements in double,
// then thread 0 sums the block's threads in index order.
template <class T>
__global__ void sum_squares_kernel(double* partial, const T* g, size_t n) {
  __shared__ double part[256];
  double s = 0;
  for (size_t i = grid_index(); i < n; i += grid_stride()) {
    const double x = double(load(g[i]));
    s += x * x;
  }
  part[threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    double t = 0;
    for (unsigned j = 0; j < blockDim.x; ++j) t += part[j];
    partial[blockIdx.x] = t;
  }
}

}  // namespace

template <class T>
void gelu_forward(T* out, const T* inp, size_t N, cudaStream_t stream) {
  if (N == 0) return;
  gelu_forward_kernel<<<blocks_for(N), 256, 0, stream>>>(out, inp, N);
  check(cudaGetLastError(), "gelu_forward launch");
}

template <class T>
void gelu_backward(T* dinp, const T* inp, const T* dout, size_t N, cudaStream_t stream) {
  if (N == 0) return;
  gelu_backward_kernel<<<blocks_for(N), 256, 0, stream>>>(dinp, inp, dout, N);
  check(cudaGetLastError(), "gelu_backward launch");
}

template <class T>
void residual_forward(T* out, const T* a, const T* b, size_t N, cudaStream_t stream) {
  if (N == 0) return;
  residual_kernel<<<blocks_for(N), 256, 0, stream>>>(out, a, b, N);
  check(cudaGetLastError(), "residual_forward launch");
}

template <class T>
void accumulate(T* dst, const T* src, size_t N, cudaStream_t stream) {
  if (N == 0) return;
  accumulate_kernel<<<blocks_for(N), 256, 0, stream>>>(dst, src, N);
  check(cudaGetLastError(), "accumulate launch");
}

__global__ void fill_kernel(float* x, float value, size_t n) {
  for (size_t i = grid_index(); i < n; i += grid_stride()) x[i] = value;
}

template <class T, class S>
void accumulate_rows(T* dst, size_t dst_stride, const S* src, size_t src_stride, size_t cols, size_t rows,
                     cudaStream_t stream) {
  const size_t n = cols * rows;
  if (n == 0) return;
  accumulate_rows_kernel<<<blocks_for(n), 256, 0, stream>>>(dst, dst_stride, src, src_stride, cols, n);
  check(cudaGetLastError(), "accumulate_rows launch");
}

void fill(float* x, float value, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  fill_kernel<<<blocks_for(n), 256, 0, stream>>>(x, value, n);
  check(cudaGetLastError(), "fill launch");
}

template <class T>
void scale(T* x, double s, size_t N, cudaStream_t stream) {
  if (N == 0) return;
  scale_kernel<<<blocks_for(N), 256, 0, stream>>>(x, static_cast<float>(s), N);
  check(cudaGetLastError(), "scale launch");
}

template <class T>
void adamw_step(float* master, T* param_out, const T* grad, float* m, float* v, size_t n, double lr,
                double beta1, double beta2, double eps, double weight_decay, long step, double grad_scale,
                bool decay, cudaStream_t stream) {
  if (n == 0) return;
  if (step < 1) throw std::invalid_argument("adamw_step: step must be >= 1 (it is 1-based)");
  math::AdamWCoefs<float> c;  // the per-step scalars in double, cast once, as on the CPU
  c.keep = float(decay ? 1.0 - lr * weight_decay : 1.0);
  c.grad_scale = float(grad_scale);
  c.w1 = float(1.0 - beta1);
  c.b2 = float(beta2);
  c.w2 = float(1.0 - beta2);
  c.step_size = float(lr / (1.0 - std::pow(beta1, double(step))));
  c.bc2_sqrt = float(std::sqrt(1.0 - std::pow(beta2, double(step))));
  c.eps = float(eps);
  adamw_kernel<<<blocks_for(n), 256, 0, stream>>>(master, param_out, grad, m, v, n, c, decay);
  check(cudaGetLastError(), "adamw_step launch");
}

template <class T>
double sum_squares(const T* g, size_t n, cudaStream_t stream) {
  if (n == 0) return 0;
  const unsigned blocks = blocks_for(n);
  double* partial = nullptr;
  check(cudaMallocAsync(reinterpret_cast<void**>(&partial), blocks * sizeof(double), stream),
        "sum_squares cudaMallocAsync");
  sum_squares_kernel<<<blocks, 256, 0, stream>>>(partial, g, n);
  const cudaError_t launched = cudaGetLastError();
  std::vector<double> host(blocks);
  const cudaError_t copied =
      launched == cudaSuccess
          ? cudaMemcpyAsync(host.data(), partial, blocks * sizeof(double), cudaMemcpyDeviceToHost, stream)
          : launched;
  check(cudaFreeAsync(partial, stream), "sum_squares cudaFreeAsync");
  check(launched, "sum_squares launch");
  check(copied, "sum_squares copy");
  check(cudaStreamSynchronize(stream), "sum_squares synchronize");
  double s = 0;
  for (double p : host) s += p;
  return s;
}

#define PB_INSTANTIATE(T)                                                                                     \
  template void gelu_forward<T>(T*, const T*, size_t, cudaStream_t);                                          \
  template void gelu_backward<T>(T*, const T*, const T*, size_t, cudaStream_t);                               \
  template void residual_forward<T>(T*, const T*, const T*, size_t, cudaStream_t);                            \
  template void accumulate<T>(T*, const T*, size_t, cudaStream_t);                                            \
  template void accumulate_rows<T, T>(T*, size_t, const T*, size_t, size_t, size_t, cudaStream_t);            \
  template void scale<T>(T*, double, size_t, cudaStream_t);                                                   \
  template void adamw_step<T>(float*, T*, const T*, float*, float*, size_t, double, double, double, double,   \
                              double, long, double, bool, cudaStream_t);                                      \
  template double sum_squares<T>(const T*, size_t, cudaStream_t);
PB_CUDA_FOR_EACH_DTYPE(PB_INSTANTIATE)
#undef PB_INSTANTIATE
template void accumulate_rows<__nv_bfloat16, float>(__nv_bfloat16*, size_t, const float*, size_t, size_t, size_t,
                                                    cudaStream_t);

}  // namespace pb::kernels::cuda
