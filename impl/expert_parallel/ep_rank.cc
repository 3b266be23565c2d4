#include "impl/expert_parallel/ep_rank.h"

#include <algorithm>

#include "harness/mesh.h"
#include "harness/status.h"
#include "impl/data_parallel/replay.h"
#include "impl/data_parallel/strategy.h"
#include "impl/expert_parallel/cost.h"
#include "impl/expert_parallel/options.h"

namespace pb::ep {

template <class T>
EpRank<T>::EpRank(const RunSpec& s, Communicator& world, std::shared_ptr<const kernels::DeviceOps<T>> ops,
                  std::shared_ptr<DeviceMemory> memory)
    : RankBase<T>("ep", world, s.world(), mesh_text(s.mesh), s.train.threads, std::move(ops), std::move(memory)),
      spec_(s), layout_(s.train.model),
      data_(s.train.model.V, s.train.data.seed, s.train.data.branching, s.train.data.mix), groups_(world, s.mesh) {
  const TrainConfig& c = s.train;
  dp::StatesPlan plan;
  plan.dense = dp::options_of(s);
  plan.units = dp::dense_units(layout_);
  plan.split_experts = true;
  plan.experts = expert_options(s);
  plan.expert_units = dp::expert_units(layout_, s.mesh.ep, groups_.coord().ep);
  const bool expert_shards = plan.experts.shard != dp::Shard::none;
  states_ = std::make_unique<dp::ModelStates<T>>(plan, world, s.mesh, layout_, c.seed, this->mem_, *this->ops_);
  groups_.split(Group::dp_scalar, MeshAxis::dp);
  groups_.split(Group::ep_scalar, expert_shards ? MeshAxis::dp : MeshAxis::ep);
  groups_.split_world(Group::check);
  runner_ = std::make_unique<MicrobatchRunner<T>>(layout_, data_, &this->mem_, c.batch / s.mesh.dp / c.microbatches,
                                                  c.seq, dp::make_moe_scope(plan.dense, c, groups_), *this->ops_);
  this->track_moe_load(*runner_);
}

template <class T>
EpRank<T>::~EpRank() = default;

template <class T>
StepStats EpRank<T>::step() {
  dp::StepHooks h;
  h.run = [&](int, int64_t first, double dloss) { return runner_->run(step_, first, dloss, states_->hooks()); };
  const StepStats st = dp::data_parallel_step(*states_, spec_.train, runner_->Bm(), step_, groups_[Group::dp_scalar],
                                              h, &groups_[Group::ep_scalar]);
  this->times_.wall_s = this->times_.busy_s = st.seconds;
  return st;
}

template <class T>
std::vector<double> EpRank<T>::full_params() {
  return states_->gather(false, groups_[Group::check], layout_.total());
}

template <class T>
std::vector<double> EpRank<T>::full_grads() {
  return states_->gather(true, groups_[Group::check], layout_.total());
}

template <class T>
Declared EpRank<T>::declared(int steps) const {
  // The all-to-alls from the routing this rank recorded (every step since
  // construction: the conformance engine declares a fresh rank's whole run).
  Declared d = declared_costs(spec_, steps);
  const MoeLoad& l = runner_->moe_load();
  d.add_comm(Group::ep, CommOp::all_to_all, a2a_bytes(spec_.train.model, l.calls, l.sent_rows, l.owner_rows, int(sizeof(T))));
  return d;
}

template class EpRank<double>;
template class EpRank<float>;
template class EpRank<bf16>;

}  // namespace pb::ep
