#include "impl/tensor_parallel/tp_rank.h"

#include <chrono>
#include <cmath>

#include "harness/mesh.h"
#include "harness/status.h"
#include "impl/data_parallel/replay.h"
#include "impl/data_parallel/strategy.h"
#include "impl/expert_parallel/exchange.h"
#include "impl/expert_parallel/cost.h"
#include "impl/expert_parallel/ep_rank.h"
#include "impl/expert_parallel/options.h"
#include "impl/tensor_parallel/cost.h"
#include "impl/tensor_parallel/strategy.h"

namespace pb::tp {

template <class T>
TpRank<T>::TpRank(const RunSpec& s, Communicator& world, std::shared_ptr<const kernels::DeviceOps<T>> ops,
                  std::shared_ptr<DeviceMemory> memory)
    : spec_(s), o_(options_of(s)), ops_(kernels::ops_or_cpu<T>(std::move(ops))), device_memory_(std::move(memory)),
      full_layout_(s.train.model),
      layout_(s.train.model, s.mesh.tp, mesh_coord(s.mesh, world.rank()).tp),
      data_(s.train.model.V, s.train.data.seed, s.train.data.branching, s.train.data.mix) {
  require(world.size() == s.world(), "mesh: " + mesh_text(s.mesh) + " needs a world of " +
                                         std::to_string(s.world()) + " ranks, got " + std::to_string(world.size()));
  require(ops_->is_host() || device_memory_ != nullptr, "tp: a device rank needs the device's memory");
  mem_.set_device_memory(device_memory_.get());
  kernels::set_blas_threads(s.train.threads);
  // The component spans the dp x cp ranks (the same parameters, other tokens).
  dpo_ = component_options_of(s);
  comms_ = dp::make_dp_comms(world, s.mesh, dpo_, MeshAxis::dp_cp);
  tp_ = world.split_groups(mesh_groups(s.mesh, MeshAxis::tp), "tp");
  cp_ = world.split_groups(mesh_groups(s.mesh, MeshAxis::cp), "cp");
  scalar_ = world.split_groups(mesh_groups(s.mesh, MeshAxis::dp_cp), "dp_scalar");
  check_ = world.split_groups(whole_world(world.size()), "check");
  const TrainConfig& c = s.train;
  const MeshCoord me = mesh_coord(s.mesh, world.rank());
  MoeScope scope;  // a mixture-of-experts model's routing scope
  if (s.mesh.ep > 1) {  // expert parallel on the tp shard (expert_parallel/ep_rank.cc's structure)
    dp::DpOptions eo = ep::expert_options(s);
    expert_c_ = ep::make_expert_comms(world, s.mesh, eo, dpo_);
    ep_ = world.split_groups(mesh_groups(s.mesh, MeshAxis::ep), "ep");
    ep_scalar_ = world.split_groups(
        mesh_groups(s.mesh, eo.shard == dp::Shard::none ? MeshAxis::ep : MeshAxis::dp), "ep_scalar");
    dp_ = std::make_unique<dp::Component<T>>(dpo_, ep::dense_units(layout_), layout_, s.train.seed, comms_, mem_,
                                             *ops_);
    experts_ = std::make_unique<dp::Component<T>>(eo, ep::expert_units(layout_, s.mesh.ep, me.ep), layout_,
                                                  s.train.seed, expert_c_, mem_, *ops_);
    dense_h_ = dp::make_hooks(*dp_, layout_, mem_);
    expert_h_ = dp::make_hooks(*experts_, dp::UnitRoles::all_blocks(experts_->num_units()), mem_);
    hooks_ = std::make_unique<ep::DenseAndExpertHooks<T>>(*dense_h_, *expert_h_);
  } else {
    dp_ = std::make_unique<dp::Component<T>>(dpo_, dp::model_units(layout_), layout_, s.train.seed, comms_, mem_,
                                             *ops_);
    hooks_ = dp::make_hooks(*dp_, layout_, mem_);
  }
  if (c.model.moe.experts > 0) {
    if (dp::moe_shares_capacity(dpo_, c))  // the dp ranks (same tp rank) agree on admission
      moe_ = world.split_groups(mesh_groups(s.mesh, MeshAxis::dp), "moe");
    scope = ep::moe_scope(moe_.get(), ep_.get(), o_.tp > 1 ? tp_.get() : nullptr, dpo_.moe_faults);
  }
  runner_ = std::make_unique<TpRunner<T>>(layout_, o_, tp_.get(), s.mesh.cp > 1 ? cp_.get() : nullptr, data_, &mem_,
                                          c.batch / s.mesh.dp / c.microbatches, c.seq, scope, *ops_);
  // tp rank > 0 holds copies of the replicated parameters: the norm counts tp rank 0's.
  if (tp_->rank() > 0 && !o_.has(Fault::norm_tp_times)) {
    dp_->exclude_from_norm(layout_.replicated_ranges());
    if (experts_) experts_->exclude_from_norm(layout_.replicated_ranges());  // the experts' c_proj biases
  }
}

template <class T>
TpRank<T>::~TpRank() = default;

template <class T>
StepStats TpRank<T>::step() {
  const TrainConfig& c = spec_.train;
  dp::StepHooks h;
  h.run = [&](int, int64_t first, double dloss) { return runner_->run(step_, first, dloss, *hooks_); };
  h.synced = [&] {
    // SP: each rank's grads of the replicated parameters are partial (its tokens).
    if (o_.sp && o_.tp > 1 && !o_.has(Fault::skip_sp_grad_reduce))
      dp_->all_reduce_held_grads(layout_.replicated_ranges(), *tp_);
  };
  h.norm = [&](double& sq) {  // the other tp ranks' split parameters
    if (o_.tp > 1) tp_->all_reduce(&sq, &sq, 1, DType::f64);
  };
  h.data_rank = mesh_coord(spec_.mesh, check_->rank()).dp;  // cp ranks share their replica's samples
  if (o_.context.has(cp::Fault::loss_per_rank)) h.dloss_scale = o_.context.cp;  // by the tokens it holds
  const StepStats st = dp::data_parallel_step(*dp_, *hooks_, c, c.batch / spec_.mesh.dp / c.microbatches, step_,
                                              *scalar_, h, experts_.get(), ep_scalar_.get());
  times_.wall_s = times_.busy_s = st.seconds;
  return st;
}

template <class T>
std::vector<double> TpRank<T>::gather(bool grads) {
  std::vector<double> local(size_t(layout_.total()), 0.0);
  dp_->contribute(grads, local);  // this rank's share over dp, each element once
  if (experts_) experts_->contribute(grads, local);
  std::vector<double> full(size_t(full_layout_.total()), 0.0);
  add_to_full(layout_, full_layout_, tp_->rank(), local, full);
  check_->all_reduce(full.data(), full.data(), full.size(), DType::f64);
  return full;
}

template <class T>
double TpRank<T>::padding_max_abs(bool grads) {
  const int64_t C = layout_.model().C;
  const int64_t lo = std::clamp<int64_t>(layout_.model().V - layout_.vocab_begin(), 0, layout_.vocab_rows()) * C;
  const int64_t hi = layout_.vocab_rows() * C;  // wte is the first tensor: flat [0, rows*C)
  double m = 0;
  dp_->for_each_held(grads, [&](int64_t a, int64_t b, T* data) {
    const int64_t x = std::max(a, lo), y = std::min(b, hi);
    if (x >= y) return;
    std::vector<T> host(size_t(y - x));  // the held padding, read from the device's memory
    ops_->to_host(host.data(), data + (x - a), host.size() * sizeof(T));
    for (const T& v : host) m = std::max(m, std::abs(double(cast<double>(v))));
  });
  return m;
}

template <class T>
Declared TpRank<T>::declared(int steps) const {
  const TrainConfig& c = spec_.train;
  const std::vector<int64_t> units = unit_params(c.model, o_.tp);
  // ep > 1: the dense and expert components' states and comm (expert_parallel/cost.h, on the tp shard),
  // and the all-to-alls of the routing this rank recorded.
  Declared d = experts_ ? ep::declared_costs(spec_, steps) : dp::declared_costs(dpo_, c, steps, units);
  TpShape x = tp_shape(spec_);
  if (c.model.moe.experts > 0) {
    if (dp::moe_shares_capacity(dpo_, c)) x.moe_scope_tokens = int64_t(x.tokens()) * dpo_.dp;
    x.ep = spec_.mesh.ep;
    x.moe_on_device = !ops_->is_host();
    const MoeLoad& l = runner_->moe_load();
    if (experts_)
      d.add_comm("ep", CommOp::all_to_all, ep::a2a_bytes(c.model, l.calls, l.sent_rows, l.owner_rows, x.elem_bytes));
    else
      dp::add_moe_capacity_comm(d, dpo_, c, steps);  // (ep::declared_costs has it)
  }
  d.memory.push_back({"mem.activations", MemTag::activations, Place::device, activation_bytes(x)});
  const int64_t n = int64_t(steps) * c.microbatches;
  declare_cp_comm(d, x, c.model.L * n);
  if (o_.tp == 1) return d;
  TpComm m = comm_per_microbatch(x);
  int64_t moe_rows = 0;  // the MoE blocks: no MLP all-reduce each way; the experts' rows, from the recorded routing
  if (c.model.moe.experts > 0) {
    m.all_reduce -= 2 * int64_t(c.model.moe_layers()) * x.tokens() * c.model.C * x.elem_bytes;
    moe_rows = 2 * runner_->moe_load().owner_rows * c.model.C * x.elem_bytes;
  }
  // Per microbatch, then once per step: the norm's partial sum and, with SP,
  // the replicated parameters' gradients this rank holds.
  const MeshCoord me = mesh_coord(spec_.mesh, check_->rank());
  const int64_t held = o_.sp ? replicated_grads_held(spec_, me.cp + spec_.mesh.cp * me.dp) : 0;
  d.add_comm("tp", CommOp::all_reduce, m.all_reduce * n + moe_rows + step_bytes(o_.sp, held, x.elem_bytes) * steps);
  if (m.all_gather) d.add_comm("tp", CommOp::all_gather, m.all_gather * n);
  if (m.reduce_scatter) d.add_comm("tp", CommOp::reduce_scatter, m.reduce_scatter * n);
  return d;
}

template class TpRank<double>;
template class TpRank<float>;
template class TpRank<bf16>;

}  // namespace pb::tp
