// AdamW over one range [lo, hi) of the flat parameter vector: the whole model
// for the reference and DDP, a shard for ZeRO. Decoupled weight decay on
// matrices only (layout decides per element).
// Invariant: element-wise, so the update of an element depends only on its own
// gradient, state and the shared (lr, step, clip factor) — sharding the range
// cannot change the result.
#pragma once
#include <cstdint>
#include <vector>

#include "harness/dtype.h"
#include "harness/memory.h"
#include "kernels/common/device_ops.h"
#include "kernels/cpu/ops.h"
#include "reference/layout.h"
#include "reference/train_config.h"

namespace pb {

// Master/state type: double for fp64 runs, float otherwise.
template <class T> struct master_type { using type = float; };
template <> struct master_type<double> { using type = double; };
template <class T> using master_t = typename master_type<T>::type;

// Flat elements [flat_lo, flat_hi) live at state_off.. of the optimizer's own
// state, param_off.. of the params buffer and grad_off.. of the grads buffer it
// is stepped on (a ZeRO shard is a list of such slices; the reference's is one
// segment covering everything with all offsets 0).
struct Segment {
  int64_t flat_lo = 0, flat_hi = 0, state_off = 0, param_off = 0, grad_off = 0;
};

template <class T>
class AdamW {
 public:
  using M = master_t<T>;
  // n: length of the state buffers (padding included; padding is never touched).
  // A separate master copy exists when T != M (bf16-mixed) or when asked for
  // (offload keeps the master on the host); it is initialized from the init
  // function at M precision. place: device, or host for optimizer offload.
  // ops: the device the state lives on (the tracker's device memory for
  // Place::device; the CPU by default).
  AdamW(const ParamLayout& layout, uint64_t init_seed, std::vector<Segment> segments, int64_t n,
        MemoryTracker* tracker, Place place = Place::device, bool separate_master = false,
        const kernels::DeviceOps<T>& ops = kernels::cpu_ops<T>());

  // params/grads: the buffers the segments index. With a separate master,
  // params receive cast<T>(master) after the update.
  void step(T* params, const T* grads, const OptimConfig& o, long step, double lr,
            double grad_scale);
  const M* master() const { return master_.empty() ? nullptr : master_.data(); }
  // For checkpoints (impl/spec/checkpoint_state.h): the segments and the
  // state they index (master: null when the params are the master).
  const std::vector<Segment>& segments() const { return segs_; }
  M* master_data() { return master_.empty() ? nullptr : master_.data(); }
  M* m_data() { return m_.data(); }
  M* v_data() { return v_.data(); }

 private:
  const ParamLayout* layout_;
  const kernels::DeviceOps<T>* ops_;
  std::vector<Segment> segs_;
  Buffer<M> m_, v_, master_;
};

}  // namespace pb
