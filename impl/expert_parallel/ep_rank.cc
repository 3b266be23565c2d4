#include "impl/expert_parallel/ep_rank.h"

#include <algorithm>

#include "harness/mesh.h"
#include "harness/status.h"
#include "impl/data_parallel/replay.h"
#include "impl/data_parallel/strategy.h"
#include "impl/expert_parallel/exchange.h"
#include "impl/expert_parallel/cost.h"
#include "impl/expert_parallel/options.h"

namespace pb::ep {

template <class T>
EpRank<T>::EpRank(const RunSpec& s, Communicator& world, std::shared_ptr<const kernels::DeviceOps<T>> ops,
                  std::shared_ptr<DeviceMemory> memory)
    : spec_(s), dense_o_(dp::options_of(s)), expert_o_(expert_options(s)),
      ops_(kernels::ops_or_cpu<T>(std::move(ops))), device_memory_(std::move(memory)), layout_(s.train.model),
      data_(s.train.model.V, s.train.data.seed, s.train.data.branching, s.train.data.mix) {
  require(ops_->is_host() || device_memory_ != nullptr, "ep: a device rank needs the device's memory");
  mem_.set_device_memory(device_memory_.get());
  require(world.size() == s.world(), "mesh: " + mesh_text(s.mesh) + " needs a world of " +
                                         std::to_string(s.world()) + " ranks, got " + std::to_string(world.size()));
  const TrainConfig& c = s.train;
  kernels::set_blas_threads(c.threads);
  const MeshCoord me = mesh_coord(s.mesh, world.rank());
  dense_c_ = dp::make_dp_comms(world, s.mesh, dense_o_, MeshAxis::dp);
  expert_c_ = make_expert_comms(world, s.mesh, expert_o_, dense_o_);
  ep_ = world.split_groups(mesh_groups(s.mesh, MeshAxis::ep), "ep");
  scalar_ = world.split_groups(mesh_groups(s.mesh, MeshAxis::dp), "dp_scalar");
  ep_scalar_ = world.split_groups(
      mesh_groups(s.mesh, expert_o_.shard == dp::Shard::none ? MeshAxis::ep : MeshAxis::dp), "ep_scalar");
  check_ = world.split_groups(whole_world(world.size()), "check");
  dense_ = std::make_unique<dp::Component<T>>(dense_o_, dense_units(layout_), layout_, c.seed, dense_c_, mem_, *ops_);
  experts_ = std::make_unique<dp::Component<T>>(expert_o_, expert_units(layout_, s.mesh.ep, me.ep), layout_, c.seed,
                                                expert_c_, mem_, *ops_);
  if (dp::moe_shares_capacity(dense_o_, c))  // the dp ranks agree on admission by exchanging counts
    moe_ = world.split_groups(mesh_groups(s.mesh, MeshAxis::dp), "moe");
  const MoeScope scope = moe_scope(moe_.get(), ep_.get(), nullptr, dense_o_.moe_faults);
  runner_ = std::make_unique<MicrobatchRunner<T>>(layout_, data_, &mem_, c.batch / s.mesh.dp / c.microbatches, c.seq,
                                                  scope, *ops_);
  dense_h_ = dp::make_hooks(*dense_, layout_, mem_);
  expert_h_ = dp::make_hooks(*experts_, dp::UnitRoles::all_blocks(experts_->num_units()), mem_);
  hooks_ = std::make_unique<DenseAndExpertHooks<T>>(*dense_h_, *expert_h_);
}

template <class T>
EpRank<T>::~EpRank() = default;

template <class T>
StepStats EpRank<T>::step() {
  const TrainConfig& c = spec_.train;
  dp::StepHooks h;
  h.run = [&](int, int64_t first, double dloss) { return runner_->run(step_, first, dloss, *hooks_); };
  const StepStats st = dp::data_parallel_step(*dense_, *hooks_, c, runner_->Bm(), step_, *scalar_, h,
                                              experts_.get(), ep_scalar_.get());
  times_.wall_s = times_.busy_s = st.seconds;
  return st;
}

template <class T>
std::vector<double> EpRank<T>::gather(bool grads) {
  std::vector<double> full(size_t(layout_.total()), 0.0);
  dense_->contribute(grads, full);
  experts_->contribute(grads, full);
  check_->all_reduce(full.data(), full.data(), full.size(), DType::f64);
  return full;
}

template <class T>
std::vector<double> EpRank<T>::full_params() {
  return gather(false);
}

template <class T>
std::vector<double> EpRank<T>::full_grads() {
  return gather(true);
}

template <class T>
Declared EpRank<T>::declared(int steps) const {
  // The all-to-alls from the routing this rank recorded (every step since
  // construction: the conformance engine declares a fresh rank's whole run).
  Declared d = declared_costs(spec_, steps);
  const MoeLoad& l = runner_->moe_load();
  d.add_comm("ep", CommOp::all_to_all, a2a_bytes(spec_.train.model, l.calls, l.sent_rows, l.owner_rows, int(sizeof(T))));
  return d;
}

template class EpRank<double>;
template class EpRank<float>;
template class EpRank<bf16>;

}  // namespace pb::ep
