#include "reference/optimizer.h"

#include <stdexcept>
#include <type_traits>

#include "harness/status.h"
#include "reference/init.h"

namespace pb {

template <class T>
AdamW<T>::AdamW(const ParamLayout& layout, uint64_t init_seed, std::vector<Segment> segments,
                int64_t n, MemoryTracker* tracker, Place place, bool separate_master,
                const kernels::DeviceOps<T>& ops)
    : layout_(&layout), ops_(&ops), segs_(std::move(segments)) {
  require(place == Place::device || ops.is_host(), "AdamW: a host-placed state needs the CPU's ops");
  m_ = Buffer<M>(tracker, MemTag::optimizer, size_t(n), place);
  v_ = Buffer<M>(tracker, MemTag::optimizer, size_t(n), place);
  if (!std::is_same_v<T, M> || separate_master) {
    master_ = Buffer<M>(tracker, MemTag::optimizer, size_t(n), place);
    for (const auto& s : segs_)
      init_params(ops, layout, init_seed, s.flat_lo, s.flat_hi, master_.data() + s.state_off);
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
  for (const auto& s : segs_) {
    layout_->for_each_decay_run(s.flat_lo, s.flat_hi, [&](int64_t b, int64_t e, bool decay) {
      const int64_t d = b - s.flat_lo;
      const size_t so = size_t(s.state_off + d), n = size_t(e - b);
      T* p = params + s.param_off + d;
      M* master;
      if (!master_.empty()) master = master_.data() + so;
      else if constexpr (std::is_same_v<T, M>) master = p;
      else throw std::logic_error("AdamW: no master copy");
      ops_->adamw_step(master, p, grads + s.grad_off + d, m_.data() + so, v_.data() + so, n, h, decay);
    });
  }
}

template class AdamW<double>;
template class AdamW<float>;
template class AdamW<bf16>;

}  // namespace pb
