// Elementwise CUDA kernels in fp32: tanh-GELU and AdamW (their per-element
// math is kernels/common/math.h's, the CPU kernels' own), residual add,
// accumulate, scale.
// Invariant: each output element is written by exactly one thread of a
// grid-stride loop, so results do not depend on the launch shape.
#include <cmath>
#include <stdexcept>

#include "kernels/common/math.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/ops.h"

namespace pb::kernels::cuda {

using detail::blocks_for;
using detail::check;

namespace {

__global__ void gelu_forward_kernel(float* out, const float* inp, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    out[i] = math::gelu(inp[i]);
}

__global__ void gelu_backward_kernel(float* dinp, const float* inp, const float* dout, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    dinp[i] += math::gelu_grad(inp[i]) * dout[i];
}

__global__ void adamw_kernel(float* master, float* param_out, const float* grad, float* m, float* v, size_t n,
                             math::AdamWCoefs<float> c, bool decay) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const float p = math::adamw_update(master[i], m[i], v[i], grad[i], c, decay);
    master[i] = p;
    if (param_out) param_out[i] = p;
  }
}

__global__ void residual_kernel(float* out, const float* a, const float* b, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    out[i] = a[i] + b[i];
}

__global__ void accumulate_kernel(float* dst, const float* src, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    dst[i] += src[i];
}

__global__ void scale_kernel(float* x, float s, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    x[i] *= s;
}

}  // namespace

void gelu_forward(float* out, const float* inp, size_t N, cudaStream_t stream) {
  if (N == 0) return;
  gelu_forward_kernel<<<blocks_for(N), 256, 0, stream>>>(out, inp, N);
  check(cudaGetLastError(), "gelu_forward launch");
}

void gelu_backward(float* dinp, const float* inp, const float* dout, size_t N,
                   cudaStream_t stream) {
  if (N == 0) return;
  gelu_backward_kernel<<<blocks_for(N), 256, 0, stream>>>(dinp, inp, dout, N);
  check(cudaGetLastError(), "gelu_backward launch");
}

void residual_forward(float* out, const float* a, const float* b, size_t N, cudaStream_t stream) {
  if (N == 0) return;
  residual_kernel<<<blocks_for(N), 256, 0, stream>>>(out, a, b, N);
  check(cudaGetLastError(), "residual_forward launch");
}

void accumulate(float* dst, const float* src, size_t N, cudaStream_t stream) {
  if (N == 0) return;
  accumulate_kernel<<<blocks_for(N), 256, 0, stream>>>(dst, src, N);
  check(cudaGetLastError(), "accumulate launch");
}

void scale(float* x, double s, size_t N, cudaStream_t stream) {
  if (N == 0) return;
  scale_kernel<<<blocks_for(N), 256, 0, stream>>>(x, static_cast<float>(s), N);
  check(cudaGetLastError(), "scale launch");
}

void adamw_step(float* master, float* param_out, const float* grad, float* m, float* v, size_t n,
                double lr, double beta1, double beta2, double eps, double weight_decay, long step,
                double grad_scale, bool decay, cudaStream_t stream) {
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

}  // namespace pb::kernels::cuda
