#include "impl/tensor_parallel/tp_rank.h"

#include <chrono>
#include <cmath>

#include "harness/mesh.h"
#include "harness/status.h"
#include "impl/data_parallel/replay.h"
#include "impl/data_parallel/strategy.h"
#include "impl/expert_parallel/exchange.h"
#include "impl/expert_parallel/cost.h"
#include "impl/expert_parallel/options.h"
#include "impl/context_parallel/options.h"
#include "impl/tensor_parallel/cost.h"
#include "impl/tensor_parallel/strategy.h"

namespace pb::tp {

template <class T>
TpRank<T>::TpRank(const RunSpec& s, Communicator& world, RankOps<T> ops, RankMemory memory)
    : RankBase<T>("tp", world, s.world(), mesh_text(s.mesh), s.train.threads, std::move(ops), std::move(memory)),
      spec_(s), o_(options_of(s)), full_layout_(s.train.model),
      layout_(s.train.model, s.mesh.tp, mesh_coord(s.mesh, world.rank()).tp),
      data_(s.train.model.V, s.train.data.seed, s.train.data.branching, s.train.data.mix), groups_(world, s.mesh) {
  const TrainConfig& c = s.train;
  // The component spans the dp x cp ranks (the same parameters, other tokens).
  dpo_ = component_options_of(s);
  dp::StatesPlan plan;
  plan.dense = dpo_;
  plan.axis = MeshAxis::dp_cp;
  plan.split_experts = s.mesh.ep > 1;  // expert parallel on the tp shard (expert_parallel/ep_rank.h's structure)
  if (plan.split_experts) {
    plan.units = dp::dense_units(layout_);
    plan.experts = ep::expert_options(s);
    plan.expert_units = dp::expert_units(layout_, s.mesh.ep, groups_.coord().ep);
  } else {
    plan.units = dp::model_units(layout_);
  }
  const bool expert_shards = plan.experts.shard != dp::Shard::none;
  states_ = std::make_unique<dp::ModelStates<T>>(plan, world, s.mesh, layout_, c.seed, this->mem_, *this->ops_);
  Communicator& tp = *groups_.split(Group::tp, MeshAxis::tp);
  Communicator& cp = *groups_.split(Group::cp, MeshAxis::cp);
  groups_.split(Group::dp_scalar, MeshAxis::dp_cp);
  groups_.split_world(Group::check);
  // The experts' norm partials: over ep (DDP: every edp replica holds them
  // whole), sharded over every rank of the dp (x cp) group.
  if (s.mesh.ep > 1) groups_.split(Group::ep_scalar, expert_shards ? MeshAxis::dp_cp : MeshAxis::ep);
  kv_replicated_ = c.model.llama() && s.mesh.tp > 1 && c.model.kv_heads % s.mesh.tp != 0;
  MoeScope moe = s.mesh.cp > 1 ? context_moe_scope(data_options_of(s), c, s.context.zigzag, groups_, &tp)
                                : dp::make_moe_scope(dpo_, c, groups_, &tp);
  if (o_.has(Fault::gate_up_mismatch)) moe.faults.insert(MoeFault::expert_gate_up_mismatch);  // the experts' too
  runner_ = std::make_unique<TpRunner<T>>(layout_, o_, &tp, s.mesh.cp > 1 ? &cp : nullptr, data_, &this->mem_,
                                          c.batch / s.mesh.dp / c.microbatches, c.seq, std::move(moe), *this->ops_);
  this->track_moe_load(*runner_);
  // tp rank > 0 holds copies of the replicated parameters: the norm counts tp rank 0's.
  if (tp.rank() > 0 && !o_.has(Fault::norm_tp_times)) states_->exclude_from_norm(layout_.replicated_ranges());
}

template <class T>
TpRank<T>::~TpRank() = default;

// Context parallel: the cp ranks of a data rank share its microbatch's
// capacity and load-balancing statistics (global capacity over dp >= 2: every
// dp x cp rank of the tp rank), their tokens placed in the microbatch's token
// order (reference/moe.h MoeScope::order): capacity rank r = d * cp + c holds
// data rank d's sequences' tokens at cp rank c's positions.
MoeScope context_moe_scope(const dp::DpOptions& data, const TrainConfig& cfg, bool zigzag, RankGroups& g,
                           Communicator* tp) {
  if (cfg.model.moe.experts == 0) return {};
  const MeshShape& mesh = g.mesh();
  const bool joint = dp::moe_shares_capacity(data, cfg);
  Communicator* cap = g.split(Group::moe, joint ? MeshAxis::dp_cp : MeshAxis::cp);
  // Expert parallel: the ep group folds over dp x cp (harness/mesh.h), so it
  // may hold cp ranks of one data rank and ranks of several; each sends its
  // own tokens' admitted rows to their experts' owners.
  Communicator* ep = mesh.ep > 1 ? g.split(Group::ep, MeshAxis::ep) : nullptr;
  MoeScope sc = ep::moe_scope(cap, ep, tp && tp->size() > 1 ? tp : nullptr, data.moe_faults);
  const int cp = mesh.cp, Tn = cfg.seq, Bm = cfg.batch / mesh.dp / cfg.microbatches, Tl = Tn / cp;
  const int64_t N = int64_t(Bm) * Tl;
  auto order = std::make_shared<std::vector<int64_t>>();
  for (int r = 0; r < cap->size(); ++r) {
    const cp::Placement place(Tn, cp, r % cp, zigzag);
    for (int64_t n = 0; n < N; ++n)
      order->push_back(int64_t(r / cp) * Bm * Tn + (n / Tl) * Tn + place.position(int(n % Tl)));
  }
  sc.order = std::move(order);
  return sc;
}

template <class T>
StepStats TpRank<T>::step() {
  const TrainConfig& c = spec_.train;
  Communicator& tp = groups_[Group::tp];
  dp::StepHooks h;
  h.run = [&](int, int64_t first, double dloss) { return runner_->run(step_ + data_shift_, first, dloss, states_->hooks()); };
  h.synced = [&] {
    // SP: each rank's grads of the replicated parameters are partial (its tokens);
    // llama with kv_heads < tp: the replicated k/v ones (its q heads), with or without SP.
    if (o_.sp && o_.tp > 1 && !o_.has(Fault::skip_sp_grad_reduce))
      states_->dense().all_reduce_held_grads(tp_reduced_ranges(layout_, true), tp);
    else if (!o_.sp && kv_replicated_)
      states_->dense().all_reduce_held_grads(tp_reduced_ranges(layout_, false), tp);
  };
  h.norm = [&](double& sq) {  // the other tp ranks' split parameters
    if (o_.tp > 1) tp.all_reduce(&sq, &sq, 1, DType::f64);
  };
  h.data_rank = groups_.coord().dp;  // cp ranks share their replica's samples
  if (o_.context.has(cp::Fault::loss_per_rank)) h.dloss_scale = o_.context.cp;  // by the tokens it holds
  const StepStats st = dp::data_parallel_step(*states_, c, c.batch / spec_.mesh.dp / c.microbatches, step_,
                                              groups_[Group::dp_scalar], h, groups_.find(Group::ep_scalar));
  this->times_.wall_s = this->times_.busy_s = st.seconds;
  return st;
}

template <class T>
void TpRank<T>::save_state(RankCheckpointOut& out) {
  out.use_layout(layout_);
  states_->save_state(out);
  out.step = step_;
  out.data_position = step_ + data_shift_;
}

template <class T>
void TpRank<T>::load_state(const RankCheckpointIn& in) {
  states_->load_state(in.with_layout(layout_));
  const int64_t step = in.has(CkptFault::step_reset) ? 0 : in.step();
  const int64_t data = in.has(CkptFault::data_position) ? 0 : in.data_position();
  step_ = int(step);
  data_shift_ = int(data - step);
}

template <class T>
std::vector<double> TpRank<T>::gather(bool grads) {
  const int tp_rank = groups_[Group::tp].rank();
  return states_->gather(grads, groups_[Group::check], layout_.total(), [&](const std::vector<double>& local) {
    std::vector<double> full(size_t(full_layout_.total()), 0.0);
    add_to_full(layout_, full_layout_, tp_rank, local, full);
    return full;
  });
}

template <class T>
double TpRank<T>::padding_max_abs(bool grads) {
  const int64_t C = layout_.model().C;
  const int64_t lo = std::clamp<int64_t>(layout_.model().V - layout_.vocab_begin(), 0, layout_.vocab_rows()) * C;
  const int64_t hi = layout_.vocab_rows() * C;  // wte is the first tensor: flat [0, rows*C)
  double m = 0;
  states_->dense().for_each_held(grads, [&](int64_t a, int64_t b, T* data) {
    const int64_t x = std::max(a, lo), y = std::min(b, hi);
    if (x >= y) return;
    std::vector<T> host(size_t(y - x));  // the held padding, read from the device's memory
    this->ops_->to_host(host.data(), data + (x - a), host.size() * sizeof(T));
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
  const bool experts = spec_.mesh.ep > 1;
  Declared d = experts ? ep::declared_costs(spec_, steps) : dp::declared_costs(dpo_, c, steps, units);
  TpShape x = tp_shape(spec_);
  if (c.model.moe.experts > 0) {
    const MoeScope& sc = runner_->moe_scope();
    if (sc.shared(c.model.moe)) x.moe_scope_tokens = int64_t(x.tokens()) * sc.capacity_ranks();
    x.ep = spec_.mesh.ep;
    x.moe_on_device = !this->ops_->is_host();
    const MoeLoad& l = runner_->moe_load();
    // Full recompute reruns each MoE block's forward (the same routing): its
    // count exchanges, dispatch and combine once more.
    const bool rerun = o_.recompute == Recompute::full;
    if (experts)
      d.add_comm(Group::ep, CommOp::all_to_all,
                 ep::a2a_bytes(c.model, l.calls, l.sent_rows, l.owner_rows, x.elem_bytes) +
                     (rerun ? l.calls * c.model.moe.experts * 8 + (l.sent_rows + l.owner_rows) * c.model.C * x.elem_bytes
                            : 0));
    if (sc.order) {  // context parallel: every token's choices gathered, the probability sums all-reduced
      const int64_t calls = int64_t(steps) * c.microbatches * c.model.moe_layers() * (rerun ? 2 : 1);
      d.add_comm(Group::moe, CommOp::all_gather,
                 calls * sc.capacity_ranks() * x.tokens() * c.model.moe.top_k * 8);
      d.add_comm(Group::moe, CommOp::all_reduce, calls * c.model.moe.experts * 8);
    } else if (!experts) {
      dp::add_moe_capacity_comm(d, dpo_, c, steps, c.model.moe_layers() * (rerun ? 2 : 1));  // (ep::declared_costs has it)
    }
  }
  d.memory.push_back({"mem.activations", MemTag::activations, Place::device, activation_bytes(x)});
  const int64_t n = int64_t(steps) * c.microbatches;
  declare_cp_comm(d, x, c.model.L * n);
  if (o_.tp == 1) return d;
  TpComm m = comm_per_microbatch(x);
  int64_t moe_rows = 0;  // the MoE blocks: no MLP all-reduce each way; the experts' rows, from the recorded routing
  if (c.model.moe.experts > 0) {  // (full recompute: the rerun's MLP all-reduce and expert rows too)
    const int64_t passes = o_.recompute == Recompute::full ? 3 : 2;
    // (SP: the MLP's reduce-scatter each way; its gathers of ln2 and of the output's gradient stay)
    (o_.sp ? m.reduce_scatter : m.all_reduce) -=
        passes * int64_t(c.model.moe_layers()) * x.tokens() * c.model.C * x.elem_bytes;
    moe_rows = passes * runner_->moe_load().owner_rows * c.model.C * x.elem_bytes;
  }
  // Per microbatch, then once per step: the norm's partial sum and, with SP,
  // the replicated parameters' gradients this rank holds.
  const MeshCoord me = groups_.coord();
  const bool reduced = o_.sp || kv_replicated_;
  const int64_t held = reduced ? replicated_grads_held(spec_, me.cp + spec_.mesh.cp * me.dp) : 0;
  d.add_comm(Group::tp, CommOp::all_reduce,
             m.all_reduce * n + moe_rows + step_bytes(reduced, held, x.elem_bytes) * steps);
  if (m.all_gather) d.add_comm(Group::tp, CommOp::all_gather, m.all_gather * n);
  if (m.reduce_scatter) d.add_comm(Group::tp, CommOp::reduce_scatter, m.reduce_scatter * n);
  return d;
}

template class TpRank<double>;
template class TpRank<float>;
template class TpRank<bf16>;

}  // namespace pb::tp
