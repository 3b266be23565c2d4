#include "reference/optimizer.h"

#include <type_traits>

#include "reference/init.h"

namespace pb {

template <class T>
AdamW<T>::AdamW(const ParamLayout& layout, uint64_t init_seed, int64_t lo, int64_t hi,
                MemoryTracker* tracker, Place place)
    : layout_(&layout), lo_(lo), hi_(hi) {
  size_t n = size_t(hi - lo);
  m_ = Buffer<M>(tracker, MemTag::optimizer, n, place);
  v_ = Buffer<M>(tracker, MemTag::optimizer, n, place);
  if constexpr (!std::is_same_v<T, M>) {
    master_ = Buffer<M>(tracker, MemTag::optimizer, n, place);
    init_params<M>(layout, init_seed, lo, hi, master_.data());
  }
}

template <class T>
void AdamW<T>::step(T* params, const T* grads, const OptimConfig& o, long step, double lr,
                    double grad_scale) {
  kernels::AdamWHyper h;
  h.lr = lr;
  h.beta1 = o.beta1;
  h.beta2 = o.beta2;
  h.eps = o.eps;
  h.weight_decay = o.weight_decay;
  h.step = step;
  h.grad_scale = grad_scale;
  layout_->for_each_decay_run(lo_, hi_, [&](int64_t b, int64_t e, bool decay) {
    size_t off = size_t(b - lo_), n = size_t(e - b);
    M* master;
    if constexpr (std::is_same_v<T, M>) master = params + off;
    else master = master_.data() + off;
    kernels::adamw_step<T, M>(master, params + off, grads + off, m_.data() + off, v_.data() + off,
                              n, h, decay);
  });
}

template class AdamW<double>;
template class AdamW<float>;
template class AdamW<bf16>;

}  // namespace pb
