#include "impl/data_parallel/dp_rank.h"

#include <cmath>

#include "harness/mesh.h"
#include "harness/status.h"
#include "impl/data_parallel/replay.h"
#include "impl/data_parallel/strategy.h"
#include "impl/expert_parallel/exchange.h"

namespace pb::dp {

template <class T>
DpRank<T>::DpRank(const TrainConfig& cfg, const DpOptions& o, Communicator& world, RankOps<T> ops,
                  RankMemory memory)
    : RankBase<T>((validate(o, cfg), "dp"), world, o.dp, "dp" + std::to_string(o.dp), cfg.threads, std::move(ops),
                  std::move(memory)),
      cfg_(cfg), o_(o), layout_(cfg.model), data_(cfg.model.V, cfg.data.seed, cfg.data.branching, cfg.data.mix),
      groups_(world, MeshShape{o.dp, 1, 1, 1, o.ranks_per_node}) {
  build(nullptr);
}

template <class T>
DpRank<T>::DpRank(const TrainConfig& cfg, const DpOptions& o, const DpOptions& experts, const std::string& mesh,
                  Communicator& world, RankOps<T> ops, RankMemory memory)
    : RankBase<T>("ep", world, o.dp, mesh, cfg.threads, std::move(ops), std::move(memory)), cfg_(cfg), o_(o),
      layout_(cfg.model), data_(cfg.model.V, cfg.data.seed, cfg.data.branching, cfg.data.mix),
      groups_(world, MeshShape{o.dp, 1, 1, 1, o.ranks_per_node, o.ep}) {
  build(&experts);
}

template <class T>
void DpRank<T>::build(const DpOptions* experts) {
  StatesPlan plan;
  plan.dense = o_;
  plan.units = experts ? dense_units(layout_) : model_units(layout_);
  if (experts) {
    plan.split_experts = true;
    plan.experts = *experts;
    plan.expert_units = expert_units(layout_, o_.ep, groups_.coord().ep);
  }
  states_ = std::make_unique<ModelStates<T>>(plan, groups_.world(), groups_.mesh(), layout_, cfg_.seed, this->mem_,
                                             *this->ops_);
  groups_.split(Group::dp_scalar, MeshAxis::dp);
  if (experts) groups_.split(Group::ep_scalar, plan.experts.shard == Shard::none ? MeshAxis::ep : MeshAxis::dp);
  groups_.split_world(Group::check);
  runner_ = std::make_unique<MicrobatchRunner<T>>(layout_, data_, &this->mem_, cfg_.batch / o_.dp / cfg_.microbatches,
                                                  cfg_.seq, make_moe_scope(o_, cfg_, groups_), *this->ops_);
  this->track_moe_load(*runner_);
}

template <class T>
DpRank<T>::~DpRank() = default;

template <class T>
StepStats data_parallel_step(ModelStates<T>& ms, const TrainConfig& cfg, int Bm, int& step, Communicator& scalar,
                             const StepHooks& h, Communicator* expert_scalar) {
  Component<T>& dp = ms.dense();
  FamilyHooks<T>& hooks = ms.hooks();
  const std::unique_ptr<kernels::DeviceTimeline> clock = dp.ops().timeline();  // the step's time on the device
  const int t0 = clock->mark();
  const DpOptions& o = dp.options();
  const int micro = cfg.microbatches, per_rank = Bm * micro;
  const double tokens = o.has(Fault::grad_not_averaged) ? double(per_rank) * cfg.seq : double(cfg.tokens_per_step());
  ms.zero_grads();
  double loss = 0;
  for (int k = 0; k < micro; ++k) {
    hooks.start_microbatch(k, micro);
    const int64_t data_rank = h.data_rank >= 0 ? h.data_rank : dp.dp().rank();
    loss += h.run(k, data_rank * per_rank + int64_t(k) * Bm, h.dloss_scale / tokens);
    if (k == 0 && o.has(Fault::sync_wrong_microbatch)) hooks.finish();
  }
  hooks.finish();
  ms.inflate_expert_grads();  // a fault's, else nothing
  if (h.synced) h.synced();
  // DDP: every rank holds the reduced gradient; sharded: partials, summed.
  double sq = dp.local_sq();
  if (o.shard != Shard::none && scalar.size() > 1 && !o.has(Fault::norm_not_all_reduced))
    scalar.all_reduce(&sq, &sq, 1, DType::f64);
  if (Component<T>* experts = ms.experts()) {
    double e = experts->local_sq();
    if (expert_scalar && expert_scalar->size() > 1) expert_scalar->all_reduce(&e, &e, 1, DType::f64);
    sq += e;
  }
  if (h.norm) h.norm(sq);
  StepStats st = finish_step(ms, cfg, step, loss, scalar.size() > 1 ? &scalar : nullptr, sq);
  st.seconds = clock->seconds(t0, clock->mark());  // waits for the step's last op
  dp.ops().synchronize();
  return st;
}

template <class T>
StepStats DpRank<T>::step() {
  StepHooks h;
  h.run = [&](int, int64_t first, double dloss) { return runner_->run(step_ + data_shift_, first, dloss, states_->hooks()); };
  const StepStats st = data_parallel_step(*states_, cfg_, runner_->Bm(), step_, groups_[Group::dp_scalar], h,
                                          groups_.find(Group::ep_scalar));
  this->times_.wall_s = this->times_.busy_s = st.seconds;  // no schedule: the step is the compute
  return st;
}

template <class T>
std::vector<double> DpRank<T>::gather(bool grads) {
  return states_->gather(grads, groups_[Group::check], layout_.total());
}

template <class T>
void DpRank<T>::save_state(RankCheckpointOut& out) {
  states_->save_state(out);
  out.step = step_;
  out.data_position = step_ + data_shift_;
}

template <class T>
void DpRank<T>::load_state(const RankCheckpointIn& in) {
  states_->load_state(in);
  const int64_t step = in.has(CkptFault::step_reset) ? 0 : in.step();
  const int64_t data = in.has(CkptFault::data_position) ? 0 : in.data_position();
  step_ = int(step);
  data_shift_ = int(data - step);
}

template <class T>
Declared DpRank<T>::declared(int steps) const {
  Declared d = declared_costs(o_, cfg_, steps);
  add_moe_capacity_comm(d, o_, cfg_, steps);
  return d;
}

#define PB_INSTANTIATE(T)                                                                                    \
  template StepStats data_parallel_step<T>(ModelStates<T>&, const TrainConfig&, int, int&, Communicator&,     \
                                           const StepHooks&, Communicator*);
PB_INSTANTIATE(double)
PB_INSTANTIATE(float)
PB_INSTANTIATE(bf16)
#undef PB_INSTANTIATE

template class DpRank<double>;
template class DpRank<float>;
template class DpRank<bf16>;

}  // namespace pb::dp
