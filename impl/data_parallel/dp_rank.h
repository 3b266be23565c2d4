// One rank of a data-parallel run: DDP, ZeRO-1/2/3 (FSDP full shard), HSDP,
// hierarchical ZeRO (ZeRO++ hpZ) and optimizer offload, on the reference's
// MicrobatchRunner. The model states and their collectives are the
// data-parallel component (component.h, the same one every pipeline stage
// uses); how a family meets the runner's unit visits is its hooks object
// (hooks.h), chosen once. Expert parallel (expert_parallel/ep_rank.h) is
// this rank with ep > 1: its experts a second component over edp.
// Invariant: on the local backend (rank-ordered reductions) DDP, ZeRO-1, and
// ZeRO-2/3, HSDP and hZeRO with one microbatch do the reference's arithmetic
// in its order (reference/trainer.h SplitPlan; replay.h says when and how).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "harness/comm/comm.h"
#include "impl/data_parallel/component.h"
#include "impl/data_parallel/hooks.h"
#include "impl/data_parallel/model_states.h"
#include "impl/data_parallel/options.h"
#include "impl/spec/rank_base.h"
#include "reference/trainer.h"

namespace pb::dp {

// Groups are slices of the mesh dp<dp> (harness/mesh.h): "dp" (and its
// scalar twin "dp_scalar"), HSDP's "dp_shard"/"dp_replica" (consecutive F dp
// ranks / the same position across them), hZeRO's "dp_intra"/"dp_inter"
// (split_by_node), "check" (the whole world); with experts the expert
// component's "edp"... and "ep", "ep_scalar" (its squared-norm partials).
template <class T>
class DpRank : public RankBase<T> {
 public:
  // ops, memory: the device (default: the CPU); the world's communicator
  // must reach that device's memory (the local backend reaches host memory).
  DpRank(const TrainConfig& cfg, const DpOptions& o, Communicator& world, RankOps<T> ops = {},
         RankMemory memory = {});
  ~DpRank() override;
  StepStats step() override;
  Declared declared(int steps) const override;
  // Checkpoints: both components' states, the step and the data position.
  void save_state(RankCheckpointOut& out) override;
  void load_state(const RankCheckpointIn& in) override;
  const ParamLayout& layout() const { return layout_; }
  const ShardLayout& shards() const { return states_->dense().shards(); }

 protected:
  // Expert parallel: o.ep > 1 on the mesh dp<o.dp>.ep<o.ep>, the dense units
  // over dp and this rank's experts a component with options `experts`
  // (expert_parallel/options.h expert_options) over edp. `mesh`: the world's
  // name in the error when its size is wrong.
  DpRank(const TrainConfig& cfg, const DpOptions& o, const DpOptions& experts, const std::string& mesh,
         Communicator& world, RankOps<T> ops, RankMemory memory);
  const MicrobatchRunner<T>& runner() const { return *runner_; }

 private:
  void build(const DpOptions* experts);

  TrainConfig cfg_;
  DpOptions o_;
  ParamLayout layout_;
  MarkovSource data_;
  RankGroups groups_;
  std::unique_ptr<ModelStates<T>> states_;
  std::unique_ptr<MicrobatchRunner<T>> runner_;
  int step_ = 0;
  int data_shift_ = 0;  // the data position minus step_ (0 unless a load's fault moved it)
  std::vector<double> gather(bool grads) override;
};

}  // namespace pb::dp
