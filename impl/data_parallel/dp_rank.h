// One rank of a data-parallel run: DDP, ZeRO-1/2/3 (FSDP full shard), HSDP,
// hierarchical ZeRO (ZeRO++ hpZ) and optimizer offload, on the reference's
// MicrobatchRunner. The strategy lives in the UnitHooks (what happens when a
// unit's parameters are needed and when its gradients are complete) and in
// finish() (what happens between backward and the next forward).
// Invariant: on the local backend (rank-ordered reductions) DDP, ZeRO-1, and
// ZeRO-2/3, HSDP and hZeRO with one microbatch do the reference's arithmetic
// in its order (reference/trainer.h SplitPlan; replay.h says when and how).
#pragma once
#include <map>
#include <memory>
#include <vector>

#include "harness/comm.h"
#include "impl/data_parallel/options.h"
#include "impl/data_parallel/shard.h"
#include "reference/trainer.h"

namespace pb::dp {

template <class T>
class DpRank {
 public:
  DpRank(const TrainConfig& cfg, const DpOptions& o, Communicator& world);
  ~DpRank();
  StepStats step();
  // Collective over the run's ranks (every rank calls): full vectors in flat
  // order, widened to double. Traffic goes to the group "check".
  std::vector<double> full_params();
  std::vector<double> full_grads();
  const MemoryTracker& memory() const { return mem_; }
  // Peaks restart from the current bytes (the sweep calls it after warm-up).
  void reset_memory_peaks() { mem_.reset_peaks(); }
  const ParamLayout& layout() const { return layout_; }
  const ShardLayout& shards() const { return *sl_; }

 private:
  class Hooks;
  friend class Hooks;
  bool sharded() const { return o_.shard != Shard::none; }
  bool params_sharded() const { return o_.shard >= Shard::zero3; }
  Communicator& shard_comm();  // the group gradients are reduce-scattered over
  void finish_step();
  void reduce_unit(int u, T* unit_grads, bool first_micro);
  void gather_params_after_step();
  std::vector<double> gather_full(const T* buf, bool full_layout);

  TrainConfig cfg_;
  DpOptions o_;
  Communicator& world_;
  MemoryTracker mem_;
  ParamLayout layout_;
  MarkovSource data_;
  std::unique_ptr<Communicator> dp_, scalar_, check_, shard_, replica_, intra_, inter_,
      scalar_shard_;
  int g_ = 1, rpn_ = 0, nodes_ = 1;
  std::unique_ptr<ShardLayout> sl_;
  Buffer<T> params_, grads_, secondary_, dummy_params_;
  std::unique_ptr<AdamW<T>> opt_;
  std::unique_ptr<MicrobatchRunner<T>> runner_;
  std::unique_ptr<Hooks> hooks_;
  int step_ = 0;
};

}  // namespace pb::dp
