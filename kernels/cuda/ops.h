// The CUDA counterparts of kernels/cpu/ops.h (fp32 for now): same names, same
// argument order and the same contract (outputs first; backward outputs
// accumulate; a null backward output is skipped), plus the stream to launch on
// and, for GEMM, the caller's cuBLAS handle (bound to that stream per call).
// Invariant: every pointer is device memory; calls are asynchronous on
// `stream` and throw std::runtime_error if a launch or cuBLAS call fails.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>

namespace pb::kernels::cuda {

// ---- elementwise -------------------------------------------------------------
void gelu_forward(float* out, const float* inp, size_t N, cudaStream_t stream);
void gelu_backward(float* dinp, const float* inp, const float* dout, size_t N,
                   cudaStream_t stream);
void residual_forward(float* out, const float* a, const float* b, size_t N, cudaStream_t stream);
void accumulate(float* dst, const float* src, size_t N, cudaStream_t stream);
void scale(float* x, double s, size_t N, cudaStream_t stream);
// AdamW on fp32 master, moments and gradient (kernels/cpu's adamw_step<float,
// float> with AdamWHyper's fields spelled out; param_out may be null or alias
// master).
void adamw_step(float* master, float* param_out, const float* grad, float* m, float* v, size_t n,
                double lr, double beta1, double beta2, double eps, double weight_decay, long step,
                double grad_scale, bool decay, cudaStream_t stream);

// ---- matmul: out (N,OC) = inp (N,C) @ weight (OC,C)^T + bias (OC) -----------
// Row-major buffers as on the CPU; cuBLAS runs in plain FP32 math (no TF32).
void matmul_forward(cublasHandle_t handle, float* out, const float* inp, const float* weight,
                    const float* bias, int N, int C, int OC, cudaStream_t stream);
// dinp (N,C) += dout @ weight; dweight (OC,C) += dout^T @ inp; dbias (OC) += colsum(dout).
void matmul_backward(cublasHandle_t handle, float* dinp, float* dweight, float* dbias,
                     const float* dout, const float* inp, const float* weight, int N, int C,
                     int OC, cudaStream_t stream);

}  // namespace pb::kernels::cuda
