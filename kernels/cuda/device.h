// Device-side helpers of the CUDA kernels (included by .cu files only): the
// storage types' load into the fp32 compute type and store back (bf16 rounds
// to nearest even, as harness/dtype.h's bf16 does), the one accumulation rule
// of every backward output, grid-stride indexing and block reductions.
// Invariant: add_into() is the only way a backward kernel touches its output
// (d = T(float(d) + contribution), rounded once), as in kernels/cpu/numeric.h;
// block_sum/block_max reduce in a fixed tree, so a result does not depend on
// timing (it does on the block size, which each kernel fixes).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>

#include "kernels/common/math.h"

namespace pb::kernels::cuda::detail {

__device__ __forceinline__ float load(float x) { return x; }
__device__ __forceinline__ float load(__nv_bfloat16 x) { return __bfloat162float(x); }

template <class T>
__device__ __forceinline__ T store(float x);
template <>
__device__ __forceinline__ float store<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 store<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

template <class T>
__device__ __forceinline__ void add_into(T& d, float c) {
  d = store<T>(load(d) + c);
}

// First index and stride of a grid-stride loop.
__device__ __forceinline__ size_t grid_index() { return blockIdx.x * size_t(blockDim.x) + threadIdx.x; }
__device__ __forceinline__ size_t grid_stride() { return size_t(gridDim.x) * blockDim.x; }

// Sum (or max) of v over the block; every thread gets the result. `scratch`
// holds blockDim.x / 32 floats of shared memory; blockDim.x is a multiple of
// 32 and at most 1024. Each warp combines by butterfly shuffles, then every
// thread combines the warps' results in warp order; ends with a barrier, so
// scratch can be reused.
struct Sum {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct Max {
  __device__ float operator()(float a, float b) const { return math::max_a(a, b); }
};
template <class Op>
__device__ __forceinline__ float block_reduce(float v, float* scratch, Op op) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float t = scratch[0];
  for (int w = 1; w < warps; ++w) t = op(t, scratch[w]);
  __syncthreads();
  return t;
}
__device__ __forceinline__ float block_sum(float v, float* scratch) { return block_reduce(v, scratch, Sum{}); }
__device__ __forceinline__ float block_max(float v, float* scratch) { return block_reduce(v, scratch, Max{}); }

}  // namespace pb::kernels::cuda::detail

// Explicit instantiation for the two device storage types: FN(T) once each.
#define PB_CUDA_FOR_EACH_DTYPE(FN) FN(float) FN(__nv_bfloat16)
