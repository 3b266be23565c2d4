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

#include "impl/data_parallel/component.h"
#include "impl/data_parallel/hooks.h"
#include "impl/spec/rank.h"
#include "reference/runner.h"

namespace pb::ep {

// The dense component's hooks, with the expert component's behind
// experts(); a microbatch's start and the step's finish go to both (the
// expert-parallel rank's, and the tensor-parallel rank's under ep > 1).
template <class T>
class DenseAndExpertHooks final : public dp::FamilyHooks<T> {
 public:
  DenseAndExpertHooks(dp::FamilyHooks<T>& dense, dp::FamilyHooks<T>& experts) : d_(dense), e_(experts) {}
  const T* params(int u) override { return d_.params(u); }
  void release_params(int u) override { d_.release_params(u); }
  T* grads(int u) override { return d_.grads(u); }
  T* head_grads() override { return d_.head_grads(); }
  void grads_ready(int u) override { d_.grads_ready(u); }
  UnitHooks<T>* experts() override { return &e_; }
  void start_microbatch(int k, int micro) override {
    d_.start_microbatch(k, micro);
    e_.start_microbatch(k, micro);
  }
  void finish() override {
    d_.finish();
    e_.finish();
  }

 private:
  dp::FamilyHooks<T>& d_;
  dp::FamilyHooks<T>& e_;
};

template <class T>
class EpRank : public Rank {
 public:
  // ops, memory: the device this rank trains on (the CPU when null), as DpRank's.
  EpRank(const RunSpec& s, Communicator& world, std::shared_ptr<const kernels::DeviceOps<T>> ops = {},
         std::shared_ptr<DeviceMemory> memory = {});
  ~EpRank() override;
  StepStats step() override;
  std::vector<double> full_params() override;
  std::vector<double> full_grads() override;
  const MemoryTracker& memory() const override { return mem_; }
  void reset_memory_peaks() override { mem_.reset_peaks(); }
  Declared declared(int steps) const override;
  RankTimes times() const override { return times_; }
  MoeLoad moe_load() const override { return runner_->moe_load(); }
  void reset_moe_load() override { runner_->reset_moe_load(); }

 private:
  std::vector<double> gather(bool grads);

  RunSpec spec_;
  dp::DpOptions dense_o_, expert_o_;
  std::shared_ptr<const kernels::DeviceOps<T>> ops_;  // never null
  std::shared_ptr<DeviceMemory> device_memory_;       // outlives the buffers below
  MemoryTracker mem_;
  ParamLayout layout_;
  MarkovSource data_;
  dp::DpComms dense_c_, expert_c_;
  std::unique_ptr<Communicator> ep_, moe_, scalar_, ep_scalar_, check_;
  std::unique_ptr<dp::Component<T>> dense_, experts_;
  std::unique_ptr<dp::FamilyHooks<T>> dense_h_, expert_h_, hooks_;
  std::unique_ptr<MicrobatchRunner<T>> runner_;
  int step_ = 0;
  RankTimes times_;
};

}  // namespace pb::ep
