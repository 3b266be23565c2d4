// One rank of an expert-parallel run (mesh dpN.epM, any data-axis option):
// the dense parameters (embeddings, attention, LayerNorms, routers) are one
// data-parallel component over the dp group, as in plain data parallel; the
// experts of every MoE layer are split over the ep group (reference/moe.h
// MoeScope::ep: rank r of the group owns the r-th E/ep contiguous experts),
// and this rank's experts are a second component over the expert-data-
// parallel group edp (the ranks holding the same experts, Megatron-core's
// expert RankGenerator, harness/mesh.h), with the same data-axis option: ZeRO
// shards dense states over dp and expert states over edp. Routing, capacity
// and the load-balancing loss stay with the token's rank (global capacity:
// counts exchanged over the dp group "moe"); admitted rows travel to their
// experts and back by all-to-all(v) over "ep".
// Groups: "dp" (+ the family's dp_shard/dp_replica/dp_intra/dp_inter), the
// expert component's "edp" (+ edp_shard, ...), "ep", "moe", "dp_scalar",
// "ep_scalar" (the expert squared-norm partials), "check".
// On a device: both components' states and the runner's buffers there, the
// all-to-alls on device memory (moe.h: the routing on the host between them).
#pragma once
#include <memory>
#include <vector>

#include "impl/data_parallel/model_states.h"
#include "impl/spec/rank_base.h"
#include "reference/runner.h"

namespace pb::ep {

template <class T>
class EpRank : public RankBase<T> {
 public:
  // ops, memory: the device this rank trains on (the CPU when null), as DpRank's.
  EpRank(const RunSpec& s, Communicator& world, std::shared_ptr<const kernels::DeviceOps<T>> ops = {},
         std::shared_ptr<DeviceMemory> memory = {});
  ~EpRank() override;
  StepStats step() override;
  std::vector<double> full_params() override;
  std::vector<double> full_grads() override;
  Declared declared(int steps) const override;

 private:
  RunSpec spec_;
  ParamLayout layout_;
  MarkovSource data_;
  RankGroups groups_;
  std::unique_ptr<dp::ModelStates<T>> states_;
  std::unique_ptr<MicrobatchRunner<T>> runner_;
  int step_ = 0;
};

}  // namespace pb::ep
