// AdamW (Loshchilov & Hutter 2019, Alg. 2, decoupled weight decay) in the
// order PyTorch's single-tensor torch.optim.AdamW evaluates it:
//   p *= 1 - lr*wd;  m = lerp(m, g, 1-b1);  v = b2 v + (1-b2) g^2;
//   p -= (lr / (1-b1^t)) * m / (sqrt(v) / sqrt(1-b2^t) + eps),
// and the sum of squares used by global-norm clipping.
// Invariants: per-step scalars are formed in double and cast to M once; the
// update runs entirely in M (the master type); param_out gets cast<T>(master)
// and may alias master when T == M.
#include <cmath>
#include <stdexcept>

#include "kernels/cpu/numeric.h"
#include "kernels/cpu/ops.h"

namespace pb::kernels {

using detail::load;

template <class T, class M>
void adamw_step(M* master, T* param_out, const T* grad, M* m, M* v, size_t n, const AdamWHyper& h,
                bool decay) {
  if (h.step < 1) throw std::invalid_argument("adamw_step: step must be >= 1 (it is 1-based)");
  const M keep = static_cast<M>(decay ? 1.0 - h.lr * h.weight_decay : 1.0);
  const M gs = static_cast<M>(h.grad_scale);
  const M w1 = static_cast<M>(1.0 - h.beta1), b2 = static_cast<M>(h.beta2),
          w2 = static_cast<M>(1.0 - h.beta2);
  const M step_size = static_cast<M>(h.lr / (1.0 - std::pow(h.beta1, double(h.step))));
  const M bc2_sqrt = static_cast<M>(std::sqrt(1.0 - std::pow(h.beta2, double(h.step))));
  const M eps = static_cast<M>(h.eps);
  for (size_t i = 0; i < n; ++i) {
    const M g = static_cast<M>(load(grad[i])) * gs;
    M p = master[i];
    if (decay) p *= keep;
    m[i] += w1 * (g - m[i]);
    v[i] = v[i] * b2 + w2 * g * g;
    p -= step_size * m[i] / (std::sqrt(v[i]) / bc2_sqrt + eps);
    master[i] = p;
    if (param_out) param_out[i] = cast<T>(p);
  }
}

template <class T>
double sum_squares(const T* g, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; ++i) {
    const double x = static_cast<double>(load(g[i]));
    s += x * x;
  }
  return s;
}

template void adamw_step<double, double>(double*, double*, const double*, double*, double*, size_t,
                                         const AdamWHyper&, bool);
template void adamw_step<float, float>(float*, float*, const float*, float*, float*, size_t,
                                       const AdamWHyper&, bool);
template void adamw_step<bf16, float>(float*, bf16*, const bf16*, float*, float*, size_t,
                                      const AdamWHyper&, bool);
#define PB_INSTANTIATE(T) template double sum_squares<T>(const T*, size_t);
PB_KERNELS_FOR_EACH_DTYPE(PB_INSTANTIATE)
#undef PB_INSTANTIATE

}  // namespace pb::kernels
