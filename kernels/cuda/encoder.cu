// Token + learned position embedding on the device, forward and backward.
// Invariant (as on the CPU): the backward adds every destination row exactly
// once. dwpe: one thread per (t, c) sums over b in order. dwte: the positions
// are stably radix-sorted by token (CUB), and one thread per (run of equal
// tokens, c) sums its run in (b, t) order and adds it once: deterministic, no
// atomics, bf16 destinations rounded once.
#include <cub/device/device_radix_sort.cuh>

#include "kernels/common/math.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/ops.h"

namespace pb::kernels::cuda {

using namespace detail;  // load/store, add_into, indexing, reductions, check

namespace {

template <class T>
__global__ void encoder_forward_kernel(T* out, const int32_t* inp, const T* wte, const T* wpe, int Tn, int C,
                                       size_t n) {
  for (size_t i = grid_index(); i < n; i += grid_stride()) {
    const size_t bt = i / size_t(C), c = i % size_t(C), t = bt % size_t(Tn);
    out[i] = store<T>(math::add(load(wte[size_t(inp[bt]) * C + c]), load(wpe[t * C + c])));
  }
}

template <class T>
__global__ void dwpe_kernel(T* dwpe, const T* dout, int B, int Tn, int C) {
  const size_t n = size_t(Tn) * C;
  for (size_t i = grid_index(); i < n; i += grid_stride()) {
    float s = 0.0f;
    for (int b = 0; b < B; ++b) s += load(dout[size_t(b) * n + i]);
    add_into(dwpe[i], s);
  }
}

// tok/pos: the tokens sorted stably and their (b, t) positions.
template <class T>
__global__ void dwte_kernel(T* dwte, const T* dout, const int32_t* tok, const int32_t* pos, int n_pos, int C) {
  const size_t n = size_t(n_pos) * C;
  for (size_t i = grid_index(); i < n; i += grid_stride()) {
    const int r = int(i / size_t(C)), c = int(i % size_t(C));
    if (r > 0 && tok[r - 1] == tok[r]) continue;  // not the start of a run
    float s = 0.0f;
    for (int j = r; j < n_pos && tok[j] == tok[r]; ++j) s += load(dout[size_t(pos[j]) * C + c]);
    add_into(dwte[size_t(tok[r]) * C + c], s);
  }
}

__global__ void iota_kernel(int32_t* x, int n) {
  for (size_t i = grid_index(); i < size_t(n); i += grid_stride()) x[i] = int32_t(i);
}

}  // namespace

template <class T>
void encoder_forward(T* out, const int32_t* inp, const T* wte, const T* wpe, int B, int Tn, int C,
                     cudaStream_t stream) {
  const size_t n = size_t(B) * Tn * C;
  if (n == 0) return;
  encoder_forward_kernel<<<blocks_for(n), 256, 0, stream>>>(out, inp, wte, wpe, Tn, C, n);
  check(cudaGetLastError(), "encoder_forward launch");
}

template <class T>
void encoder_backward(T* dwte, T* dwpe, const T* dout, const int32_t* inp, int B, int Tn, int C,
                      cudaStream_t stream) {
  const int n_pos = B * Tn;
  if (n_pos == 0 || C == 0) return;
  if (dwpe) {
    dwpe_kernel<<<blocks_for(size_t(Tn) * C), 256, 0, stream>>>(dwpe, dout, B, Tn, C);
    check(cudaGetLastError(), "encoder_backward dwpe launch");
  }
  if (!dwte) return;
  // Scratch: positions, sorted tokens, sorted positions, CUB's temporary storage.
  size_t temp_bytes = 0;
  check(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, static_cast<const int32_t*>(nullptr),
                                        static_cast<int32_t*>(nullptr), static_cast<const int32_t*>(nullptr),
                                        static_cast<int32_t*>(nullptr), n_pos, 0, 32, stream),
        "encoder_backward sort size");
  const size_t ints = 3 * size_t(n_pos);
  char* scratch = nullptr;
  check(cudaMallocAsync(reinterpret_cast<void**>(&scratch), ints * sizeof(int32_t) + temp_bytes, stream),
        "encoder_backward cudaMallocAsync");
  int32_t* pos = reinterpret_cast<int32_t*>(scratch);
  int32_t* tok_sorted = pos + n_pos;
  int32_t* pos_sorted = tok_sorted + n_pos;
  void* temp = scratch + ints * sizeof(int32_t);
  iota_kernel<<<blocks_for(size_t(n_pos)), 256, 0, stream>>>(pos, n_pos);
  cudaError_t e = cudaGetLastError();
  // LSD radix sort is stable: equal tokens keep their (b, t) order.
  if (e == cudaSuccess)
    e = cub::DeviceRadixSort::SortPairs(temp, temp_bytes, inp, tok_sorted, pos, pos_sorted, n_pos, 0, 32, stream);
  if (e == cudaSuccess) {
    dwte_kernel<<<blocks_for(size_t(n_pos) * C), 256, 0, stream>>>(dwte, dout, tok_sorted, pos_sorted, n_pos, C);
    e = cudaGetLastError();
  }
  check(cudaFreeAsync(scratch, stream), "encoder_backward cudaFreeAsync");
  check(e, "encoder_backward dwte");
}

#define PB_INSTANTIATE(T)                                                                               \
  template void encoder_forward<T>(T*, const int32_t*, const T*, const T*, int, int, int, cudaStream_t); \
  template void encoder_backward<T>(T*, T*, const T*, const int32_t*, int, int, int, cudaStream_t);
PB_CUDA_FOR_EACH_DTYPE(PB_INSTANTIATE)
#undef PB_INSTANTIATE

}  // namespace pb::kernels::cuda
