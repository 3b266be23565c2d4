// AdamW over one range [lo, hi) of the flat parameter vector: the whole model
// for the reference and DDP, a shard for ZeRO. Decoupled weight decay on
// matrices only (layout decides per element).
// Invariant: element-wise, so the update of an element depends only on its own
// gradient, state and the shared (lr, step, clip factor) — sharding the range
// cannot change the result.
#pragma once
#include <cstdint>

#include "harness/dtype.h"
#include "harness/memory.h"
#include "kernels/cpu/ops.h"
#include "reference/layout.h"
#include "reference/train_config.h"

namespace pb {

// Master/state type: double for fp64 runs, float otherwise.
template <class T> struct master_type { using type = float; };
template <> struct master_type<double> { using type = double; };
template <class T> using master_t = typename master_type<T>::type;

template <class T>
class AdamW {
 public:
  using M = master_t<T>;
  // A separate master copy exists only when T != M (bf16-mixed); it is
  // initialized from the same init function at M precision. place: device, or
  // host for optimizer offload.
  AdamW(const ParamLayout& layout, uint64_t init_seed, int64_t lo, int64_t hi,
        MemoryTracker* tracker, Place place = Place::device);

  int64_t lo() const { return lo_; }
  int64_t hi() const { return hi_; }
  // params/grads point at element lo of their vectors.
  void step(T* params, const T* grads, const OptimConfig& o, long step, double lr,
            double grad_scale);
  const M* master() const { return master_.empty() ? nullptr : master_.data(); }

 private:
  const ParamLayout* layout_;
  int64_t lo_, hi_;
  Buffer<M> m_, v_, master_;
};

}  // namespace pb
