#include "impl/data_parallel/model_states.h"

#include <cmath>

#include "impl/data_parallel/replay.h"
#include "impl/expert_parallel/exchange.h"

namespace pb::dp {

std::vector<UnitSpan> dense_units(const ParamLayout& l) {
  std::vector<UnitSpan> v = model_units(l);
  const ModelConfig& m = l.model();
  for (int i = 0; i < m.L; ++i)
    if (m.is_moe(i)) v[size_t(l.block_unit(i))].size = l.moe_block().expert0;
  return v;
}

std::vector<UnitSpan> expert_units(const ParamLayout& l, int ep, int ep_rank) {
  const ModelConfig& m = l.model();
  const MoeOffsets& o = l.moe_block();
  const int64_t El = m.moe.experts / ep, n = El * o.expert_size;
  std::vector<UnitSpan> v;
  for (int i = 0; i < m.L; ++i)
    if (m.is_moe(i)) v.push_back({l.unit_begin(l.block_unit(i)) + o.expert0 + ep_rank * n, n, true});
  return v;
}

DpComms make_expert_comms(Communicator& world, const MeshShape& mesh, DpOptions& experts, const DpOptions& dense,
                          MeshAxis dense_axis) {
  const bool wrong = dense.moe_faults.count(MoeFault::ep_expert_grads_dp) > 0;
  if (wrong) experts.dp = dense.dp, experts.ranks_per_node = dense.ranks_per_node;
  return make_dp_comms(world, mesh, experts, wrong ? dense_axis : MeshAxis::edp, kExpertGroupPrefix);
}

namespace {
// A stage's dense and expert hooks behind one unit numbering (dense units
// first); a step's start and finish go to both, dense first.
template <class T>
class DenseAndExpertStageHooks final : public StageHooks<T> {
 public:
  DenseAndExpertStageHooks(StageHooks<T>& dense, int dense_units, StageHooks<T>& experts)
      : d_(dense), e_(experts), nd_(dense_units) {}
  void start_step() override {
    d_.start_step();
    e_.start_step();
  }
  const T* params(int u, int version, bool backward) override {
    return u < nd_ ? d_.params(u, version, backward) : e_.params(u - nd_, version, backward);
  }
  void release_params(int u) override { u < nd_ ? d_.release_params(u) : e_.release_params(u - nd_); }
  T* grads(int mb, int u, int version) override {
    return u < nd_ ? d_.grads(mb, u, version) : e_.grads(mb, u - nd_, version);
  }
  void grads_ready(int mb, int u) override { u < nd_ ? d_.grads_ready(mb, u) : e_.grads_ready(mb, u - nd_); }
  T* head_grads(int mb, int wte, int version) override { return d_.head_grads(mb, wte, version); }
  void finish(const TiedGrad<T>& tied) override {
    d_.finish(tied);
    e_.finish({});  // the tied rows are dense
  }
  void keep_version(int k) override {
    d_.keep_version(k);
    e_.keep_version(k);
  }
  void bring_grads(int k) override {
    d_.bring_grads(k);
    e_.bring_grads(k);
  }
  int version() const override { return d_.version(); }
  bool idle() const override { return d_.idle() && e_.idle(); }

 private:
  StageHooks<T>& d_;
  StageHooks<T>& e_;
  int nd_;
};
}  // namespace

template <class T>
ModelStates<T>::ModelStates(StatesPlan plan, Communicator& world, const MeshShape& mesh, const ParamLayout& layout,
                            uint64_t seed, MemoryTracker& mem, const kernels::DeviceOps<T>& ops)
    : ops_(&ops) {
  if (plan.dense.moe_faults.count(MoeFault::ep_grads_ep_times)) inflate_ = mesh.ep;
  dense_c_ = make_dp_comms(world, mesh, plan.dense, plan.axis);
  if (plan.split_experts) expert_c_ = make_expert_comms(world, mesh, plan.experts, plan.dense, plan.axis);
  dense_ = std::make_unique<Component<T>>(plan.dense, std::move(plan.units), layout, seed, dense_c_, mem, ops);
  if (plan.split_experts && !plan.expert_units.empty())
    experts_ = std::make_unique<Component<T>>(plan.experts, std::move(plan.expert_units), layout, seed, expert_c_,
                                              mem, ops);
  if (plan.driver == StatesPlan::Driver::stage) {
    dense_s_ = make_stage_hooks(*dense_, plan.stage, mem);
    stage_ = dense_s_.get();
    if (!experts_) return;
    StagePlan ep;  // PipeDream-2BW keeps two versions of the experts too
    ep.two_versions = plan.stage.two_versions;
    expert_s_ = make_stage_hooks(*experts_, ep, mem);
    both_s_ = std::make_unique<DenseAndExpertStageHooks<T>>(*dense_s_, dense_->num_units(), *expert_s_);
    stage_ = both_s_.get();
    return;
  }
  dense_h_ = make_hooks(*dense_, layout, mem);
  hooks_ = dense_h_.get();
  if (!experts_) return;
  expert_h_ = make_hooks(*experts_, UnitRoles::all_blocks(experts_->num_units()), mem);
  both_ = std::make_unique<DenseAndExpertHooks<T>>(*dense_h_, *expert_h_);
  hooks_ = both_.get();
}

template <class T>
ModelStates<T>::~ModelStates() = default;

template <class T>
void ModelStates<T>::exclude_from_norm(const std::vector<std::pair<int64_t, int64_t>>& ranges) {
  dense_->exclude_from_norm(ranges);
  if (experts_) experts_->exclude_from_norm(ranges);  // the experts' c_proj biases
}

template <class T>
void ModelStates<T>::save_state(RankCheckpointOut& out) const {
  dense_->save_state(out);
  if (experts_) experts_->save_state(out);
}

template <class T>
void ModelStates<T>::load_state(const RankCheckpointIn& in) {
  dense_->load_state(in);
  if (experts_) experts_->load_state(in);
}

template <class T>
void ModelStates<T>::zero_grads() {
  dense_->zero_grads();
  if (experts_) experts_->zero_grads();
}

template <class T>
void ModelStates<T>::inflate_expert_grads() {
  if (!experts_ || inflate_ == 1) return;
  experts_->for_each_held(/*grads=*/true, [&](int64_t lo, int64_t hi, T* g) {
    for (int k = 1; k < inflate_; k *= 2) ops_->accumulate(g, g, size_t(hi - lo));
  });
}

template <class T>
void ModelStates<T>::step(const OptimConfig& oc, long t, double lr, double clip) {
  dense_->step(oc, t, lr, clip);
  if (experts_) experts_->step(oc, t, lr, clip);
}

template <class T>
std::vector<double> ModelStates<T>::gather(
    bool grads, Communicator& check, int64_t total,
    const std::function<std::vector<double>(const std::vector<double>&)>& place) const {
  std::vector<double> full(size_t(total), 0.0);
  dense_->contribute(grads, full);  // this rank's share over dp, each element once
  if (experts_) experts_->contribute(grads, full);
  if (place) full = place(full);
  check.all_reduce(full.data(), full.data(), full.size(), DType::f64);
  return full;
}

MoeScope make_moe_scope(const DpOptions& dense, const TrainConfig& cfg, RankGroups& g, Communicator* tp) {
  if (cfg.model.moe.experts == 0) return {};
  Communicator* ep = g.mesh().ep > 1 ? g.split(Group::ep, MeshAxis::ep) : nullptr;
  // The dp ranks (same tp rank) agree on admission by exchanging counts.
  Communicator* capacity = moe_shares_capacity(dense, cfg) ? g.split(Group::moe, MeshAxis::dp) : nullptr;
  return ep::moe_scope(capacity, ep, tp && tp->size() > 1 ? tp : nullptr, dense.moe_faults);
}

template <class T>
void apply_update(ModelStates<T>& ms, const TrainConfig& cfg, long t, double norm) {
  ms.step(cfg.optim, t, lr_at(cfg.optim, int(t), cfg.steps), clip_factor(norm, cfg.optim.clip));
}

template <class T>
StepStats finish_step(ModelStates<T>& ms, const TrainConfig& cfg, int& step, double loss, Communicator* loss_group,
                      double sq) {
  if (loss_group) loss_group->all_reduce(&loss, &loss, 1, DType::f64);
  StepStats st;
  st.step = ++step;
  st.loss = loss / double(cfg.tokens_per_step());
  st.grad_norm = std::sqrt(sq);
  st.lr = lr_at(cfg.optim, st.step, cfg.steps);
  apply_update(ms, cfg, st.step, st.grad_norm);
  return st;
}

#define PB_INSTANTIATE(T)                                                                                  \
  template class ModelStates<T>;                                                                          \
  template void apply_update<T>(ModelStates<T>&, const TrainConfig&, long, double);                       \
  template StepStats finish_step<T>(ModelStates<T>&, const TrainConfig&, int&, double, Communicator*, double);
PB_INSTANTIATE(double)
PB_INSTANTIATE(float)
PB_INSTANTIATE(bf16)
#undef PB_INSTANTIATE

}  // namespace pb::dp
