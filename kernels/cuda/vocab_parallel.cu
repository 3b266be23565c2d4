// Rows of a table and a vocabulary shard's softmax cross-entropy on the
// device (kernels/cpu/vocab_parallel.cc's ops); the per-element math is
// kernels/common/math.h's, the CPU kernels' own.
// Invariants: deterministic, no atomics. add_rows_backward adds every
// destination row once: a bias by one thread per column over the rows in
// order; indexed rows after a stable CUB radix sort of (index, row), one
// thread per (run of equal indices, column) summing its run in row order (the
// CPU's stable_sort order). The row statistics: one 256-thread block per row.
// vocab_softmax_loss may write probs over logits: each element reads its own
// logit before writing it, and the row's statistics are inputs.
#include <cub/device/device_radix_sort.cuh>

#include "kernels/common/math.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/ops.h"

namespace pb::kernels::cuda {

using namespace detail;  // load/store, add_into, indexing, reductions, check

namespace {

constexpr int kThreads = 256;

template <class T>
__global__ void embedding_lookup_kernel(T* out, const int32_t* idx, const T* table, int C, int64_t first, int rows,
                                        size_t n) {
  for (size_t i = grid_index(); i < n; i += grid_stride()) {
    const size_t row = i / size_t(C), c = i % size_t(C);
    const int64_t r = int64_t(idx[row]) - first;
    out[i] = r >= 0 && r < rows ? table[size_t(r) * C + c] : store<T>(0.0f);
  }
}

template <class T>
__global__ void add_rows_kernel(T* x, const T* table, const int32_t* idx, int C, size_t n) {
  for (size_t i = grid_index(); i < n; i += grid_stride()) {
    const size_t row = i / size_t(C), c = i % size_t(C);
    const size_t r = idx ? size_t(idx[row]) : 0;
    x[i] = store<T>(math::add(load(x[i]), load(table[r * C + c])));
  }
}

template <class T>
__global__ void column_sums_kernel(T* dtable, const T* dout, int N, int C) {
  for (size_t c = grid_index(); c < size_t(C); c += grid_stride()) {
    float s = 0.0f;
    for (int n = 0; n < N; ++n) s += load(dout[size_t(n) * C + c]);
    add_into(dtable[c], s);
  }
}

// idx / row: the indices sorted stably and the rows they came from.
template <class T>
__global__ void sorted_rows_kernel(T* dtable, const T* dout, const int32_t* idx, const int32_t* row, int N, int C,
                                   int64_t first, int rows) {
  const size_t n = size_t(N) * C;
  for (size_t i = grid_index(); i < n; i += grid_stride()) {
    const int r = int(i / size_t(C)), c = int(i % size_t(C));
    if (r > 0 && idx[r - 1] == idx[r]) continue;  // not the start of a run
    const int64_t dst = int64_t(idx[r]) - first;
    if (dst < 0 || dst >= rows) continue;  // another shard's row
    float s = 0.0f;
    for (int j = r; j < N && idx[j] == idx[r]; ++j) s += load(dout[size_t(row[j]) * C + c]);
    add_into(dtable[size_t(dst) * C + c], s);
  }
}

__global__ void iota_kernel(int32_t* x, int n) {
  for (size_t i = grid_index(); i < size_t(n); i += grid_stride()) x[i] = int32_t(i);
}

template <class T>
__global__ void logit_max_kernel(float* mx, const T* logits, int Vr, int valid) {
  __shared__ float scratch[kThreads / 32];
  const T* x = logits + size_t(blockIdx.x) * Vr;
  float m = math::neg_inf<float>();
  for (int v = threadIdx.x; v < valid; v += blockDim.x) m = math::max_a(m, load(x[v]));
  m = block_max(m, scratch);
  if (threadIdx.x == 0) mx[blockIdx.x] = m;
}

template <class T>
__global__ void sum_exp_kernel(float* sum, float* target_logit, const T* logits, const float* mx,
                               const int32_t* targets, int64_t first, int Vr, int valid) {
  __shared__ float scratch[kThreads / 32];
  const int row = blockIdx.x;
  const T* x = logits + size_t(row) * Vr;
  const float m = mx[row];
  float s = 0.0f;
  for (int v = threadIdx.x; v < valid; v += blockDim.x) s += math::exp_a(load(x[v]) - m);
  s = block_sum(s, scratch);
  if (threadIdx.x == 0) {
    sum[row] = s;
    const int64_t t = int64_t(targets[row]) - first;
    target_logit[row] = t >= 0 && t < valid ? load(x[t]) : 0.0f;
  }
}

template <class T>
__global__ void softmax_loss_kernel(float* losses, T* probs, const T* logits, const float* mx, const float* sum,
                                    const float* target_logit, int Vr, int valid, size_t n) {
  for (size_t i = grid_index(); i < n; i += grid_stride()) {
    const size_t row = i / size_t(Vr);
    const int v = int(i % size_t(Vr));
    const float inv = 1.0f / sum[row];
    probs[i] = store<T>(v < valid ? math::softmax_prob(load(logits[i]), mx[row], inv) : 0.0f);
    if (v == 0) losses[row] = math::crossentropy_loss(mx[row], target_logit[row], sum[row]);
  }
}

template <class T>
__global__ void vocab_backward_kernel(T* dlogits, const T* probs, const int32_t* targets, int64_t first, float dloss,
                                      int Vr, int valid, size_t n) {
  for (size_t i = grid_index(); i < n; i += grid_stride()) {
    const size_t row = i / size_t(Vr);
    const int v = int(i % size_t(Vr));
    if (v >= valid) continue;
    add_into(dlogits[i], math::crossentropy_grad(load(probs[i]), int64_t(v) == int64_t(targets[row]) - first, dloss));
  }
}

}  // namespace

template <class T>
void embedding_lookup(T* out, const int32_t* idx, const T* table, int N, int C, int64_t first, int rows,
                      cudaStream_t stream) {
  const size_t n = size_t(N) * C;
  if (n == 0) return;
  embedding_lookup_kernel<<<blocks_for(n), 256, 0, stream>>>(out, idx, table, C, first, rows, n);
  check(cudaGetLastError(), "embedding_lookup launch");
}

template <class T>
void add_rows(T* x, const T* table, const int32_t* idx, int N, int C, cudaStream_t stream) {
  const size_t n = size_t(N) * C;
  if (n == 0) return;
  add_rows_kernel<<<blocks_for(n), 256, 0, stream>>>(x, table, idx, C, n);
  check(cudaGetLastError(), "add_rows launch");
}

template <class T>
void add_rows_backward(T* dtable, const T* dout, const int32_t* idx, int N, int C, int64_t first, int rows,
                       cudaStream_t stream) {
  if (N == 0 || C == 0) return;
  if (!idx) {
    column_sums_kernel<<<blocks_for(size_t(C)), 256, 0, stream>>>(dtable, dout, N, C);
    check(cudaGetLastError(), "add_rows_backward launch");
    return;
  }
  // Scratch: row numbers, sorted indices, sorted rows, CUB's temporary storage.
  size_t temp_bytes = 0;
  check(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, static_cast<const int32_t*>(nullptr),
                                        static_cast<int32_t*>(nullptr), static_cast<const int32_t*>(nullptr),
                                        static_cast<int32_t*>(nullptr), N, 0, 32, stream),
        "add_rows_backward sort size");
  const size_t ints = 3 * size_t(N);
  char* scratch = nullptr;
  check(cudaMallocAsync(reinterpret_cast<void**>(&scratch), ints * sizeof(int32_t) + temp_bytes, stream),
        "add_rows_backward cudaMallocAsync");
  int32_t* row = reinterpret_cast<int32_t*>(scratch);
  int32_t* idx_sorted = row + N;
  int32_t* row_sorted = idx_sorted + N;
  void* temp = scratch + ints * sizeof(int32_t);
  iota_kernel<<<blocks_for(size_t(N)), 256, 0, stream>>>(row, N);
  cudaError_t e = cudaGetLastError();
  // LSD radix sort is stable: equal indices keep their row order.
  if (e == cudaSuccess)
    e = cub::DeviceRadixSort::SortPairs(temp, temp_bytes, idx, idx_sorted, row, row_sorted, N, 0, 32, stream);
  if (e == cudaSuccess) {
    sorted_rows_kernel<<<blocks_for(size_t(N) * C), 256, 0, stream>>>(dtable, dout, idx_sorted, row_sorted, N, C,
                                                                      first, rows);
    e = cudaGetLastError();
  }
  check(cudaFreeAsync(scratch, stream), "add_rows_backward cudaFreeAsync");
  check(e, "add_rows_backward");
}

template <class T>
void vocab_logit_max(float* mx, const T* logits, int N, int Vr, int valid, cudaStream_t stream) {
  if (N == 0) return;
  logit_max_kernel<<<N, kThreads, 0, stream>>>(mx, logits, Vr, valid);
  check(cudaGetLastError(), "vocab_logit_max launch");
}

template <class T>
void vocab_sum_exp(float* sum, float* target_logit, const T* logits, const float* mx, const int32_t* targets,
                   int64_t first, int N, int Vr, int valid, cudaStream_t stream) {
  if (N == 0) return;
  sum_exp_kernel<<<N, kThreads, 0, stream>>>(sum, target_logit, logits, mx, targets, first, Vr, valid);
  check(cudaGetLastError(), "vocab_sum_exp launch");
}

template <class T>
void vocab_softmax_loss(float* losses, T* probs, const T* logits, const float* mx, const float* sum,
                        const float* target_logit, int N, int Vr, int valid, cudaStream_t stream) {
  const size_t n = size_t(N) * Vr;
  if (n == 0) return;
  softmax_loss_kernel<<<blocks_for(n), 256, 0, stream>>>(losses, probs, logits, mx, sum, target_logit, Vr, valid, n);
  check(cudaGetLastError(), "vocab_softmax_loss launch");
}

template <class T>
void vocab_crossentropy_backward(T* dlogits, const T* probs, const int32_t* targets, int64_t first, double dloss,
                                 int N, int Vr, int valid, cudaStream_t stream) {
  const size_t n = size_t(N) * Vr;
  if (n == 0) return;
  vocab_backward_kernel<<<blocks_for(n), 256, 0, stream>>>(dlogits, probs, targets, first, float(dloss), Vr, valid,
                                                           n);
  check(cudaGetLastError(), "vocab_crossentropy_backward launch");
}

#define PB_INSTANTIATE(T)                                                                                          \
  template void embedding_lookup<T>(T*, const int32_t*, const T*, int, int, int64_t, int, cudaStream_t);          \
  template void add_rows<T>(T*, const T*, const int32_t*, int, int, cudaStream_t);                                \
  template void add_rows_backward<T>(T*, const T*, const int32_t*, int, int, int64_t, int, cudaStream_t);         \
  template void vocab_logit_max<T>(float*, const T*, int, int, int, cudaStream_t);                                \
  template void vocab_sum_exp<T>(float*, float*, const T*, const float*, const int32_t*, int64_t, int, int, int,  \
                                 cudaStream_t);                                                                   \
  template void vocab_softmax_loss<T>(float*, T*, const T*, const float*, const float*, const float*, int, int, int, \
                                      cudaStream_t);                                                              \
  template void vocab_crossentropy_backward<T>(T*, const T*, const int32_t*, int64_t, double, int, int, int,      \
                                               cudaStream_t);
PB_CUDA_FOR_EACH_DTYPE(PB_INSTANTIATE)
#undef PB_INSTANTIATE

}  // namespace pb::kernels::cuda
