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
#include <functional>
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

// One optimizer step of a rank whose model states are `dp`'s and whose
// microbatches meet it through `hooks` (plain data parallel, tensor
// parallel): run(k, first sample, dloss) runs microbatch k of this dp rank
// and returns its token-loss sum; after the grad sync finishes, `synced` runs
// (e.g. SP's all-reduce over tp) and `norm` completes the squared norm beyond
// the dp group (e.g. over tp). Loss and norm partials are summed over
// `scalar` (the dp axis); the injected faults grad_not_averaged and
// sync_wrong_microbatch act here. `step` is 0-based and advanced.
struct StepHooks {
  std::function<double(int k, int64_t first, double dloss)> run;
  std::function<void()> synced;
  std::function<void(double& sq)> norm;
  // Which samples this rank trains on: the data-parallel index of its replica
  // (-1: the component's group rank). Context parallel runs the component over
  // dp x cp ranks, whose cp ranks share their replica's samples.
  int data_rank = -1;
  // The loss gradient's scale relative to 1 / (tokens of the global batch)
  // (a fault's knob; 1 when correct).
  double dloss_scale = 1;
};
// Expert parallel adds a second component holding the local experts
// (`experts`; `hooks` then drives both): its gradients are zeroed, its squared
// norm summed over `expert_scalar` and added, and it steps with the same lr
// and clip factor.
template <class T>
StepStats data_parallel_step(Component<T>& dp, FamilyHooks<T>& hooks, const TrainConfig& cfg, int Bm, int& step,
                             Communicator& scalar, const StepHooks& h, Component<T>* experts = nullptr,
                             Communicator* expert_scalar = nullptr);

// Per family (hooks_ddp.cc, hooks_zero.cc).
template <class T>
std::unique_ptr<FamilyHooks<T>> make_ddp_hooks(Component<T>& dp);
template <class T>
std::unique_ptr<FamilyHooks<T>> make_zero_hooks(Component<T>& dp, UnitRoles roles, MemoryTracker& mem);

}  // namespace pb::dp
