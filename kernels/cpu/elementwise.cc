// Residual add, gradient accumulation and scaling on flat buffers.
// Invariant: every result is computed in A and rounded to T once; scale's
// factor is converted to A first (as a GPU kernel taking a float would).
#include "kernels/common/math.h"
#include "kernels/cpu/numeric.h"
#include "kernels/cpu/ops.h"

namespace pb::kernels {

using detail::add_into;
using detail::load;
using detail::store;

template <class T>
void residual_forward(T* out, const T* a, const T* b, size_t N) {
  for (size_t i = 0; i < N; ++i) out[i] = store<T>(math::add(load(a[i]), load(b[i])));
}

template <class T>
void accumulate(T* dst, const T* src, size_t N) {
  for (size_t i = 0; i < N; ++i) add_into(dst[i], load(src[i]));
}

template <class T>
void scale(T* x, double s, size_t N) {
  const acc_t<T> f = static_cast<acc_t<T>>(s);
  for (size_t i = 0; i < N; ++i) x[i] = store<T>(load(x[i]) * f);
}

#define PB_INSTANTIATE(T)                                             \
  template void residual_forward<T>(T*, const T*, const T*, size_t);  \
  template void accumulate<T>(T*, const T*, size_t);                  \
  template void scale<T>(T*, double, size_t);
PB_KERNELS_FOR_EACH_DTYPE(PB_INSTANTIATE)
#undef PB_INSTANTIATE

}  // namespace pb::kernels
