// LayerNorm over the last dim (Ba, Kiros, Hinton 2016, eq. 4), forward and
// backward on N rows of C channels.
// Invariants: mean and variance are computed in A with two passes (no
// E[x^2]-E[x]^2 cancellation); dweight/dbias contributions are summed over all
// N rows in A and added to the destination once.
#include <cmath>
#include <vector>

#include "kernels/common/math.h"
#include "kernels/cpu/numeric.h"
#include "kernels/cpu/ops.h"

namespace pb::kernels {

using detail::add_into;
using detail::load;
using detail::store;

template <class T>
void layernorm_forward(T* out, acc_t<T>* mean, acc_t<T>* rstd, const T* inp, const T* weight,
                       const T* bias, int N, int C, double eps) {
  using A = acc_t<T>;
  for (int n = 0; n < N; ++n) {
    const T* x = inp + size_t(n) * C;
    A mu = 0;
    for (int c = 0; c < C; ++c) mu += load(x[c]);
    mu /= A(C);
    A var = 0;
    for (int c = 0; c < C; ++c) {
      const A d = load(x[c]) - mu;
      var += d * d;
    }
    var /= A(C);
    const A rs = math::layernorm_rstd(var, eps);
    T* o = out + size_t(n) * C;
    for (int c = 0; c < C; ++c)
      o[c] = store<T>(math::layernorm_out(load(x[c]), mu, rs, load(weight[c]), load(bias[c])));
    if (mean) mean[n] = mu;
    if (rstd) rstd[n] = rs;
  }
}

// With xhat = (x - mean) * rstd and g = weight * dout:
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)).
template <class T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                        const acc_t<T>* mean, const acc_t<T>* rstd, int N, int C) {
  using A = acc_t<T>;
  std::vector<A> dw(dweight ? size_t(C) : 0), db(dbias ? size_t(C) : 0);
  for (int n = 0; n < N; ++n) {
    const T* x = inp + size_t(n) * C;
    const T* dy = dout + size_t(n) * C;
    const A mu = mean[n], rs = rstd[n];
    if (dinp) {
      A g_mean = 0, gx_mean = 0;
      for (int c = 0; c < C; ++c) {
        const A g = load(weight[c]) * load(dy[c]);
        g_mean += g;
        gx_mean += g * math::layernorm_xhat(load(x[c]), mu, rs);
      }
      g_mean /= A(C);
      gx_mean /= A(C);
      T* dx = dinp + size_t(n) * C;
      for (int c = 0; c < C; ++c) {
        const A xhat = math::layernorm_xhat(load(x[c]), mu, rs);
        const A g = load(weight[c]) * load(dy[c]);
        add_into(dx[c], math::layernorm_dx(g, xhat, g_mean, gx_mean, rs));
      }
    }
    if (dweight)
      for (int c = 0; c < C; ++c) dw[c] += load(dy[c]) * math::layernorm_xhat(load(x[c]), mu, rs);
    if (dbias)
      for (int c = 0; c < C; ++c) db[c] += load(dy[c]);
  }
  if (dweight)
    for (int c = 0; c < C; ++c) add_into(dweight[c], dw[c]);
  if (dbias)
    for (int c = 0; c < C; ++c) add_into(dbias[c], db[c]);
}

#define PB_INSTANTIATE(T)                                                                        \
  template void layernorm_forward<T>(T*, acc_t<T>*, acc_t<T>*, const T*, const T*, const T*,    \
                                     int, int, double);                                          \
  template void layernorm_backward<T>(T*, T*, T*, const T*, const T*, const T*,                  \
                                      const acc_t<T>*, const acc_t<T>*, int, int);
PB_KERNELS_FOR_EACH_DTYPE(PB_INSTANTIATE)
#undef PB_INSTANTIATE

}  // namespace pb::kernels
