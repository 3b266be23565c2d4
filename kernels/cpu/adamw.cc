// AdamW (Loshchilov & Hutter 2019, Alg. 2, decoupled weight decay) in the
// order PyTorch's single-tensor torch.optim.AdamW evaluates it (the element
// update is kernels/common/math.h's, shared with kernels/cuda), and the sum
// of squares used by global-norm clipping.
// Invariants: per-step scalars are formed in double and cast to M once; the
// update runs entirely in M (the master type); param_out gets cast<T>(master)
// and may alias master when T == M.
#include <cmath>
#include <stdexcept>

#include "kernels/common/math.h"
#include "kernels/cpu/numeric.h"
#include "kernels/cpu/ops.h"

namespace pb::kernels {

using detail::load;

template <class T, class M>
void adamw_step(M* master, T* param_out, const T* grad, M* m, M* v, size_t n, const AdamWHyper& h,
                bool decay) {
  if (h.step < 1) throw std::invalid_argument("adamw_step: step must be >= 1 (it is 1-based)");
  math::AdamWCoefs<M> c;
  c.keep = static_cast<M>(decay ? 1.0 - h.lr * h.weight_decay : 1.0);
  c.grad_scale = static_cast<M>(h.grad_scale);
  c.w1 = static_cast<M>(1.0 - h.beta1);
  c.b2 = static_cast<M>(h.beta2);
  c.w2 = static_cast<M>(1.0 - h.beta2);
  c.step_size = static_cast<M>(h.lr / (1.0 - std::pow(h.beta1, double(h.step))));
  c.bc2_sqrt = static_cast<M>(std::sqrt(1.0 - std::pow(h.beta2, double(h.step))));
  c.eps = static_cast<M>(h.eps);
  for (size_t i = 0; i < n; ++i) {
    const M p = math::adamw_update(master[i], m[i], v[i], static_cast<M>(load(grad[i])), c, decay);
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
