// Linear layer on cuBLAS (fp32). Row-major X (R,K) is column-major X^T, so
//   out^T (OC,N)   = W (OC,C)      . inp^T (C,N):  sgemm(T, N, OC, N, C)
//   dinp^T (C,N)  += W^T (C,OC)    . dout^T (OC,N): sgemm(N, N, C, N, OC)
//   dweight^T (C,OC) += inp^T (C,N) . dout (N,OC):   sgemm(N, T, C, OC, N)
// Invariants: the handle is bound to the caller's stream on every call and
// forced to plain FP32 math (no TF32), so results are comparable with the CPU
// kernels; dbias sums each column over rows in row order (one thread per
// column), which is deterministic.
#include "kernels/cuda/check.h"
#include "kernels/cuda/ops.h"

namespace pb::kernels::cuda {

using detail::blocks_for;
using detail::check;

namespace {

__global__ void add_bias_kernel(float* out, const float* bias, size_t n, int OC) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    out[i] += bias[i % size_t(OC)];
}

__global__ void bias_backward_kernel(float* dbias, const float* dout, int N, int OC) {
  const int o = blockIdx.x * blockDim.x + threadIdx.x;
  if (o >= OC) return;
  float s = 0.0f;
  for (int n = 0; n < N; ++n) s += dout[size_t(n) * OC + o];
  dbias[o] += s;
}

void bind(cublasHandle_t h, cudaStream_t stream) {
  check(cublasSetStream(h, stream), "cublasSetStream");
  check(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
}

}  // namespace

void matmul_forward(cublasHandle_t handle, float* out, const float* inp, const float* weight,
                    const float* bias, int N, int C, int OC, cudaStream_t stream) {
  bind(handle, stream);
  const float one = 1.0f, zero = 0.0f;
  check(cublasSgemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, &one, weight, C, inp, C, &zero,
                    out, OC),
        "matmul_forward sgemm");
  if (bias) {
    const size_t n = size_t(N) * OC;
    add_bias_kernel<<<blocks_for(n), 256, 0, stream>>>(out, bias, n, OC);
    check(cudaGetLastError(), "matmul_forward bias launch");
  }
}

void matmul_backward(cublasHandle_t handle, float* dinp, float* dweight, float* dbias,
                     const float* dout, const float* inp, const float* weight, int N, int C,
                     int OC, cudaStream_t stream) {
  bind(handle, stream);
  const float one = 1.0f;
  if (dinp)
    check(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, &one, weight, C, dout, OC, &one,
                      dinp, C),
          "matmul_backward dinp sgemm");
  if (dweight)
    check(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, &one, inp, C, dout, OC, &one,
                      dweight, C),
          "matmul_backward dweight sgemm");
  if (dbias) {
    bias_backward_kernel<<<(OC + 255) / 256, 256, 0, stream>>>(dbias, dout, N, OC);
    check(cudaGetLastError(), "matmul_backward dbias launch");
  }
}

}  // namespace pb::kernels::cuda
