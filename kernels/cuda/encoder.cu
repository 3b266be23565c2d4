// Token + learned position embedding on the device, forward and backward.
// Invariant (as on the CPU): the backward adds every destination row exactly
// once. dwpe: one thread per (t, c) sums over b in order. dwte:
// add_rows_backward (vocab_parallel.cu), the positions stably radix-sorted by
// token and each run summed in (b, t) order and added once: deterministic, no
// atomics, bf16 destinations rounded once.
#include <climits>

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
  // dwte: the rows of the tokens, each summed over its positions in (b, t) order.
  if (dwte) add_rows_backward(dwte, dout, inp, n_pos, C, 0, INT_MAX, stream);
}

#define PB_INSTANTIATE(T)                                                                               \
  template void encoder_forward<T>(T*, const int32_t*, const T*, const T*, int, int, int, cudaStream_t); \
  template void encoder_backward<T>(T*, T*, const T*, const int32_t*, int, int, int, cudaStream_t);
PB_CUDA_FOR_EACH_DTYPE(PB_INSTANTIATE)
#undef PB_INSTANTIATE

}  // namespace pb::kernels::cuda
