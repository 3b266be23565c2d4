// Elementwise CUDA kernels in fp32: tanh-GELU (Hendrycks & Gimpel 2016; the
// same formula as kernels/cpu/gelu.cc), residual add, accumulate, scale.
// Invariant: each output element is written by exactly one thread of a
// grid-stride loop, so results do not depend on the launch shape.
#include "kernels/cuda/check.h"
#include "kernels/cuda/ops.h"

namespace pb::kernels::cuda {

using detail::blocks_for;
using detail::check;

namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;

__global__ void gelu_forward_kernel(float* out, const float* inp, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const float x = inp[i];
    out[i] = 0.5f * x * (1.0f + tanhf(kSqrt2OverPi * (x + kGeluCubic * x * x * x)));
  }
}

__global__ void gelu_backward_kernel(float* dinp, const float* inp, const float* dout, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const float x = inp[i];
    const float th = tanhf(kSqrt2OverPi * (x + kGeluCubic * x * x * x));
    const float local = 0.5f * (1.0f + th) +
                        0.5f * x * (1.0f - th * th) * kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * x * x);
    dinp[i] += local * dout[i];
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

}  // namespace pb::kernels::cuda
