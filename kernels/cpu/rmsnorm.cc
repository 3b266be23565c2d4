// RMSNorm over the last dim (Zhang & Sennrich 2019, eq. 4; Llama's, no
// bias), forward and backward on N rows of C channels; the per-element math
// is kernels/common/math.h's.
// Invariants: the mean square is summed in A in channel order; dweight's
// contributions are summed over all N rows in A and added to the destination
// once.
#include <vector>

#include "kernels/common/math.h"
#include "kernels/cpu/numeric.h"
#include "kernels/cpu/ops.h"

namespace pb::kernels {

using detail::add_into;
using detail::load;
using detail::store;

template <class T>
void rmsnorm_forward(T* out, acc_t<T>* rstd, const T* inp, const T* weight, int N, int C, double eps) {
  using A = acc_t<T>;
  for (int n = 0; n < N; ++n) {
    const T* x = inp + size_t(n) * C;
    A ms = 0;
    for (int c = 0; c < C; ++c) ms += load(x[c]) * load(x[c]);
    ms /= A(C);
    const A rs = math::layernorm_rstd(ms, eps);
    T* o = out + size_t(n) * C;
    for (int c = 0; c < C; ++c) o[c] = store<T>(math::rmsnorm_out(load(x[c]), rs, load(weight[c])));
    if (rstd) rstd[n] = rs;
  }
}

template <class T>
void rmsnorm_backward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight, const acc_t<T>* rstd,
                      int N, int C) {
  using A = acc_t<T>;
  std::vector<A> dw(dweight ? size_t(C) : 0);
  for (int n = 0; n < N; ++n) {
    const T* x = inp + size_t(n) * C;
    const T* dy = dout + size_t(n) * C;
    const A rs = rstd[n];
    if (dinp) {
      A gx_mean = 0;
      for (int c = 0; c < C; ++c) gx_mean += load(weight[c]) * load(dy[c]) * (load(x[c]) * rs);
      gx_mean /= A(C);
      T* dx = dinp + size_t(n) * C;
      for (int c = 0; c < C; ++c)
        add_into(dx[c], math::rmsnorm_dx(load(weight[c]) * load(dy[c]), load(x[c]) * rs, gx_mean, rs));
    }
    if (dweight)
      for (int c = 0; c < C; ++c) dw[size_t(c)] += load(dy[c]) * (load(x[c]) * rs);
  }
  if (dweight)
    for (int c = 0; c < C; ++c) add_into(dweight[c], dw[size_t(c)]);
}

#define PB_INSTANTIATE(T)                                                                             \
  template void rmsnorm_forward<T>(T*, acc_t<T>*, const T*, const T*, int, int, double);              \
  template void rmsnorm_backward<T>(T*, T*, const T*, const T*, const T*, const acc_t<T>*, int, int);
PB_KERNELS_FOR_EACH_DTYPE(PB_INSTANTIATE)
#undef PB_INSTANTIATE

}  // namespace pb::kernels
