// Softmax + cross-entropy over V classes per row on the device, fused; the
// per-element math is kernels/common/math.h's (the CPU kernel's own).
// Invariants: one 256-thread block per row; the row max is subtracted before
// exp; the loss is (max - x[target]) + log(sum), formed from the logits; the
// target logit is read before the barrier that precedes any write of probs
// (which may alias logits). A target outside [0, V) is caught on the device
// (the first such row, by atomicMin on a flag: the only atomic, and its result
// does not depend on order), its row is left untouched, and the host throws
// std::out_of_range naming the row and target, as the CPU kernel does.
#include <climits>
#include <stdexcept>
#include <string>

#include "kernels/common/math.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/ops.h"

namespace pb::kernels::cuda {

using namespace detail;  // load/store, add_into, indexing, reductions, check

namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ bool target_ok(int32_t t, int V, int row, int* bad_row) {
  if (t >= 0 && t < V) return true;
  atomicMin(bad_row, row);
  return false;
}

template <class T>
__global__ void crossentropy_forward_kernel(float* losses, T* probs, const T* logits, const int32_t* targets,
                                            int V, int* bad_row) {
  __shared__ float scratch[kThreads / 32];
  const int row = blockIdx.x;
  const int32_t t = targets[row];
  if (!target_ok(t, V, row, bad_row)) return;  // the whole block returns: no barrier is split
  const T* x = logits + size_t(row) * V;
  const float xt = load(x[t]);
  float mx = math::neg_inf<float>();
  for (int i = threadIdx.x; i < V; i += blockDim.x) mx = math::max_a(mx, load(x[i]));
  mx = block_max(mx, scratch);
  float s = 0.0f;
  for (int i = threadIdx.x; i < V; i += blockDim.x) s += math::exp_a(load(x[i]) - mx);
  const float sum = block_sum(s, scratch);  // ends with a barrier: every read of x is done
  const float inv = 1.0f / sum;
  T* p = probs + size_t(row) * V;
  for (int i = threadIdx.x; i < V; i += blockDim.x) p[i] = store<T>(math::softmax_prob(load(x[i]), mx, inv));
  if (threadIdx.x == 0) losses[row] = math::crossentropy_loss(mx, xt, sum);
}

template <class T>
__global__ void crossentropy_backward_kernel(T* dlogits, const T* probs, const int32_t* targets, float dloss,
                                             int V, size_t n, int* bad_row) {
  for (size_t i = grid_index(); i < n; i += grid_stride()) {
    const int row = int(i / size_t(V)), c = int(i % size_t(V));
    const int32_t t = targets[row];
    if (!target_ok(t, V, row, bad_row)) continue;
    add_into(dlogits[i], math::crossentropy_grad(load(probs[i]), c == t, dloss));
  }
}

// A device int holding INT_MAX, for the first bad row.
int* new_flag(cudaStream_t stream) {
  int* flag = nullptr;
  check(cudaMallocAsync(reinterpret_cast<void**>(&flag), sizeof(int), stream), "crossentropy cudaMallocAsync");
  const int init = INT_MAX;
  const cudaError_t e = cudaMemcpyAsync(flag, &init, sizeof(int), cudaMemcpyHostToDevice, stream);
  if (e != cudaSuccess) {
    cudaFreeAsync(flag, stream);
    check(e, "crossentropy flag init");
  }
  return flag;
}

// Reads the flag back (synchronizing the stream), frees it and throws for a bad target.
void finish(int* flag, cudaError_t launched, const int32_t* targets, int V, cudaStream_t stream, const char* what) {
  int bad = INT_MAX, target = 0;
  cudaError_t e = launched;
  if (e == cudaSuccess) e = cudaMemcpyAsync(&bad, flag, sizeof(int), cudaMemcpyDeviceToHost, stream);
  if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
  if (e == cudaSuccess && bad != INT_MAX)
    e = cudaMemcpy(&target, targets + bad, sizeof(int32_t), cudaMemcpyDeviceToHost);
  check(cudaFreeAsync(flag, stream), "crossentropy cudaFreeAsync");
  check(e, what);
  if (bad != INT_MAX)
    throw std::out_of_range("crossentropy: target " + std::to_string(target) + " of row " + std::to_string(bad) +
                            " is outside [0, V=" + std::to_string(V) + ")");
}

}  // namespace

template <class T>
void crossentropy_forward(float* losses, T* probs, const T* logits, const int32_t* targets, int N, int V,
                          cudaStream_t stream) {
  if (N == 0) return;
  int* flag = new_flag(stream);
  crossentropy_forward_kernel<<<N, kThreads, 0, stream>>>(losses, probs, logits, targets, V, flag);
  finish(flag, cudaGetLastError(), targets, V, stream, "crossentropy_forward");
}

template <class T>
void crossentropy_backward(T* dlogits, const T* probs, const int32_t* targets, double dloss, int N, int V,
                           cudaStream_t stream) {
  const size_t n = size_t(N) * V;
  if (n == 0) return;
  int* flag = new_flag(stream);
  crossentropy_backward_kernel<<<blocks_for(n), 256, 0, stream>>>(dlogits, probs, targets, float(dloss), V, n,
                                                                 flag);
  finish(flag, cudaGetLastError(), targets, V, stream, "crossentropy_backward");
}

#define PB_INSTANTIATE(T)                                                                                  \
  template void crossentropy_forward<T>(float*, T*, const T*, const int32_t*, int, int, cudaStream_t);     \
  template void crossentropy_backward<T>(T*, const T*, const int32_t*, double, int, int, cudaStream_t);
PB_CUDA_FOR_EACH_DTYPE(PB_INSTANTIATE)
#undef PB_INSTANTIATE

}  // namespace pb::kernels::cuda
