#include "impl/data_parallel/dp_rank.h"

#include <cmath>

#include "harness/mesh.h"
#include "harness/status.h"
#include "impl/data_parallel/replay.h"
#include "impl/data_parallel/strategy.h"
#include "impl/expert_parallel/exchange.h"

namespace pb::dp {

template <class T>
DpRank<T>::DpRank(const TrainConfig& cfg, const DpOptions& o, Communicator& world,
                  std::shared_ptr<const kernels::DeviceOps<T>> ops, std::shared_ptr<DeviceMemory> memory)
    : cfg_((validate(o, cfg), cfg)), o_(o), ops_(kernels::ops_or_cpu<T>(std::move(ops))),
      device_memory_(std::move(memory)), layout_(cfg.model), data_(cfg.model.V, cfg.data.seed, cfg.data.branching, cfg.data.mix) {
  require(ops_->is_host() || device_memory_ != nullptr, "dp: a device rank needs the device's memory");
  mem_.set_device_memory(device_memory_.get());
  require(world.size() == o.dp, "mesh: dp" + std::to_string(o.dp) + " needs a world of " +
                                    std::to_string(o.dp) + " ranks, got " + std::to_string(world.size()));
  kernels::set_blas_threads(cfg.threads);
  const MeshShape mesh{o.dp, 1, 1, 1, o.ranks_per_node};
  comms_ = make_dp_comms(world, mesh, o);
  scalar_ = world.split_groups(mesh_groups(mesh, MeshAxis::dp), "dp_scalar");
  check_ = world.split_groups(whole_world(world.size()), "check");
  dp_ = std::make_unique<Component<T>>(o, model_units(layout_), layout_, cfg.seed, comms_, mem_, *ops_);
  if (moe_shares_capacity(o, cfg))  // the ranks agree on admission by exchanging counts
    moe_ = world.split_groups(mesh_groups(mesh, MeshAxis::dp), "moe");
  const MoeScope scope = ep::moe_scope(moe_.get(), nullptr, nullptr, o.moe_faults);
  runner_ = std::make_unique<MicrobatchRunner<T>>(layout_, data_, &mem_, cfg.batch / o.dp / cfg.microbatches,
                                                  cfg.seq, scope, *ops_);
  hooks_ = make_hooks(*dp_, layout_, mem_);
}

template <class T>
DpRank<T>::~DpRank() = default;

template <class T>
StepStats data_parallel_step(Component<T>& dp, FamilyHooks<T>& hooks, const TrainConfig& cfg, int Bm, int& step,
                             Communicator& scalar, const StepHooks& h, Component<T>* experts,
                             Communicator* expert_scalar) {
  const std::unique_ptr<kernels::DeviceTimeline> clock = dp.ops().timeline();  // the step's time on the device
  const int t0 = clock->mark();
  const DpOptions& o = dp.options();
  const int micro = cfg.microbatches, per_rank = Bm * micro;
  const double tokens = o.has(Fault::grad_not_averaged) ? double(per_rank) * cfg.seq : double(cfg.tokens_per_step());
  dp.zero_grads();
  if (experts) experts->zero_grads();
  double loss = 0;
  for (int k = 0; k < micro; ++k) {
    hooks.start_microbatch(k, micro);
    const int64_t data_rank = h.data_rank >= 0 ? h.data_rank : dp.dp().rank();
    loss += h.run(k, data_rank * per_rank + int64_t(k) * Bm, h.dloss_scale / tokens);
    if (k == 0 && o.has(Fault::sync_wrong_microbatch)) hooks.finish();
  }
  hooks.finish();
  if (h.synced) h.synced();
  if (scalar.size() > 1) scalar.all_reduce(&loss, &loss, 1, DType::f64);
  // DDP: every rank holds the reduced gradient; sharded: partials, summed.
  double sq = dp.local_sq();
  if (o.shard != Shard::none && scalar.size() > 1) scalar.all_reduce(&sq, &sq, 1, DType::f64);
  if (experts) {
    double e = experts->local_sq();
    if (expert_scalar && expert_scalar->size() > 1) expert_scalar->all_reduce(&e, &e, 1, DType::f64);
    sq += e;
  }
  if (h.norm) h.norm(sq);
  StepStats st;
  st.step = ++step;
  st.loss = loss / double(cfg.tokens_per_step());
  st.grad_norm = std::sqrt(sq);
  st.lr = lr_at(cfg.optim, st.step, cfg.steps);
  const double clip = clip_factor(st.grad_norm, cfg.optim.clip);
  dp.step(cfg.optim, st.step, st.lr, clip);
  if (experts) experts->step(cfg.optim, st.step, st.lr, clip);
  st.seconds = clock->seconds(t0, clock->mark());  // waits for the step's last op
  dp.ops().synchronize();
  return st;
}

template <class T>
StepStats DpRank<T>::step() {
  StepHooks h;
  h.run = [&](int, int64_t first, double dloss) { return runner_->run(step_, first, dloss, *hooks_); };
  const StepStats st = data_parallel_step(*dp_, *hooks_, cfg_, runner_->Bm(), step_, *scalar_, h);
  times_.wall_s = times_.busy_s = st.seconds;  // no schedule: the step is the compute
  return st;
}

template <class T>
std::vector<double> DpRank<T>::full_params() {
  return dp_->gather_full(/*grads=*/false, *check_, layout_.total());
}

template <class T>
std::vector<double> DpRank<T>::full_grads() {
  return dp_->gather_full(/*grads=*/true, *check_, layout_.total());
}

template <class T>
Declared DpRank<T>::declared(int steps) const {
  Declared d = declared_costs(o_, cfg_, steps);
  add_moe_capacity_comm(d, o_, cfg_, steps);
  return d;
}

#define PB_INSTANTIATE(T)                                                                                       \
  template StepStats data_parallel_step<T>(Component<T>&, FamilyHooks<T>&, const TrainConfig&, int, int&,           \
                                           Communicator&, const StepHooks&, Component<T>*, Communicator*);
PB_INSTANTIATE(double)
PB_INSTANTIATE(float)
PB_INSTANTIATE(bf16)
#undef PB_INSTANTIATE

template class DpRank<double>;
template class DpRank<float>;
template class DpRank<bf16>;

}  // namespace pb::dp
