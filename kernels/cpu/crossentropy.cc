// Softmax + cross-entropy over V classes per row, fused.
// Invariants: the row max is subtracted before exp; the loss is computed in A
// from the logits as (max - x[target]) + log(sum exp(x - max)), never as -log
// of a rounded probability and never rounded at the scale of |max|; the target
// logit is read before probs (which may alias logits) is written.
#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "kernels/common/math.h"
#include "kernels/cpu/numeric.h"
#include "kernels/cpu/ops.h"

namespace pb::kernels {

using detail::add_into;
using detail::load;
using detail::store;

namespace {
void check_target(int32_t t, int V, int n) {
  if (t < 0 || t >= V)
    throw std::out_of_range("crossentropy: target " + std::to_string(t) + " of row " +
                            std::to_string(n) + " is outside [0, V=" + std::to_string(V) + ")");
}
}  // namespace

template <class T>
void crossentropy_forward(acc_t<T>* losses, T* probs, const T* logits, const int32_t* targets,
                          int N, int V) {
  using A = acc_t<T>;
  for (int n = 0; n < N; ++n) {
    check_target(targets[n], V, n);
    const T* x = logits + size_t(n) * V;
    T* p = probs + size_t(n) * V;
    A mx = -std::numeric_limits<A>::infinity();
    for (int i = 0; i < V; ++i) mx = math::max_a(mx, load(x[i]));
    A sum = 0;
    for (int i = 0; i < V; ++i) sum += math::exp_a(load(x[i]) - mx);
    const A xt = load(x[targets[n]]);
    const A inv = A(1) / sum;
    for (int i = 0; i < V; ++i) p[i] = store<T>(math::softmax_prob(load(x[i]), mx, inv));
    losses[n] = math::crossentropy_loss(mx, xt, sum);
  }
}

template <class T>
void crossentropy_backward(T* dlogits, const T* probs, const int32_t* targets, double dloss, int N,
                           int V) {
  using A = acc_t<T>;
  const A g = static_cast<A>(dloss);
  for (int n = 0; n < N; ++n) {
    check_target(targets[n], V, n);
    const T* p = probs + size_t(n) * V;
    T* d = dlogits + size_t(n) * V;
    for (int i = 0; i < V; ++i)
      add_into(d[i], math::crossentropy_grad(load(p[i]), i == targets[n], g));
  }
}

#define PB_INSTANTIATE(T)                                                                         \
  template void crossentropy_forward<T>(acc_t<T>*, T*, const T*, const int32_t*, int, int);      \
  template void crossentropy_backward<T>(T*, const T*, const int32_t*, double, int, int);
PB_KERNELS_FOR_EACH_DTYPE(PB_INSTANTIATE)
#undef PB_INSTANTIATE

}  // namespace pb::kernels
