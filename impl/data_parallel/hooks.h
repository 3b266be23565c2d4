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
// A pipeline stage meets the same families through StageHooks (below),
// chosen once by make_stage_hooks in the same files.
#pragma once
#include <cstdint>
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

// Per family (hooks_ddp.cc, hooks_zero.cc).
template <class T>
std::unique_ptr<FamilyHooks<T>> make_ddp_hooks(Component<T>& dp);
template <class T>
std::unique_ptr<FamilyHooks<T>> make_zero_hooks(Component<T>& dp, UnitRoles roles, MemoryTracker& mem);

// A pipeline stage's side of the families (impl/pipeline/executor.h). Its
// schedule interleaves microbatches, so every call names the microbatch (and
// the weight version it runs on); a unit's parameters are gathered for each
// action that reads them and freed after it, without prefetch (the bytes
// pipeline/cost.h stage_dp_comm_per_step declares).
//  - full gradients (DDP, ZeRO-1; hooks_ddp.cc): accumulated in place over
//    the step and reduced once after the flush; PipeDream-2BW's second weight
//    and gradient versions live here (2BW composes with these only).
//  - sharded gradients (ZeRO-2 and the ZeRO-3 family; hooks_zero.cc): each
//    (microbatch, unit)'s gradient in a buffer of its own, reduce-scattered
//    as it completes (the step's first per unit overwrites, later ones add).

// The tied embedding's gradient summed over the stages holding it (the
// pipeline's first and last: E + H). The family calls `sum` where its
// arithmetic puts it: with full gradients on the whole rows before the
// data-parallel reduction ((E + H) reduced, pipeline_replay_plan's order),
// otherwise on this rank's reduced shard of the unit after it. At pp = 1
// (`sum` null) the head's contribution (head_grads) is added to the
// embedding's rows locally, before the reduction.
template <class T>
struct TiedGrad {
  int unit = -1;      // the stage's unit holding the rows (-1: none here, or never summed)
  int64_t rows = 0;   // the rows' elements at the unit's start (wte: V x C)
  std::function<void(T* data, size_t n)> sum;
};

struct StagePlan {
  bool two_versions = false;  // PipeDream-2BW: a second weight and gradient version
  int64_t head_rows = 0;      // pp = 1: the LM head's wte gradient apart (full gradients), its elements
};

template <class T>
class StageHooks {
 public:
  virtual ~StageHooks() = default;
  // Before a step (2BW: after each update): gradients zeroed, no unit reduced yet.
  virtual void start_step() = 0;
  // Unit u's parameters at weight `version` (0 for synchronous schedules);
  // backward: hZeRO gathers from the node-local secondary copy.
  virtual const T* params(int u, int version, bool backward) = 0;
  virtual void release_params(int /*u*/) {}
  // Where microbatch mb's gradient of unit u accumulates, and its completion.
  virtual T* grads(int mb, int u, int version) = 0;
  virtual void grads_ready(int /*mb*/, int /*u*/) {}
  // pp = 1: where the LM head's contribution to wte (unit `wte`) accumulates.
  virtual T* head_grads(int mb, int wte, int version) = 0;
  // After the flush: the data-parallel reduction, `tied` summed where the
  // family's order puts it (TiedGrad).
  virtual void finish(const TiedGrad<T>& tied) = 0;
  // PipeDream-2BW, before weight version k's first use: W(k-1) kept for the
  // microbatches still on it; then (k >= 2) bring_grads puts g(k-2) in the
  // component (a buffer swap) for finish and the optimizer.
  virtual void keep_version(int /*k*/) {}
  virtual void bring_grads(int /*k*/) {}
  virtual int version() const { return 0; }  // the newest weight version kept
  // Between steps nothing is left gathered or unreduced.
  virtual bool idle() const = 0;
};

template <class T>
std::unique_ptr<StageHooks<T>> make_stage_hooks(Component<T>& dp, const StagePlan& plan, MemoryTracker& mem);
// Per family (hooks_ddp.cc, hooks_zero.cc).
template <class T>
std::unique_ptr<StageHooks<T>> make_full_grad_stage_hooks(Component<T>& dp, const StagePlan& plan,
                                                          MemoryTracker& mem);
template <class T>
std::unique_ptr<StageHooks<T>> make_sharded_stage_hooks(Component<T>& dp, MemoryTracker& mem);

}  // namespace pb::dp
