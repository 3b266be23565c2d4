// How each data-parallel family meets the microbatch runner (reference/
// runner.h UnitHooks): chosen once per rank by make_hooks, never by branches
// on the shard kind at each call.
//  - DDP (hooks_ddp.cc): full params and grads; buckets of units all-reduced
//    as their last unit's gradient completes (overlap) or after backward;
//    no_sync until the last microbatch.
//  - ZeRO-1/2 (hooks_zero.cc): full params; ZeRO-1 accumulates full grads and
//    reduce-scatters once per step, ZeRO-2 reduce-scatters each unit's
//    gradient per microbatch as it completes.
//  - ZeRO-3 / HSDP / hZeRO (hooks_zero.cc): as ZeRO-2, plus every unit's
//    parameters gathered before use (`prefetch` units ahead, in use order) and
//    freed after (blocks after forward when resharding, all at the end of the
//    microbatch), the bytes dp::comm_buffer_peak_bytes declares.
#pragma once
#include <memory>

#include "impl/data_parallel/component.h"
#include "reference/runner.h"
#include "reference/trainer.h"

namespace pb::dp {

template <class T>
class FamilyHooks : public UnitHooks<T> {
 public:
  // Before microbatch k of `micro`.
  virtual void start_microbatch(int k, int micro) = 0;
  // After the step's last microbatch: every gradient reduced (grad sync finish).
  virtual void finish() = 0;
};

// The model's units (UnitRoles::model), or any list with its roles (an
// expert component's: UnitRoles::all_blocks).
template <class T>
std::unique_ptr<FamilyHooks<T>> make_hooks(Component<T>& dp, const ParamLayout& layout, MemoryTracker& mem);
template <class T>
std::unique_ptr<FamilyHooks<T>> make_hooks(Component<T>& dp, UnitRoles roles, MemoryTracker& mem);

// Per family (hooks_ddp.cc, hooks_zero.cc).
template <class T>
std::unique_ptr<FamilyHooks<T>> make_ddp_hooks(Component<T>& dp);
template <class T>
std::unique_ptr<FamilyHooks<T>> make_zero_hooks(Component<T>& dp, UnitRoles roles, MemoryTracker& mem);

}  // namespace pb::dp
