// SwiGLU (Shazeer 2020, eq. 6), Llama's MLP activation: out = silu(gate) * up
// on rows holding [gate | up] (the fused gate/up projection's output); the
// per-element math is kernels/common/math.h's.
// Invariant: evaluated in A; the backward adds each of dgate and dup once.
#include "kernels/common/math.h"
#include "kernels/cpu/numeric.h"
#include "kernels/cpu/ops.h"

namespace pb::kernels {

using detail::add_into;
using detail::load;
using detail::store;

template <class T>
void swiglu_forward(T* out, const T* gu, int N, int H) {
  for (int n = 0; n < N; ++n) {
    const T* g = gu + size_t(n) * 2 * H;
    T* o = out + size_t(n) * H;
    for (int i = 0; i < H; ++i) o[i] = store<T>(math::silu(load(g[i])) * load(g[H + i]));
  }
}

template <class T>
void swiglu_backward(T* dgu, const T* gu, const T* dout, int N, int H) {
  for (int n = 0; n < N; ++n) {
    const T* g = gu + size_t(n) * 2 * H;
    const T* dy = dout + size_t(n) * H;
    T* d = dgu + size_t(n) * 2 * H;
    for (int i = 0; i < H; ++i) {
      const acc_t<T> gate = load(g[i]), up = load(g[H + i]), dyi = load(dy[i]);
      add_into(d[i], dyi * up * math::silu_grad(gate));
      add_into(d[H + i], dyi * math::silu(gate));
    }
  }
}

#define PB_INSTANTIATE(T)                                     \
  template void swiglu_forward<T>(T*, const T*, int, int);    \
  template void swiglu_backward<T>(T*, const T*, const T*, int, int);
PB_KERNELS_FOR_EACH_DTYPE(PB_INSTANTIATE)
#undef PB_INSTANTIATE

}  // namespace pb::kernels
