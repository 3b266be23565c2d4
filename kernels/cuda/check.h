// Error checks of the CUDA kernels: a failed CUDA or cuBLAS call becomes a
// std::runtime_error naming the call, never an abort or a silent error.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace pb::kernels::cuda::detail {

inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

inline void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string(what) + ": " + cublasGetStatusString(s));
}

// Grid for a grid-stride loop over n elements with 256-thread blocks.
inline unsigned blocks_for(size_t n) {
  const size_t b = (n + 255) / 256;
  return unsigned(b < 4096 ? (b > 0 ? b : 1) : 4096);
}

}  // namespace pb::kernels::cuda::detail
