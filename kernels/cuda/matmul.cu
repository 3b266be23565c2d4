// Linear layer on cuBLAS GemmEx (fp32 or bf16 storage, fp32 accumulation).
// Row-major X (R,K) is column-major X^T, so
//   out^T (OC,N)   = W (OC,C)      . inp^T (C,N):  gemm(T, N, OC, N, C)
//   dinp^T (C,N)  += W^T (C,OC)    . dout^T (OC,N): gemm(N, N, C, N, OC)
//   dweight^T (C,OC) += inp^T (C,N) . dout (N,OC):   gemm(N, T, C, OC, N)
// Invariants: the handle is bound to the caller's stream on every call and
// computes in CUBLAS_COMPUTE_32F (plain FP32, no TF32), so results are
// comparable with the CPU kernels; a bf16 output is rounded once from fp32
// by cuBLAS (beta = 1 onto what the output holds: the backward's gradient,
// the forward's bias broadcast over the rows, so the bias is added to the
// fp32 product before rounding, as the CPU's bf16 path does, with no fp32
// staging of the product); dbias sums each column over rows in row order (one
// thread per column), which is deterministic.
#include <type_traits>

#include "kernels/cuda/check.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/ops.h"

namespace pb::kernels::cuda {

using namespace detail;  // load/store, add_into, indexing, reductions, check

namespace {

template <class T>
constexpr cudaDataType_t data_type() {
  return std::is_same_v<T, float> ? CUDA_R_32F : CUDA_R_16BF;
}

template <class T>
__global__ void add_bias_kernel(T* out, const T* bias, size_t n, int OC) {
  for (size_t i = grid_index(); i < n; i += grid_stride()) add_into(out[i], load(bias[i % size_t(OC)]));
}

// out (N, OC) = the bias in every row (a bf16 forward's C operand).
__global__ void broadcast_bias_kernel(__nv_bfloat16* out, const __nv_bfloat16* bias, size_t n, int OC) {
  for (size_t i = grid_index(); i < n; i += grid_stride()) out[i] = bias[i % size_t(OC)];
}

template <class T>
__global__ void bias_backward_kernel(T* dbias, const T* dout, int N, int OC) {
  const int o = blockIdx.x * blockDim.x + threadIdx.x;
  if (o >= OC) return;
  float s = 0.0f;
  for (int n = 0; n < N; ++n) s += load(dout[size_t(n) * OC + o]);
  add_into(dbias[o], s);
}

void bind(cublasHandle_t h, cudaStream_t stream) {
  check(cublasSetStream(h, stream), "cublasSetStream");
  check(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
}

// C (m,n) = A op . B op + beta C, column-major, fp32 scalars and accumulation.
template <class T>
void gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const T* A, int lda,
          const T* B, int ldb, float beta, T* C, int ldc, const char* what) {
  const float one = 1.0f;
  check(cublasGemmEx(h, ta, tb, m, n, k, &one, A, data_type<T>(), lda, B, data_type<T>(), ldb, &beta, C,
                     data_type<T>(), ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        what);
}

}  // namespace

template <class T>
void matmul_forward(cublasHandle_t handle, T* out, const T* inp, const T* weight, const T* bias, int N, int C,
                    int OC, cudaStream_t stream) {
  if (N == 0 || OC == 0) return;
  bind(handle, stream);
  const size_t n = size_t(N) * OC;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {  // out = bf16(product + bias), rounded once by cuBLAS
    if (bias) {
      broadcast_bias_kernel<<<blocks_for(n), 256, 0, stream>>>(out, bias, n, OC);
      check(cudaGetLastError(), "matmul_forward bias broadcast launch");
    }
    gemm<T>(handle, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, weight, C, inp, C, bias ? 1.0f : 0.0f, out, OC,
            "matmul_forward gemm");
    return;
  }
  gemm<T>(handle, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, weight, C, inp, C, 0.0f, out, OC, "matmul_forward gemm");
  if (bias) {
    add_bias_kernel<<<blocks_for(n), 256, 0, stream>>>(out, bias, n, OC);
    check(cudaGetLastError(), "matmul_forward bias launch");
  }
}

template <class T>
void matmul_backward(cublasHandle_t handle, T* dinp, T* dweight, T* dbias, const T* dout, const T* inp,
                     const T* weight, int N, int C, int OC, cudaStream_t stream) {
  if (N == 0 || OC == 0 || C == 0) return;
  bind(handle, stream);
  if (dinp)
    gemm<T>(handle, CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, weight, C, dout, OC, 1.0f, dinp, C,
            "matmul_backward dinp gemm");
  if (dweight)
    gemm<T>(handle, CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, inp, C, dout, OC, 1.0f, dweight, C,
            "matmul_backward dweight gemm");
  if (dbias) {
    bias_backward_kernel<<<(OC + 255) / 256, 256, 0, stream>>>(dbias, dout, N, OC);
    check(cudaGetLastError(), "matmul_backward dbias launch");
  }
}

#define PB_INSTANTIATE(T)                                                                                  \
  template void matmul_forward<T>(cublasHandle_t, T*, const T*, const T*, const T*, int, int, int,         \
                                  cudaStream_t);                                                           \
  template void matmul_backward<T>(cublasHandle_t, T*, T*, T*, const T*, const T*, const T*, int, int, int, \
                                   cudaStream_t);
PB_CUDA_FOR_EACH_DTYPE(PB_INSTANTIATE)
#undef PB_INSTANTIATE

}  // namespace pb::kernels::cuda
