// The rows of a mixture-of-experts MLP on the device (kernels/cpu/moe_rows.cc's
// ops); the per-element math is kernels/common/math.h's, the CPU kernels' own.
// Invariants: deterministic, no atomics: every output element has one
// writer; a token's choices are summed best first and dw's columns in
// block_sum's fixed tree (so equal to the CPU's index-order sum within
// rounding, not bitwise).
#include "kernels/common/math.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/ops.h"

namespace pb::kernels::cuda {

using namespace detail;  // load/store, add_into, indexing, reductions, check

namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ int64_t moe_row(const int32_t* choice, const int32_t* slot, size_t i, int rows) {
  return slot[i] < 0 ? -1 : int64_t(choice[i]) * rows + slot[i];
}

template <class T>
__global__ void scatter_kernel(T* xe, const T* x, const int32_t* choice, const int32_t* slot, int K, int C, int rows,
                               size_t n) {
  for (size_t i = grid_index(); i < n; i += grid_stride()) {  // i = (n * K + j) * C + c
    const size_t pair = i / size_t(C), c = i % size_t(C);
    const int64_t r = moe_row(choice, slot, pair, rows);
    if (r >= 0) xe[size_t(r) * C + c] = x[(pair / size_t(K)) * C + c];
  }
}

template <class T>
__global__ void combine_kernel(T* out, const T* y, const int32_t* choice, const int32_t* slot, const float* weight,
                               int K, int C, int rows, bool accumulate, size_t n) {
  for (size_t i = grid_index(); i < n; i += grid_stride()) {  // i = n * C + c
    const size_t tok = i / size_t(C), c = i % size_t(C);
    float acc = 0.0f;
    bool any = false;
    for (int j = 0; j < K; ++j) {
      const size_t pair = tok * K + j;
      const int64_t r = moe_row(choice, slot, pair, rows);
      if (r < 0) continue;
      any = true;
      const float yv = load(y[size_t(r) * C + c]);
      acc = weight ? math::weighted_add(acc, weight[pair], yv) : math::add(acc, yv);
    }
    if (!accumulate)
      out[i] = store<T>(acc);
    else if (any)
      add_into(out[i], acc);
  }
}

template <class T>
__global__ void combine_dy_kernel(T* dy, const T* dout, const int32_t* choice, const int32_t* slot,
                                  const float* weight, int K, int C, int rows, size_t n) {
  for (size_t i = grid_index(); i < n; i += grid_stride()) {  // i = (n * K + j) * C + c
    const size_t pair = i / size_t(C), c = i % size_t(C);
    const int64_t r = moe_row(choice, slot, pair, rows);
    if (r >= 0) dy[size_t(r) * C + c] = store<T>(weight[pair] * load(dout[(pair / size_t(K)) * C + c]));
  }
}

template <class T>
__global__ void combine_dw_kernel(float* dw, const T* dout, const T* y, const int32_t* choice, const int32_t* slot,
                                  int K, int C, int rows) {
  __shared__ float scratch[kThreads / 32];
  const size_t pair = blockIdx.x;
  const int64_t r = moe_row(choice, slot, pair, rows);
  if (r < 0) {  // the whole block agrees: no reduction to join
    if (threadIdx.x == 0) dw[pair] = 0.0f;
    return;
  }
  const T* d = dout + (pair / size_t(K)) * C;
  const T* yr = y + size_t(r) * C;
  float dot = 0.0f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) dot = math::weighted_add(dot, load(d[c]), load(yr[c]));
  dot = block_sum(dot, scratch);
  if (threadIdx.x == 0) dw[pair] = dot;
}

}  // namespace

template <class T>
void moe_scatter_rows(T* xe, const T* x, const int32_t* choice, const int32_t* slot, int N, int K, int C, int rows,
                      cudaStream_t stream) {
  const size_t n = size_t(N) * K * C;
  if (n == 0) return;
  scatter_kernel<<<blocks_for(n), kThreads, 0, stream>>>(xe, x, choice, slot, K, C, rows, n);
  check(cudaGetLastError(), "moe_scatter_rows launch");
}

template <class T>
void moe_combine(T* out, const T* y, const int32_t* choice, const int32_t* slot, const float* weight, int N, int K,
                 int C, int rows, bool accumulate, cudaStream_t stream) {
  const size_t n = size_t(N) * C;
  if (n == 0) return;
  combine_kernel<<<blocks_for(n), kThreads, 0, stream>>>(out, y, choice, slot, weight, K, C, rows, accumulate, n);
  check(cudaGetLastError(), "moe_combine launch");
}

template <class T>
void moe_combine_backward(T* dy, float* dw, const T* dout, const T* y, const int32_t* choice, const int32_t* slot,
                          const float* weight, int N, int K, int C, int rows, cudaStream_t stream) {
  const size_t pairs = size_t(N) * K, n = pairs * C;
  if (n == 0) return;
  combine_dy_kernel<<<blocks_for(n), kThreads, 0, stream>>>(dy, dout, choice, slot, weight, K, C, rows, n);
  check(cudaGetLastError(), "moe_combine_backward dy launch");
  combine_dw_kernel<<<unsigned(pairs), kThreads, 0, stream>>>(dw, dout, y, choice, slot, K, C, rows);
  check(cudaGetLastError(), "moe_combine_backward dw launch");
}

#define PB_INSTANTIATE(T)                                                                                          \
  template void moe_scatter_rows<T>(T*, const T*, const int32_t*, const int32_t*, int, int, int, int,             \
                                    cudaStream_t);                                                                 \
  template void moe_combine<T>(T*, const T*, const int32_t*, const int32_t*, const float*, int, int, int, int, bool, \
                               cudaStream_t);                                                                      \
  template void moe_combine_backward<T>(T*, float*, const T*, const T*, const int32_t*, const int32_t*,           \
                                        const float*, int, int, int, int, cudaStream_t);
PB_CUDA_FOR_EACH_DTYPE(PB_INSTANTIATE)
#undef PB_INSTANTIATE

}  // namespace pb::kernels::cuda
