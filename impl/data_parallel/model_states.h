// A rank's model states, made once for every rank type: the dense
// data-parallel component (the model's units, a stage's, or an MoE model's
// dense part), with expert parallelism a second component holding this
// rank's experts over the expert-data-parallel group edp (Megatron-core's
// expert RankGenerator, harness/mesh.h), the family hooks a runner drives
// them through (hooks.h; both behind DenseAndExpertHooks) or a pipeline
// stage's (StageHooks, both behind one unit numbering), and a mixture-of-
// experts model's routing scope (make_moe_scope, the one place it is made).
// Also the step's tail every rank shares (finish_step): the loss summed,
// the norm, lr and clip, both components' optimizer steps.
// Invariant: both components' groups are split on every rank alike (the
// splits are collective over the world), whether or not it holds experts.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "harness/comm/comm.h"
#include "impl/data_parallel/component.h"
#include "impl/data_parallel/hooks.h"
#include "impl/spec/groups.h"
#include "reference/moe.h"
#include "reference/trainer.h"

namespace pb::dp {

// Dense units: the model's, each MoE block cut before its first expert.
std::vector<UnitSpan> dense_units(const ParamLayout& l);
// Expert units: one per MoE layer, the contiguous range of ep rank r's E/ep experts.
std::vector<UnitSpan> expert_units(const ParamLayout& l, int ep, int ep_rank);
// The expert component's communicators as every rank holding experts builds
// them: over the edp groups, or, under the ep_expert_grads_dp fault, over the
// whole dense group along `dense_axis` (dp, or dp x cp under context
// parallel; `experts` then takes the dense options' size and node map),
// which mixes experts. Collective over `world`.
DpComms make_expert_comms(Communicator& world, const MeshShape& mesh, DpOptions& experts, const DpOptions& dense,
                          MeshAxis dense_axis = MeshAxis::dp);

// The dense component's hooks, with the expert component's behind
// experts(); a microbatch's start and the step's finish go to both.
template <class T>
class DenseAndExpertHooks final : public FamilyHooks<T> {
 public:
  DenseAndExpertHooks(FamilyHooks<T>& dense, FamilyHooks<T>& experts) : d_(dense), e_(experts) {}
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
  FamilyHooks<T>& d_;
  FamilyHooks<T>& e_;
};

// What a rank's model states are made of.
struct StatesPlan {
  DpOptions dense;              // the dense component's data axis
  std::vector<UnitSpan> units;  // its units
  MeshAxis axis = MeshAxis::dp;  // the mesh groups it spans (dp_cp under context parallel)
  // How the rank's runner meets the components: the microbatch runner's
  // family hooks (hooks()) or a pipeline stage's (stage_hooks(), `stage`
  // saying what they keep).
  enum class Driver { runner, stage } driver = Driver::runner;
  StagePlan stage;
  // Experts as a second component over edp: its options and units (none on
  // a pipeline stage without MoE blocks; the groups are split all the same).
  bool split_experts = false;
  DpOptions experts;
  std::vector<UnitSpan> expert_units;
};

template <class T>
class ModelStates {
 public:
  // Collective over `world`. `layout` indexes the units (init, weight decay).
  ModelStates(StatesPlan plan, Communicator& world, const MeshShape& mesh, const ParamLayout& layout, uint64_t seed,
              MemoryTracker& mem, const kernels::DeviceOps<T>& ops);
  ~ModelStates();
  Component<T>& dense() { return *dense_; }
  const Component<T>& dense() const { return *dense_; }
  Component<T>* experts() { return experts_.get(); }
  const Component<T>* experts() const { return experts_.get(); }
  const DpComms& expert_comms() const { return expert_c_; }
  // Both components' (Driver::runner only).
  FamilyHooks<T>& hooks() { return *hooks_; }
  // Both components' (Driver::stage only): the dense units 0 .. n-1 with n =
  // dense().num_units(), then the expert units n + j.
  StageHooks<T>& stage_hooks() { return *stage_; }
  // Both components: the flat ranges left out of the norm (component.h).
  void exclude_from_norm(const std::vector<std::pair<int64_t, int64_t>>& ranges);
  void zero_grads();
  // Both components' checkpoint state (Component::save_state / load_state).
  void save_state(RankCheckpointOut& out) const;
  void load_state(const RankCheckpointIn& in);
  // MoeFault::ep_grads_ep_times (test-only), after the step's reduction: the
  // expert component's held gradients multiplied by ep (doubled log2(ep)
  // times); nothing without the fault.
  void inflate_expert_grads();
  // AdamW step t of both components at lr, the gradients scaled by `clip`.
  void step(const OptimConfig& oc, long t, double lr, double clip);
  // Collective over `check` (every rank of the run): the full vector, each
  // rank's share of both components summed; `place` (tensor parallel) maps
  // the share in the components' layout of `total` elements to the whole
  // model's, or the share is the whole model's.
  std::vector<double> gather(bool grads, Communicator& check, int64_t total,
                             const std::function<std::vector<double>(const std::vector<double>&)>& place = {}) const;

 private:
  DpComms dense_c_, expert_c_;
  std::unique_ptr<Component<T>> dense_, experts_;
  std::unique_ptr<FamilyHooks<T>> dense_h_, expert_h_, both_;
  FamilyHooks<T>* hooks_ = nullptr;
  std::unique_ptr<StageHooks<T>> dense_s_, expert_s_, both_s_;
  StageHooks<T>* stage_ = nullptr;
  const kernels::DeviceOps<T>* ops_ = nullptr;
  int inflate_ = 1;  // ep under MoeFault::ep_grads_ep_times
};

// A mixture-of-experts model's routing scope (reference/moe.h), made here
// only: the data axis's MoE faults; with the mesh's ep > 1 the experts
// split over Group::ep; global capacity's counts exchanged over Group::moe
// (the dp ranks) when they share it (replay.h moe_shares_capacity); the
// experts split over `tp` when it has more than one rank. A dense model: none.
MoeScope make_moe_scope(const DpOptions& dense, const TrainConfig& cfg, RankGroups& g, Communicator* tp = nullptr);

// The tail of every rank's step: the loss summed over `loss_group` (null:
// this rank's alone), the gradient norm sqrt(sq), step `step` + 1's lr and
// clip factor, both components stepped; `step` advanced. StepStats::seconds
// is the caller's.
template <class T>
StepStats finish_step(ModelStates<T>& ms, const TrainConfig& cfg, int& step, double loss, Communicator* loss_group,
                      double sq);
// Its optimizer part: step t's lr and the clip factor of `norm`, both
// components stepped (PipeDream-2BW applies a gradient apart from its step).
template <class T>
void apply_update(ModelStates<T>& ms, const TrainConfig& cfg, long t, double norm);

// One optimizer step of a rank whose model states are `ms` and whose
// microbatches meet them through ms.hooks() (data, expert and tensor
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
// Expert parallel's second component (ms.experts()): its squared norm is
// summed over `expert_scalar` and added; the tail is finish_step's.
template <class T>
StepStats data_parallel_step(ModelStates<T>& ms, const TrainConfig& cfg, int Bm, int& step, Communicator& scalar,
                             const StepHooks& h, Communicator* expert_scalar = nullptr);

}  // namespace pb::dp
