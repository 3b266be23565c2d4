// Pipeline executor, part 1: setup and the action loop (executor.h).
#include "impl/pipeline/executor.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "harness/mesh.h"
#include "harness/status.h"
#include "impl/context_parallel/options.h"
#include "impl/data_parallel/replay.h"
#include "impl/expert_parallel/exchange.h"
#include "impl/expert_parallel/options.h"
#include "impl/pipeline/validate.h"
#include "impl/tensor_parallel/strategy.h"
#include "impl/tensor_parallel/tp_rank.h"
#include "reference/init.h"

namespace pb::pipeline {

template <class T>
struct PipelineRank<T>::Live {
  Buffer<T> x_in;  // the chunk's input: embedded, received, or handed over locally
  Buffer<int32_t> tokens, targets;
  std::vector<BlockActs<T>> blocks;
  std::vector<BlockGradStash<T>> stash;
  std::vector<MoeActs<T>> moe;  // per block; empty for dense ones
  HeadActs<T> head;
  std::vector<typename tp::TpModel<T>::Block> tblocks;  // tp > 1
  std::vector<typename tp::TpModel<T>::Stash> tstash;   // tp > 1, split backward: B -> W
  typename tp::TpModel<T>::Head thead;
  Request act_send;
  const T* out() const { return tblocks.empty() ? blocks.back().xout.data() : tblocks.back().xout.data(); }
};

namespace {
Schedule build_schedule(const PipelineOptions& o, const TrainConfig& cfg) {
  Schedule s = make_schedule(o.kind, schedule_config(o, cfg));
  validate(s);  // before it runs, and before any fault edits it
  if (o.faults.skip_microbatch) {
    const int skip = s.microbatches - 1;
    for (auto& acts : s.ranks)
      acts.erase(std::remove_if(acts.begin(), acts.end(), [&](const Action& a) { return a.microbatch % s.microbatches == skip; }),
                 acts.end());
  }
  return s;
}

// data.ranks_per_node counts data-parallel ranks (a replica's tp x cp ranks share its node).
MeshShape mesh_of(const PipelineOptions& o) {
  return {o.dp(), o.tp(), o.cp(), o.pp, o.data.ranks_per_node * o.tp() * o.cp(), o.ep};
}

}  // namespace

dp::DpOptions PipelineOptions::component() const { return tp::component_options(data, cp()); }

template <class T>
PipelineRank<T>::PipelineRank(const TrainConfig& cfg, const PipelineOptions& o, Communicator& world,
                              RankOps<T> ops, RankMemory memory)
    : RankBase<T>((validate(o, cfg, world.size()), "pipeline"), world, world_size(mesh_of(o)), mesh_text(mesh_of(o)),
                  cfg.threads, std::move(ops), std::move(memory)),
      cfg_(cfg), o_(o), layout_(cfg.model, o.tp(), mesh_coord(mesh_of(o), world.rank()).tp), full_layout_(cfg.model),
      data_(cfg.model.V, cfg.data.seed, cfg.data.branching, cfg.data.mix),
      part_(partition_layers(cfg.model.L, o.pp, o.virtual_stages)), s_(build_schedule(o, cfg)),
      su_(stage_units(layout_, part_, 0)), groups_(world, mesh_of(o)),
      model_(layout_, cfg.batch / (o.dp() * cfg.microbatches), cfg.seq, *ops_) {
  clock_ = ops_->timeline();
  step_clock_ = ops_->timeline();
  this->track_moe_load(load_);
  // Without tags (nccl) a pair's messages match in order, and sends complete
  // only once received: the schedule must run with grouped posting, and
  // where it deadlocks so, posted as Megatron posts it (one exchange around
  // each F-backward pair; validate.h posted_without_tags).
  if (!world.matches_tags()) {
    s_ = posted_without_tags(std::move(s_), "the " + std::string(world.backend()) + " backend");
  }
  // Message tags are dense indices (schedule.h); MPI guarantees tags up to 32767 only.
  require(world.backend() == "local" || !world.matches_tags() || num_messages(s_) <= 32767,
          "microbatches: " + std::to_string(num_messages(s_)) +
              " distinct pipeline messages exceed the tag range MPI guarantees (32767)");
  const MeshShape& mesh = groups_.mesh();
  const MeshCoord mc = groups_.coord();
  pr_ = mc.pp;
  dr_ = mc.dp;
  tr_ = mc.tp;
  cr_ = mc.cp;
  m_ = cfg.microbatches;
  Bm_ = model_.B();
  pp_ = groups_.split(Group::pp, MeshAxis::pp);
  std::vector<std::vector<int>> tied;  // {first, last} of every pipeline replica
  if (o.pp > 1)
    for (const auto& g : mesh_groups(mesh, MeshAxis::pp)) tied.push_back({g.front(), g.back()});
  tied_ = groups_.split(Group::pp_tied, tied);
  su_ = stage_units(layout_, part_, pr_);
  dp::StatesPlan plan;  // every rank splits the expert groups (collective); a stage without MoE blocks holds none
  plan.dense = o.component();
  plan.units = su_.units;
  plan.axis = MeshAxis::dp_cp;
  plan.driver = dp::StatesPlan::Driver::stage;  // the actions meet the components through the stage hooks
  plan.stage.two_versions = s_.async_weights;
  plan.stage.head_rows = o.pp == 1 && su_.head == su_.wte ? layout_.wpe_offset() : 0;
  if (cfg.model.moe.experts > 0) {
    se_ = stage_experts(layout_, part_, pr_, o.ep, mc.ep);
    plan.split_experts = true;
    plan.experts = o.experts;
    plan.expert_units = se_.units;
  }
  states_ = std::make_unique<dp::ModelStates<T>>(std::move(plan), world, mesh, layout_, cfg.seed, mem_, *ops_);
  hooks_ = &states_->stage_hooks();
  scalar_ = groups_.split_world(Group::pp_scalar);
  check_ = groups_.split_world(Group::check);
  if (o.tp() > 1) tp_ = groups_.split(Group::tp, MeshAxis::tp);
  if (o.cp() > 1) cp_ = groups_.split(Group::cp, MeshAxis::cp);
  replicated_ = layout_.replicated_ranges();
  // (an MoE model: the experts' replicated c_proj biases too)
  if (tr_ > 0 && !o.tensor.has(tp::Fault::norm_tp_times)) states_->exclude_from_norm(replicated_);
  // Summed over tp once per step: SP's replicated gradients, or (llama,
  // kv_heads < tp) the replicated k_proj / v_proj ones (tensor_parallel/strategy.h).
  if (o.tp() > 1) reduced_ = tp::tp_reduced_ranges(layout_, o.tensor.sp);
  if (!reduced_.empty()) sp_held_ = states_->dense().held_grads_in(reduced_);
  const size_t N = size_t(Bm_) * cfg.seq;
  // An MoE model's scope: the capacity group, ep, and tp (the experts split over it, tensor_parallel/runner.h).
  if (cfg.model.moe.experts > 0) {
    scope_ = o.cp() > 1 ? tp::context_moe_scope(o.data, cfg, o.tensor.context.zigzag, groups_, tp_)
                        : dp::make_moe_scope(o.component(), cfg, groups_, tp_);
    if (o.tensor.has(tp::Fault::gate_up_mismatch)) scope_.faults.insert(MoeFault::expert_gate_up_mismatch);  // the experts' too
  }
  if (runs_stage_model(o.tensor))  // tp or cp > 1, or recomputation (at tp = cp = 1 with tp 1)
    tpm_ = std::make_unique<tp::TpModel<T>>(layout_, o.tensor, tp_, cp_, &mem_, Bm_, cfg.seq, scope_, *ops_);
  dxa_ = Buffer<T>(&mem_, MemTag::workspace, size_t(boundary_elems()));
  dxb_ = Buffer<T>(&mem_, MemTag::workspace, size_t(boundary_elems()));
  tok_tmp_ = Buffer<int32_t>(&mem_, MemTag::workspace, N);
  tgt_tmp_ = Buffer<int32_t>(&mem_, MemTag::workspace, N);
  if (!ops_->is_host()) host_tok_.resize(N), host_tgt_.resize(N);
  if (!tpm_) scratch_ = Scratch<T>(&mem_, cfg.model, Bm_, cfg.seq, ops_->is_host());
  // Full recompute: the one MoeActs the backward's rerun of an MoE block fills (stage.h moe_rerun_bytes).
  if (tpm_ && o.tensor.recompute == Recompute::full && !se_.units.empty())
    moe_work_ = MoeActs<T>(&mem_, cfg.model, tpm_->tokens(), scope_.tokens(cfg.model.moe, tpm_->tokens()), o.ep, o.tp(),
                           !ops_->is_host());
  if (cfg.model.moe.experts > 0 && !tpm_) {
    moe_scratch_ =
        MoeScratch<T>(&mem_, cfg.model, int(N), scope_.tokens(cfg.model.moe, int64_t(N)), o.ep, 1, !ops_->is_host());
  }
}

template <class T>
int64_t PipelineRank<T>::boundary_elems() const {
  return (tpm_ ? int64_t(tpm_->tokens_held()) : int64_t(Bm_) * cfg_.seq) * cfg_.model.C;
}

template <class T>
PipelineRank<T>::~PipelineRank() = default;

template <class T>
T* PipelineRank<T>::head_wte_grad(int mb) {
  if (su_.head != su_.wte) return grad(mb, su_.head);  // the tied copy (pp > 1), or llama's lm_head
  return hooks_->head_grads(mb, su_.wte, s_.weight_version(mb));  // pp = 1: summed with the embedding's
}

template <class T>
int PipelineRank<T>::tag_of(const Action& a) const {
  MessageKey k = message_key(s_, pr_, a);
  if (o_.faults.grad_to_wrong_stage && a.op == Op::send_grad && pr_ == o_.pp - 1 && k.microbatch < 2)
    k.microbatch ^= 1;
  return int(message_index(s_, k));
}

template <class T>
typename PipelineRank<T>::Live& PipelineRank<T>::open(Key k) {
  auto [it, fresh] = live_.try_emplace(k);
  if (!fresh) return it->second;
  const StageSlice& st = part_.at(pr_, k.second);
  const auto& m = cfg_.model;
  const size_t N = tpm_ ? size_t(tpm_->tokens()) : size_t(Bm_) * cfg_.seq;  // this rank's tokens
  Live& lv = it->second;
  lv.x_in = Buffer<T>(&mem_, MemTag::activations, size_t(boundary_elems()));
  if (st.embedding) lv.tokens = Buffer<int32_t>(&mem_, MemTag::activations, N);
  for (int i = 0; i < st.num_blocks; ++i) {
    const bool moe = m.is_moe(st.first_block + i);
    lv.moe.emplace_back();
    if (moe && !(tpm_ && o_.tensor.recompute == Recompute::full))  // tp > 1: the experts' share of this tp rank
      lv.moe.back() =
          MoeActs<T>(&mem_, m, int(N), scope_.tokens(m.moe, int64_t(N)), o_.ep, o_.tp(), !ops_->is_host());
    if (tpm_) {  // full recompute keeps the block's output alone (the backward reruns the rest)
      tpm_->alloc_block(lv.tblocks.emplace_back(), &mem_, o_.tensor.recompute == Recompute::full, !moe);
      // zb-h1: an MoE block's backward runs whole in B (no stash; its W is empty)
      if (s_.split_backward) {
        lv.tstash.emplace_back();
        if (!moe) tpm_->alloc_stash(lv.tstash.back(), &mem_);
      }
      continue;
    }
    lv.blocks.emplace_back(&mem_, m, Bm_, cfg_.seq, !moe);
    if (s_.split_backward) lv.stash.push_back(moe ? BlockGradStash<T>() : BlockGradStash<T>(&mem_, m, Bm_, cfg_.seq));
  }
  if (st.head) {
    if (tpm_) tpm_->alloc_head(lv.thead, &mem_);
    else lv.head = HeadActs<T>(&mem_, m, Bm_, cfg_.seq);
    lv.targets = Buffer<int32_t>(&mem_, MemTag::activations, N);
  }
  return lv;
}

template <class T>
void PipelineRank<T>::free_live(Key k) {
  auto it = live_.find(k);
  it->second.act_send.wait();
  live_.erase(it);
}

template <class T>
void PipelineRank<T>::post(const Action& a, std::vector<Request>& recvs) {
  const Key k{a.microbatch, a.chunk};
  const size_t NC = size_t(boundary_elems());
  const DType dt = dtype_of<T>();
  switch (a.op) {
    case Op::recv_act: recvs.push_back(pp_->irecv(open(k).x_in.data(), NC, dt, a.peer, tag_of(a))); break;
    case Op::send_act: {
      Live& lv = live_.at(k);
      lv.act_send = pp_->isend(lv.out(), NC, dt, a.peer, tag_of(a));
      break;
    }
    case Op::recv_grad: {
      Buffer<T>& g = grad_in_[k] = Buffer<T>(&mem_, MemTag::comm, NC);
      recvs.push_back(pp_->irecv(g.data(), NC, dt, a.peer, tag_of(a)));
      break;
    }
    case Op::send_grad: {
      auto it = grad_out_.find(k);
      Request r = pp_->isend(it->second.data(), NC, dt, a.peer, tag_of(a));
      sending_.emplace_back(std::move(r), std::move(it->second));
      grad_out_.erase(it);
      break;
    }
    default: throw std::logic_error("pipeline: " + action_str(a) + " is not a message");
  }
}

template <class T>
void PipelineRank<T>::compute(const Action& a) {
  const int start = clock_->mark();
  if (a.op == Op::forward) forward(a);
  else if (a.op == Op::backward_weight) weight(a);
  else backward(a);
  marked_.push_back({a.op, a.microbatch, a.chunk, start, clock_->mark()});
}

template <class T>
void PipelineRank<T>::forward(const Action& a) {
  const StageSlice& st = part_.at(pr_, a.chunk);
  Live& lv = open({a.microbatch, a.chunk});
  const size_t N = size_t(Bm_) * cfg_.seq;
  const int mb = a.microbatch;
  if (st.embedding || st.head) {
    const int64_t step = s_.async_weights ? mb / m_ : step_ + data_shift_;
    const bool host = ops_->is_host();
    data_.batch(step, int64_t(dr_ * m_ + mb % m_) * Bm_, Bm_, cfg_.seq, host ? tok_tmp_.data() : host_tok_.data(),
                host ? tgt_tmp_.data() : host_tgt_.data());
    if (!host) {
      ops_->to_device(tok_tmp_.data(), host_tok_.data(), N * sizeof(int32_t));
      ops_->to_device(tgt_tmp_.data(), host_tgt_.data(), N * sizeof(int32_t));
    }
    if (o_.cp() > 1 && !host) {  // this rank's tokens of the sequences, selected on the host
      const size_t n = size_t(tpm_->tokens());
      host_sel_tok_.resize(n), host_sel_tgt_.resize(n);
      tpm_->select_tokens(host_tok_.data(), host_tgt_.data(), host_sel_tok_.data(), host_sel_tgt_.data());
      if (st.embedding) ops_->to_device(lv.tokens.data(), host_sel_tok_.data(), n * sizeof(int32_t));
      if (st.head) ops_->to_device(lv.targets.data(), host_sel_tgt_.data(), n * sizeof(int32_t));
    } else if (o_.cp() > 1) {
      tpm_->select_tokens(tok_tmp_.data(), tgt_tmp_.data(), st.embedding ? lv.tokens.data() : nullptr,
                          st.head ? lv.targets.data() : nullptr);
    } else {
      if (st.embedding) ops_->copy(lv.tokens.data(), tok_tmp_.data(), N * sizeof(int32_t));
      if (st.head) ops_->copy(lv.targets.data(), tgt_tmp_.data(), N * sizeof(int32_t));
    }
  }
  if (st.embedding) {
    const T* wte = param(mb, su_.wte, false);
    const T* wpe = su_.wpe >= 0 ? param(mb, su_.wpe, false) : nullptr;  // llama: none (RoPE)
    if (tpm_) tpm_->embed_forward(lv.x_in.data(), lv.tokens.data(), wte, wpe);
    else model_.embed_forward(lv.x_in.data(), lv.tokens.data(), wte, wpe);
    if (su_.wpe >= 0) release(su_.wpe);
    release(su_.wte);  // the head (pp = 1) gathers it again: every use is one gather
  } else if (o_.pp == 1) {  // the previous chunk sits on this rank: hand over locally
    ops_->copy(lv.x_in.data(), live_.at({mb, a.chunk - 1}).out(), size_t(boundary_elems()) * sizeof(T));
  }
  const T* x = lv.x_in.data();
  const int nd = int(su_.units.size());
  for (int i = 0; i < st.num_blocks; ++i) {
    const int layer = st.first_block + i, u = su_.of_model[size_t(layout_.block_unit(layer))];
    if (const int j = se_.of_layer.empty() ? -1 : se_.of_layer[size_t(layer)]; j >= 0) {
      MoeActs<T>& ma = lv.moe[size_t(i)];
      const T* pu = param(mb, u, false);
      if (tpm_) {  // the tensor-parallel attention half, the experts split over tp
        auto& b = lv.tblocks[size_t(i)];
        // Full recompute: the activations go to the workspace block and the rerun's MoeActs, the output is kept.
        const bool full = o_.tensor.recompute == Recompute::full;
        tpm_->moe_block_forward(full ? tpm_->work() : b, full ? moe_work_ : ma, x, pu, b.xout.data(),
                                param(mb, nd + j, false));
        x = b.xout.data();
      } else {
        model_.moe_block_forward(lv.blocks[size_t(i)], ma, x, pu, scratch_, moe_scratch_, scope_,
                                 param(mb, nd + j, false));
        x = lv.blocks[size_t(i)].xout.data();
      }
      release(nd + j);
      const MoeActs<T>& done = tpm_ && o_.tensor.recompute == Recompute::full ? moe_work_ : ma;
      const double held = tpm_ ? double(tpm_->tokens()) : double(N);  // this rank's tokens (cp: its share)
      aux_ += done.aux * held;  // the microbatch's load-balancing term, weighed by its tokens
      if (s_.async_weights) aux_mb_[size_t(mb)] += done.aux * held;
      done.add_to(load_, cfg_.model.moe.experts, cfg_.model.moe.top_k);
    } else if (tpm_) {
      auto& b = lv.tblocks[size_t(i)];
      // Full recompute: the block's activations go to the workspace block, its output is kept.
      tpm_->block_forward(o_.tensor.recompute == Recompute::full ? tpm_->work() : b, x, param(mb, u, false),
                          b.xout.data());
      x = b.xout.data();
    } else {
      model_.block_forward(lv.blocks[size_t(i)], x, param(mb, u, false), scratch_);
      x = lv.blocks[size_t(i)].xout.data();
    }
    release(u);
  }
  if (st.head) {
    const int fin = su_.of_model[size_t(layout_.final_unit())], w = su_.head;
    const T* lnf = param(mb, fin, false);
    const T* wte = param(mb, w, false);
    losses_[size_t(mb)] = tpm_ ? tpm_->head_forward(lv.thead, x, lv.targets.data(), lnf, wte)
                               : model_.head_forward(lv.head, x, lv.targets.data(), lnf, wte, scratch_);
    release(fin);
    release(w);
  }
}

template <class T>
void PipelineRank<T>::backward(const Action& a) {
  const StageSlice& st = part_.at(pr_, a.chunk);
  const Key k{a.microbatch, a.chunk};
  const int mb = a.microbatch;
  Live& lv = live_.at(k);
  const size_t NC = size_t(boundary_elems());
  auto other = [&](const T* x) { return x == dxa_.data() ? dxb_.data() : dxa_.data(); };
  const T* dout;
  double tokens = o_.data.has(dp::Fault::grad_not_averaged) ? double(cfg_.tokens_per_step()) / o_.dp()
                                                            : double(cfg_.tokens_per_step());
  if (o_.tensor.context.has(cp::Fault::loss_per_rank)) tokens /= o_.cp();  // by the tokens the rank holds
  if (o_.faults.grads_rescaled_by_microbatches) tokens *= cfg_.microbatches;
  if (o_.faults.unnormalized_loss) tokens = 1;
  if (o_.faults.zero_grads_per_microbatch && mb > 0) states_->zero_grads();
  if (st.head) {
    const int fin = su_.of_model[size_t(layout_.final_unit())], w = su_.head;
    const T* lnf = param(mb, fin, true);
    const T* wte = param(mb, w, true);
    if (tpm_)
      tpm_->head_backward(dxa_.data(), grad(mb, fin), head_wte_grad(mb), lv.out(), lv.targets.data(), lv.thead, lnf,
                          wte, 1.0 / tokens);
    else
      model_.head_backward(dxa_.data(), grad(mb, fin), head_wte_grad(mb), lv.out(), lv.targets.data(), lv.head, lnf,
                           wte, 1.0 / tokens, scratch_);
    release(fin);
    release(w);
    grad_done(mb, fin);
    if (w != su_.wte) grad_done(mb, w);
    dout = dxa_.data();
  } else {
    dout = grad_in_.at(k).data();
  }
  Buffer<T> dx_in;
  if (!st.embedding) dx_in = Buffer<T>(&mem_, MemTag::comm, NC);
  const int nd = int(su_.units.size());
  for (int i = st.num_blocks - 1; i >= 0; --i) {
    const int layer = st.first_block + i, u = su_.of_model[size_t(layout_.block_unit(layer))];
    T* dst = i == 0 && !st.embedding ? dx_in.data() : other(dout);
    if (const int j = se_.of_layer.empty() ? -1 : se_.of_layer[size_t(layer)]; j >= 0) {
      // The load-balancing term's weight: its share of the step's tokens (the capacity scope's).
      const size_t N = tpm_ ? size_t(tpm_->tokens()) : size_t(Bm_) * cfg_.seq;  // this rank's tokens (cp: its share)
      double aux_weight = double(scope_.tokens(cfg_.model.moe, int64_t(N))) / tokens;
      T* gu = grad(mb, u);
      const T* pu = param(mb, u, true);
      T* ge = grad(mb, nd + j);
      const T* pe = param(mb, nd + j, true);
      if (tpm_) {
        const T* x_in = i ? lv.tblocks[size_t(i - 1)].xout.data() : lv.x_in.data();
        const bool full = o_.tensor.recompute == Recompute::full;
        if (full) {  // rerun the block's forward, the routing and its exchanges included (the same dispatch)
          tpm_->moe_block_forward(tpm_->work(), moe_work_, x_in, pu, tpm_->work().xout.data(), pe);
          if (scope_.has(MoeFault::recompute_aux_twice)) {  // the rerun's term counted again
            aux_ += moe_work_.aux * double(N);
            if (s_.async_weights) aux_mb_[size_t(mb)] += moe_work_.aux * double(N);
            aux_weight *= 2;
          }
        }
        tpm_->moe_block_backward(dst, gu, dout, x_in, full ? tpm_->work() : lv.tblocks[size_t(i)],
                                 full ? moe_work_ : lv.moe[size_t(i)], pu, aux_weight, pe, ge);
      } else {
        const T* x_in = i ? lv.blocks[size_t(i - 1)].xout.data() : lv.x_in.data();
        model_.moe_block_backward(dst, gu, dout, x_in, lv.blocks[size_t(i)], lv.moe[size_t(i)], pu, aux_weight,
                                  scratch_, moe_scratch_, scope_, pe, ge);
      }
      grad_done(mb, nd + j);
      release(nd + j);
      grad_done(mb, u);
      release(u);
      dout = dst;
      continue;
    }
    if (tpm_) {
      const T* x_in = i ? lv.tblocks[size_t(i - 1)].xout.data() : lv.x_in.data();
      const T* p = param(mb, u, true);
      const bool full = o_.tensor.recompute == Recompute::full;
      if (full) {  // rerun the block's forward from its stored input, communication included
        const T* from = x_in;
        if (o_.tensor.has(tp::Fault::recompute_wrong_input) && i > 0)  // the previous block's input
          from = i > 1 ? lv.tblocks[size_t(i - 2)].xout.data() : lv.x_in.data();
        tpm_->block_forward(tpm_->work(), from, p, tpm_->work().xout.data());
      }
      if (a.op == Op::backward) {
        tpm_->block_backward(dst, grad(mb, u), dout, x_in, full ? tpm_->work() : lv.tblocks[size_t(i)], p);
        grad_done(mb, u);
      } else {  // B of a split backward: the input gradient, its collectives included; W forms the rest
        tpm_->block_backward_input(dst, lv.tstash[size_t(i)], dout, x_in, lv.tblocks[size_t(i)], p);
      }
      release(u);
      dout = dst;
      continue;
    }
    const T* x_in = i ? lv.blocks[size_t(i - 1)].xout.data() : lv.x_in.data();
    if (a.op == Op::backward) {
      model_.block_backward(dst, grad(mb, u), dout, x_in, lv.blocks[size_t(i)], param(mb, u, true), scratch_);
      grad_done(mb, u);
    } else {
      model_.block_backward_input(dst, lv.stash[size_t(i)], dout, x_in, lv.blocks[size_t(i)],
                                  param(mb, u, true), scratch_);
    }
    release(u);
    dout = dst;
  }
  grad_in_.erase(k);
  if (st.embedding) {
    T* dwte = grad(mb, su_.wte);
    T* dwpe = su_.wpe >= 0 ? grad(mb, su_.wpe) : nullptr;
    if (tpm_) tpm_->embed_backward(dwte, dwpe, dout, lv.tokens.data());
    else model_.embed_backward(dwte, dwpe, dout, lv.tokens.data());
    grad_done(mb, su_.wte);
    if (su_.wpe >= 0) grad_done(mb, su_.wpe);
  } else if (o_.pp == 1) {
    grad_in_[{mb, a.chunk - 1}] = std::move(dx_in);
  } else {
    grad_out_[k] = std::move(dx_in);
  }
  if (a.op == Op::backward) free_live(k);
}

template <class T>
void PipelineRank<T>::weight(const Action& a) {
  const StageSlice& st = part_.at(pr_, a.chunk);
  const Key k{a.microbatch, a.chunk};
  Live& lv = live_.at(k);
  const bool dropped = o_.faults.drop_w && pr_ == 0 && a.microbatch == 0 && a.chunk == 0;
  for (int i = 0; i < st.num_blocks; ++i) {
    if (cfg_.model.is_moe(st.first_block + i)) continue;  // its weight gradients were formed in B
    const int u = su_.of_model[size_t(layout_.block_unit(st.first_block + i))];
    T* g = grad(a.microbatch, u);
    if (tpm_) {  // the tensor-parallel block's weight gradients: no communication
      const T* x_in = i ? lv.tblocks[size_t(i - 1)].xout.data() : lv.x_in.data();
      if (!dropped)
        tpm_->block_backward_weight(g, lv.tstash[size_t(i)], x_in, lv.tblocks[size_t(i)], o_.tensor.has(tp::Fault::zb_w_wrong_rows));
    } else {
      const T* x_in = i ? lv.blocks[size_t(i - 1)].xout.data() : lv.x_in.data();
      if (!dropped) model_.block_backward_weight(g, lv.stash[size_t(i)], x_in, lv.blocks[size_t(i)], scratch_);
    }
    grad_done(a.microbatch, u);
  }
  free_live(k);
}

// Each posting group (schedule.h posting_groups: a run of consecutive
// SEND/RECV actions) is posted as one Communicator group and its receives
// waited for before the next action (validate.h SendMode::grouped: what a
// backend without tags or eager sends, nccl, needs when messages cross);
// sends complete in the background as before.
template <class T>
void PipelineRank<T>::run_actions() {
  timing_ = {};
  pp_->barrier();
  clock_->clear();
  marked_.clear();
  const int t0 = clock_->mark();
  const auto& list = s_.ranks[size_t(pr_)];
  const auto groups = posting_groups(s_, pr_);
  auto group = groups.begin();
  std::vector<Request> recvs;
  // 2BW: the next weight version is formed before the first F or RECV_ACT of it.
  auto form_version = [&](const Action& a) {
    const int v = s_.weight_version(a.microbatch);
    if ((a.op == Op::forward || a.op == Op::recv_act) && s_.async_weights && v > hooks_->version()) update_2bw(v);
  };
  for (size_t i = 0; i < list.size();) {
    form_version(list[i]);
    if (is_compute(list[i].op)) {
      compute(list[i++]);
    } else {
      const auto [first, last] = *group++;
      if (first != i) throw std::logic_error("pipeline: posting groups out of step with the actions");
      pp_->group_start();
      for (; i < last; ++i) post(list[i], recvs);
      pp_->group_end();
      wait_all(recvs);
      recvs.clear();
    }
    std::erase_if(sending_, [](auto& s) { return s.first.test(); });
  }
  for (auto& s : sending_) s.first.wait();
  sending_.clear();
  if (!live_.empty() || !grad_in_.empty() || !grad_out_.empty() || !hooks_->idle())
    throw std::logic_error("pipeline: tensors left after the schedule (" + std::to_string(live_.size()) +
                           " activations)");
  // Device time since the barrier: waits for the last action's kernels once.
  timing_.wall_s = clock_->seconds(t0, clock_->mark());
  for (const Marked& m : marked_) {
    const double start = clock_->seconds(t0, m.start), end = clock_->seconds(t0, m.end);
    timing_.busy_s += end - start;
    timing_.timeline.push_back({m.op, m.microbatch, m.chunk, start, end});
  }
}

template class PipelineRank<double>;
template class PipelineRank<float>;
template class PipelineRank<bf16>;

}  // namespace pb::pipeline
