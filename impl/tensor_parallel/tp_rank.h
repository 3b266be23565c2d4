// One rank of a tensor-parallel run (mesh dp x tp; tp = 1 runs activation
// recomputation alone): its shard of the model (ParamLayout(m, tp, tp rank))
// held by the data-parallel component over its dp group — so every data-axis
// option composes, ZeRO sharding the tp shard — and the microbatch run by
// TpRunner through the component's family hooks.
// Groups are slices of the mesh: "tp", the component's dp groups, "dp_scalar"
// (loss and sharded norm partials), "check" (the whole world).
// After the step's last microbatch, sequence parallel all-reduces the
// gradients of the tp-replicated parameters over tp; the clip norm counts
// those parameters on tp rank 0 only, so every parameter once.
// A mixture-of-experts model: its MoE blocks run the MoE MLP with experts
// split over tp (reference/moe.h MoeScope::tp); global capacity's counts are
// exchanged over the dp group "moe". ep = 1: the experts inside their
// block's unit. ep > 1 (expert_parallel/ep_rank.h's structure on the tp
// shard): the dense units over dp, this rank's E/ep experts a second
// component over edp (groups "e*"), rows dispatched over "ep" (same tp rank).
// Context parallel with ep > 1: the dense units over dp x cp, the ep group
// folded over dp x cp (harness/mesh.h, Megatron-core's expert groups), edp =
// dp x cp / ep; routing and capacity are context parallel's
// (context_moe_scope), each rank dispatching its own tokens' rows.
#pragma once
#include <memory>

#include "harness/comm/comm.h"
#include "impl/data_parallel/model_states.h"
#include "impl/spec/rank_base.h"
#include "impl/tensor_parallel/options.h"
#include "impl/tensor_parallel/runner.h"

namespace pb::tp {

// A mixture-of-experts model's routing scope under context parallel (mesh
// cp > 1; every rank of the mesh calls it, collective over `g`'s world): the
// capacity group over cp (global capacity: dp x cp), ep folded over dp x cp
// where ep > 1, the experts split over `tp` where its size > 1, and the token
// order that places each cp rank's tokens in its microbatch (reference/moe.h
// MoeScope::order). `data` is the data axis (dp replicas, not dp x cp); the
// tensor-parallel rank and the pipeline's context-parallel stages both use it.
MoeScope context_moe_scope(const dp::DpOptions& data, const TrainConfig& cfg, bool zigzag, RankGroups& g,
                           Communicator* tp);

template <class T>
class TpRank : public RankBase<T> {
 public:
  TpRank(const RunSpec& s, Communicator& world, RankOps<T> ops = {}, RankMemory memory = {});
  ~TpRank() override;
  StepStats step() override;
  Declared declared(int steps) const override;
  // Checkpoints: the states in this rank's layout mapped onto the full
  // tensors (checkpoint_state.h use_layout), the step and the data position.
  void save_state(RankCheckpointOut& out) override;
  void load_state(const RankCheckpointIn& in) override;
  // Largest |value| among this rank's vocabulary padding rows of wte, params
  // or grads (the ones it holds): 0 when padding never touches anything.
  double padding_max_abs(bool grads);

 private:
  std::vector<double> gather(bool grads) override;

  RunSpec spec_;
  TpOptions o_;
  ParamLayout full_layout_, layout_;
  MarkovSource data_;
  RankGroups groups_;
  dp::DpOptions dpo_;
  std::unique_ptr<dp::ModelStates<T>> states_;  // ep > 1: the experts a second component
  std::unique_ptr<TpRunner<T>> runner_;
  int step_ = 0;
  int data_shift_ = 0;  // the data position minus step_ (0 unless a load's fault moved it)
  bool kv_replicated_ = false;  // llama, kv_heads < tp: k_proj / v_proj whole on every tp rank
};

}  // namespace pb::tp
