// tanh-approximate GELU: the per-element math is kernels/common/math.h's
// (shared with kernels/cuda). Invariant: evaluated in A; the backward adds
// dout * gelu'(x) to dinp once. (The rational fp32 tanh there replaced libm's
// tanhf, which was a third of a C=256 training step.)
#include "kernels/common/math.h"
#include "kernels/cpu/numeric.h"
#include "kernels/cpu/ops.h"

namespace pb::kernels {

using detail::add_into;
using detail::load;
using detail::store;

template <class T>
void gelu_forward(T* out, const T* inp, size_t N) {
  for (size_t i = 0; i < N; ++i) out[i] = store<T>(math::gelu(load(inp[i])));
}

template <class T>
void gelu_backward(T* dinp, const T* inp, const T* dout, size_t N) {
  for (size_t i = 0; i < N; ++i) add_into(dinp[i], math::gelu_grad(load(inp[i])) * load(dout[i]));
}

#define PB_INSTANTIATE(T)                                           \
  template void gelu_forward<T>(T*, const T*, size_t);              \
  template void gelu_backward<T>(T*, const T*, const T*, size_t);
PB_KERNELS_FOR_EACH_DTYPE(PB_INSTANTIATE)
#undef PB_INSTANTIATE

}  // namespace pb::kernels
