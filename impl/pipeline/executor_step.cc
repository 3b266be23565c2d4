// Pipeline executor, part 2: options, the gradient synchronisation after the
// flush (tied wte sum, the stage's data-parallel component, loss and norm),
// the optimizer, the PipeDream-2BW weight versions, and what a rank declares
// (executor.h).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "harness/status.h"
#include "impl/data_parallel/cost.h"
#include "impl/data_parallel/strategy.h"
#include "impl/expert_parallel/cost.h"
#include "impl/expert_parallel/faults.h"
#include "impl/data_parallel/replay.h"
#include "impl/pipeline/executor.h"
#include "impl/tensor_parallel/strategy.h"

namespace pb::pipeline {

ScheduleConfig schedule_config(const PipelineOptions& o, const TrainConfig& cfg) {
  return {o.pp, cfg.microbatches, o.virtual_stages,
          o.kind == ScheduleKind::pipedream_2bw ? cfg.steps : 1};
}

void validate(const PipelineOptions& o, const TrainConfig& cfg, int world) {
  cfg.validate();
  require(o.dp() >= 1, "dp: must be >= 1, got " + std::to_string(o.dp()));
  check_pipeline_mesh(world / (o.tp() * o.cp()), o.pp);
  require(world == o.dp() * o.tp() * o.cp() * o.pp, "dp: world size " + std::to_string(world) +
                                                        " must equal dp * tp * cp * pp = " +
                                                        std::to_string(o.dp() * o.tp() * o.cp() * o.pp));
  auto tp_ok = tp::faults_for(cfg.model, o.tp(), o.tensor.sp, o.tensor.recompute);  // the family's too
  if (o.kind == ScheduleKind::zb_h1 && o.pp > 1 && o.tp() > 1 && o.tensor.sp && !cfg.model.llama())
    tp_ok.push_back(tp::Fault::zb_w_wrong_rows);
  for (tp::Fault f : o.tensor.faults)
    require(std::find(tp_ok.begin(), tp_ok.end(), f) != tp_ok.end(),
            "strategy.faults: " + tp::fault_name(f) + " does not apply to this pipeline (tensor-parallel faults "
                "need tp > 1 in the mesh; recompute_wrong_input needs recompute=full; zb_w_wrong_rows zb-h1, pp > 1, sp and "
                "a model with biases)");
  tp::check_precision(o.tensor.faults, cfg.precision);
  // zb-h1's W reads the block's activations from F (runner.h TpModel::Stash).
  require(o.kind != ScheduleKind::zb_h1 || o.tensor.recompute != Recompute::full,
          "strategy.recompute: zb-h1's W pass reads each block's activations, which recompute=full does not keep; "
          "with zb-h1 use recompute=selective or none");
  if (o.tp() > 1 || o.cp() > 1) {
    require(cfg.model.NH % o.tp() == 0, "mesh.tp: tp" + std::to_string(o.tp()) + " does not divide model.heads = " +
                                            std::to_string(cfg.model.NH));
    const int64_t tokens = int64_t(cfg.batch) / (o.dp() * cfg.microbatches) * cfg.seq / o.cp();
    require(!o.tensor.sp || tokens % o.tp() == 0,
            "strategy.sp: a microbatch's " + std::to_string(tokens) + " tokens" +
                (o.cp() > 1 ? " on a cp rank" : "") + " do not split over tp" + std::to_string(o.tp()));
  }
  if (o.cp() > 1) {
    cp::validate_seq(cfg.seq, o.cp(), o.tensor.context.zigzag, "train.seq");
    const int heads = cfg.model.NH / o.tp();
    require(o.tensor.context.algo != CpAlgo::ulysses || heads % o.cp() == 0,
            "strategy.cp_algo: ulysses shards the heads over cp: model.heads / tp = " + std::to_string(heads) +
                " is not divisible by cp" + std::to_string(o.cp()) + "; use cp_algo=ring");
  }
  const auto cp_ok = cp::faults_for(o.tensor.context, cfg.model);  // the family's too
  for (cp::Fault f : o.tensor.context.faults)
    require(std::find(cp_ok.begin(), cp_ok.end(), f) != cp_ok.end(),
            "strategy.faults: " + cp::fault_name(f) + " does not apply to this pipeline (context-parallel faults need "
                "cp > 1; the ring's need cp_algo=ring, the zigzag ones zigzag=on)");
  partition_layers(cfg.model.L, o.pp, o.virtual_stages);  // more stages than layers
  check_config(o.kind, schedule_config(o, cfg));
  const int split = o.dp() * cfg.microbatches;
  require(cfg.batch % split == 0, "train.batch: " + std::to_string(cfg.batch) +
                                      " sequences do not split into dp * microbatches = " +
                                      std::to_string(split) + " equal microbatches");
  dp::validate(o.component());
  require(o.kind != ScheduleKind::pipedream_2bw || o.data.shard <= dp::Shard::zero1,
          "strategy.shard: 2bw keeps two weight versions in full; it composes with none or zero1, got " +
              std::string(dp::shard_name(o.data.shard)));
  // Data-parallel faults the stage's component carries; the rest live in the
  // plain data-parallel runner's hooks.
  for (dp::Fault f : o.data.faults) {
    const bool ok = f == dp::Fault::grad_not_averaged || f == dp::Fault::wrong_shard_offset ||
                    f == dp::Fault::skip_grad_reduce || f == dp::Fault::skip_replica_reduce ||
                    f == dp::Fault::no_copy_back ||
                    (f == dp::Fault::stale_params && o.data.shard >= dp::Shard::zero1 &&
                     o.data.shard <= dp::Shard::zero2);
    require(ok, "strategy.faults: " + dp::fault_name(f) + " does not apply inside a pipeline stage with shard " +
                    std::string(dp::shard_name(o.data.shard)) +
                    " (pipeline stages carry grad_not_averaged, wrong_shard_offset, skip_grad_reduce, "
                    "skip_replica_reduce, no_copy_back, and stale_params with zero1/zero2)");
  }
  if (cfg.model.moe.experts > 0) {
    // 2BW: the delayed-weight replay (delayed_reference.h) routes each
    // microbatch on its own, so the capacity scope must be the microbatch's.
    require(o.kind != ScheduleKind::pipedream_2bw || !dp::moe_shares_capacity(o.data, cfg),
            "strategy.schedule: 2bw with a mixture-of-experts model needs each microbatch's own capacity (dp1, or "
            "model.moe.capacity local): global capacity over dp" + std::to_string(o.dp()) +
                " routes microbatches of different weight versions together");
    // ep folds over the stage's dp x cp ranks (harness/mesh.h): edp = dp x cp / ep.
    require(o.experts.dp * o.ep == o.component().dp,
            "mesh: ep" + std::to_string(o.ep) + " must divide " +
                (o.cp() > 1 ? "dp x cp = " + std::to_string(o.component().dp) : "dp" + std::to_string(o.dp())));
    require(cfg.model.moe.experts % o.ep == 0, "mesh: ep" + std::to_string(o.ep) +
                                                   " must divide model.moe.experts (" +
                                                   std::to_string(cfg.model.moe.experts) + ")");
    dp::validate(o.experts);
    if (o.cp() == 1) {
      dp::validate(o.component(), cfg);  // which MoE faults apply (ep >= 2; global capacity over dp >= 2)
    } else {  // the batch over the dp replicas (the cp ranks share their microbatches); the MoE faults: strategy.cc
      dp::DpOptions replicas;
      replicas.dp = o.dp();
      dp::validate(replicas, cfg);
    }
    require(!o.data.moe_faults.count(MoeFault::recompute_aux_twice) || o.tensor.recompute == Recompute::full,
            "strategy.faults: moe_recompute_aux_twice needs recompute=full (the backward's rerun of the MoE block)");
  } else {
    require(o.ep == 1, "mesh: ep" + std::to_string(o.ep) +
                           " needs a mixture-of-experts model (model.moe.experts > 0; e.g. --model tiny-moe)");
  }
  const auto& f = o.faults;
  require(!f.grad_to_wrong_stage || (o.pp >= 2 && o.virtual_stages == 1 && cfg.microbatches >= 2),
          "fault grad_to_wrong_stage: needs pp >= 2, virtual_stages = 1 and microbatches >= 2");
  // drop_w is the one fault of some schedules only: the others have no W action.
  require(!f.bw_newest_weights || (o.kind == ScheduleKind::pipedream_2bw && o.pp >= 2 && cfg.steps >= 3),
          "fault bw_newest_weights: needs schedule 2bw, pp >= 2 and train.steps >= 3 (W(1) = W(0): the versions "
          "differ from the third group on)");
  require(!f.drop_w || o.kind == ScheduleKind::zb_h1,
          "fault drop_w: does not apply to " + std::string(schedule_name(o.kind)) +
              " (applies to: zb-h1, the split-backward schedule)");
  require(!f.drop_w || has_dense_block(cfg.model, partition_layers(cfg.model.L, o.pp, o.virtual_stages).at(0, 0)),
          "fault drop_w: rank 0's first chunk holds MoE blocks alone, whose weight gradients zb-h1 forms in B: "
          "its W has nothing to drop");
  require(!f.skip_microbatch || cfg.microbatches >= 2, "fault skip_microbatch: needs microbatches >= 2");
  require(!f.tied_grad_not_summed || o.pp >= 2, "fault tied_grad_not_summed: needs pp >= 2");
  require(!f.grads_rescaled_by_microbatches || cfg.microbatches >= 2,
          "fault grads_rescaled_by_microbatches: needs microbatches >= 2");
  require(!f.zero_grads_per_microbatch ||
              (cfg.microbatches >= 2 && o.virtual_stages == 1 &&
               (o.kind == ScheduleKind::gpipe || o.kind == ScheduleKind::one_f_one_b) &&
               o.data.shard <= dp::Shard::zero1),
          "fault zero_grads_per_microbatch: needs gpipe or 1f1b, virtual_stages = 1, microbatches >= 2 and "
          "shard none or zero1 (one gradient buffer per stage)");
  require(!f.tied_sum_after_reduce_scatter ||
              (o.pp >= 2 && o.dp() >= 2 && o.data.shard == dp::Shard::zero1 && o.kind != ScheduleKind::pipedream_2bw),
          "fault tied_sum_after_reduce_scatter: needs pp >= 2, dp >= 2 and shard zero1 (not 2bw)");
  require(!f.tied_grad_not_summed || !cfg.model.llama(),
          "fault tied_grad_not_summed: needs a tied head (model family gpt2); model " + cfg.model.name +
              " has an untied lm_head (its fault: untied_head_summed)");
  require(!f.untied_head_summed || (o.pp >= 2 && cfg.model.llama()),
          "fault untied_head_summed: needs pp >= 2 and an untied head (model family llama), got pp" +
              std::to_string(o.pp) + " and model " + cfg.model.name);
}

SplitPlan pipeline_replay_plan(const PipelineOptions& o, const TrainConfig& cfg) {
  SplitPlan p;
  p.groups = o.dp();
  p.micro = cfg.microbatches;
  p.separate_head_grad = !cfg.model.llama();  // the llama family's head is untied: nothing to add to wte
  p.moe_joint = dp::moe_shares_capacity(o.data, cfg);  // over the dp replicas (cp ranks share one microbatch)
  if (o.data.shard >= dp::Shard::zero2) {
    // Reduced per microbatch (the dp sum first, then the tied E + H on the
    // shards); at pp = 1 the head adds to the embedding's own buffer.
    p.reduce_per_micro = true;
    p.separate_head_grad = o.pp > 1 && !cfg.model.llama();
    if (o.data.shard == dp::Shard::hsdp) p.block = dp::shard_group(o.data);
    if (o.data.shard == dp::Shard::hzero) p.block = o.data.ranks_per_node;
    p.outer_per_micro = o.data.shard == dp::Shard::hzero;
  }
  const ParamLayout l(cfg.model);
  const int g = dp::shard_group(o.data);
  if (g == 1) {  // per-unit sums, added in unit order
    for (int u = 0; u < l.num_units(); ++u) p.norm_parts.push_back({{l.unit_begin(u), l.unit_end(u)}});
    return p;
  }
  // Per-rank partials over the owned slices of the stage's units, world rank
  // order (dp fastest); HSDP's replicas hold copies and add nothing.
  const Partition part = partition_layers(cfg.model.L, o.pp, o.virtual_stages);
  for (int pr = 0; pr < o.pp; ++pr) {
    const StageUnits su = stage_units(l, part, pr);
    for (int d = 0; d < o.dp(); ++d) {
      Ranges r;
      if (o.data.shard != dp::Shard::hsdp || d < g) {
        const dp::ShardLayout sl(su.units, g, dp::owned_slice(o.data, d));
        for (int u = 0; u < sl.num_units(); ++u) {
          auto rg = sl.owned(u);
          if (sl.unit(u).in_norm && rg.first < rg.second) r.push_back(rg);
        }
      }
      p.norm_parts.push_back(std::move(r));
    }
  }
  return p;
}

template <class T>
double PipelineRank<T>::reduce_grads() {
  // The stage's reduction through its hooks, the tied wte rows summed over
  // {first, last} (pp = 1: the head's added locally) where the family's
  // order puts them (hooks.h TiedGrad).
  // The llama family's head is untied: nothing is summed (the fault
  // untied_head_summed sums embed_tokens' rows with lm_head's, as if tied).
  dp::TiedGrad<T> tied;
  const bool untied = cfg_.model.llama();
  if (untied ? o_.faults.untied_head_summed : !o_.faults.tied_grad_not_summed && (tied_ || o_.pp == 1)) {
    tied.unit = pr_ == 0 ? su_.wte : su_.head;
    tied.rows = layout_.wpe_offset();  // this rank's token-embedding rows
    if (tied_) tied.sum = [this](T* data, size_t n) { tied_->all_reduce(data, data, n, dtype_of<T>()); };
  }
  if (o_.faults.tied_sum_after_reduce_scatter) {  // the dp reduction first, then the sum on the full rows
    hooks_->finish({});
    if (tied.sum) tied.sum(hooks_->grads(0, tied.unit, s_.weight_version(0)), size_t(tied.rows));
  } else {
    hooks_->finish(tied);
  }
  states_->inflate_expert_grads();  // a fault's, else nothing
  dp::Component<T>* dense = &states_->dense();
  dp::Component<T>* ex = states_->experts();
  // SP: partial per tp rank; llama with kv_heads < tp: the replicated k/v ones
  if (tp_ && !reduced_.empty() && !(o_.tensor.sp && o_.tensor.has(tp::Fault::skip_sp_grad_reduce)))
    dense->all_reduce_held_grads(reduced_, *tp_);
  // The experts' squares: this rank's experts once per edp group (DDP: every
  // edp rank holds them whole; sharded: each owned slice, local_sq's rule).
  double esq = 0;
  if (ex) {
    if (ex->options().shard != dp::Shard::none || states_->expert_comms().dp->rank() == 0) esq = ex->local_sq();
  }
  if (dp::shard_group(o_.component()) > 1) {  // per-rank partials over owned slices, world rank order
    double sq = dense->local_sq() + esq;
    scalar_->all_reduce(&sq, &sq, 1, DType::f64);
    return sq;
  }
  // Unpadded: per-unit sums (each unit's from exactly one rank, so the
  // all-reduce is exact), added in unit order: the same bits for every pp, v
  // and schedule. Unit 0 is wte + wpe, back to back; an MoE block's unit
  // stops before its experts, whose squares come last (esq).
  std::vector<double> unit_sq(size_t(layout_.num_units()) + (cfg_.model.moe.experts > 0 ? 1 : 0), 0.0);
  if (dr_ == 0 && cr_ == 0)  // the replicas (and the cp ranks) hold the same reduced gradients
    for (int u = 0; u < layout_.num_units(); ++u) {
      const int i = su_.of_model[size_t(u)];
      if (i < 0) continue;
      // wte + wpe, and llama's model.norm + lm_head, lie back to back: their layout unit's size
      const bool whole = u == 0 || u == layout_.final_unit();
      unit_sq[size_t(u)] = this->unit_sq(i, whole ? layout_.unit_size(u) : su_.units[size_t(i)].size);
    }
  if (unit_sq.size() > size_t(layout_.num_units())) unit_sq.back() = esq;
  scalar_->all_reduce(unit_sq.data(), unit_sq.data(), unit_sq.size(), DType::f64);
  double sq = 0;
  for (double x : unit_sq) sq += x;
  return sq;
}

template <class T>
tp::TpShape PipelineRank<T>::tp_shape() const {
  tp::TpShape x = tp::make_shape(cfg_.model, o_.tp(), o_.tensor.sp, o_.tensor.recompute, Bm_, cfg_.seq, cfg_.precision);
  x.cp = o_.cp();
  x.algo = o_.tensor.context.algo;
  return x;
}

template <class T>
double PipelineRank<T>::unit_sq(int i, int64_t n) const {
  const dp::Component<T>& c = states_->dense();
  const dp::UnitShard& s = c.shards().unit(i);
  return c.norm_sq(c.grads_data() + (c.grads_full() ? s.full_off : s.shard_off), s.begin, s.begin + n);
}

template <class T>
StepStats PipelineRank<T>::step() {
  require(!s_.async_weights, "pipeline: step() runs synchronous schedules; use run_window() for 2bw");
  step_clock_->clear();
  const int t0 = step_clock_->mark();
  hooks_->start_step();
  losses_.assign(size_t(m_), 0.0);
  aux_ = 0;
  run_actions();
  const double sq = reduce_grads();
  double loss = 0;
  if (pr_ == o_.pp - 1 && tr_ == 0)  // every tp rank holds the loss: count one
    for (double l : losses_) loss += l;  // microbatch order
  if (tr_ == 0) loss += aux_;  // MoE: this rank's load-balancing terms (its tokens', every MoE block it holds; one tp rank's)
  StepStats st = dp::finish_step(*states_, cfg_, step_, loss, scalar_, sq);
  st.seconds = step_clock_->seconds(t0, step_clock_->mark());  // the whole step (times().wall_s: the schedule)
  ops_->synchronize();  // the optimizer's kernels are done when step() returns (a caller's clock sees them)
  return st;
}

template <class T>
void PipelineRank<T>::update_2bw(int k) {
  // Before group k: W(k) = W(k-1) stepped with g(k-2) (schedule.h); W(1) = W(0).
  hooks_->keep_version(k);
  if (k >= 2) {
    hooks_->bring_grads(k);
    norms_.push_back(std::sqrt(reduce_grads()));
    if (grads_snapshot_.empty()) grads_snapshot_ = gather(true);  // g(0), the first applied
    dp::apply_update(*states_, cfg_, k - 1, norms_.back());
    hooks_->start_step();  // g(k-2)'s buffers zeroed for g(k)
  }
}

template <class T>
std::vector<StepStats> PipelineRank<T>::run_window() {
  require(s_.async_weights, "pipeline: run_window() runs PipeDream-2BW");
  const int K = s_.steps;
  step_clock_->clear();
  const int t0 = step_clock_->mark();
  losses_.assign(size_t(K) * m_, 0.0);
  aux_mb_.assign(size_t(K) * m_, 0.0);
  norms_.clear();
  run_actions();
  // Drain: g(K-2) and g(K-1) are still to be applied (as updates K and K+1 would).
  for (int k = std::max(2, K); k <= K + 1; ++k) update_2bw(k);
  // The window's steps overlap: each is the window's time over K.
  const double per_step = step_clock_->seconds(t0, step_clock_->mark()) / K;
  std::vector<double> loss(size_t(K), 0.0);
  if (pr_ == o_.pp - 1 && tr_ == 0)
    for (int j = 0; j < K * m_; ++j) loss[size_t(j / m_)] += losses_[size_t(j)];
  if (tr_ == 0)  // MoE: this rank's load-balancing terms, each in its microbatch's group
    for (int j = 0; j < K * m_; ++j) loss[size_t(j / m_)] += aux_mb_[size_t(j)];
  scalar_->all_reduce(loss.data(), loss.data(), loss.size(), DType::f64);
  std::vector<StepStats> out;
  for (int k = 0; k < K; ++k) {
    StepStats st;
    st.step = k + 1;
    st.loss = loss[size_t(k)] / double(cfg_.tokens_per_step());
    st.grad_norm = norms_[size_t(k)];
    st.lr = lr_at(cfg_.optim, k + 1, cfg_.steps);
    st.seconds = per_step;
    out.push_back(st);
  }
  step_ = K;
  return out;
}

template <class T>
std::vector<StepStats> PipelineRank<T>::train(int steps, std::vector<double>* grads1) {
  if (!s_.async_weights) return Rank::train(steps, grads1);
  require(steps == cfg_.steps, "pipeline: 2bw trains its whole window of train.steps = " +
                                   std::to_string(cfg_.steps) + " steps at once");
  std::vector<StepStats> out = run_window();
  if (grads1) *grads1 = full_grads();
  return out;
}

template <class T>
std::vector<double> PipelineRank<T>::gather(bool grads) {
  if (!tpm_) return states_->gather(grads, *check_, layout_.total());
  return states_->gather(grads, *check_, layout_.total(), [&](const std::vector<double>& local) {
    std::vector<double> full(size_t(full_layout_.total()), 0.0);
    tp::add_to_full(layout_, full_layout_, tr_, local, full);
    return full;
  });
}

template <class T>
std::vector<double> PipelineRank<T>::full_grads() {
  if (s_.async_weights) return grads_snapshot_;
  return gather(true);
}

template <class T>
Declared PipelineRank<T>::declared(int steps) const {
  const ScheduleConfig sc = schedule_config(o_, cfg_);
  const int64_t db = int64_t(sizeof(T));
  const int64_t wte = layout_.wpe_offset();
  Declared d;
  // Activations: in-flight (microbatch, chunk) units x their bytes.
  const int64_t held = tpm_ ? int64_t(tpm_->tokens()) : int64_t(Bm_) * cfg_.seq;  // this rank's tokens (cp: its share)
  const MoeStage moe{scope_.tokens(cfg_.model.moe, held), o_.ep, !ops_->is_host()};
  const int64_t act =
      stage_activation_peak(
          o_.kind, sc,
          chunk_bytes_table(cfg_.model, part_, Bm_, cfg_.seq, cfg_.precision, o_.tensor, s_.split_backward, moe), pr_) +
      moe_rerun_bytes(cfg_.model, Bm_, cfg_.seq, cfg_.precision, o_.tensor, moe, !se_.units.empty());
  // Model states of the stage's units under its data axis (dp cost.h), plus
  // 2BW's second weight and gradient version and the pp = 1 head's wte gradient.
  std::vector<int64_t> sizes;
  std::vector<StageUnitUse> uses;
  for (size_t i = 0; i < su_.units.size(); ++i) {
    sizes.push_back(su_.units[i].size);
    uses.push_back({su_.units[i].size, su_.fwd_uses[i], su_.bwd_uses[i]});
  }
  const dp::DataAxis axis = dp::data_axis(o_.component(), cfg_);
  dp::ModelStateBytes ms = dp::model_state_bytes(sizes, axis);
  // The stage's experts: a second component over edp (one read each way per microbatch).
  std::vector<StageUnitUse> expert_uses;
  dp::DataAxis expert_axis;
  const dp::Component<T>* ex = states_->experts();
  if (ex) {
    std::vector<int64_t> es;
    for (const auto& u : se_.units) es.push_back(u.size), expert_uses.push_back({u.size, 1, 1});
    expert_axis = dp::data_axis(ex->options(), cfg_);
    const dp::ModelStateBytes e = dp::model_state_bytes(es, expert_axis);
    ms.params += e.params, ms.grads += e.grads, ms.optimizer += e.optimizer, ms.optimizer_host += e.optimizer_host;
  }
  const int64_t versions = s_.async_weights ? 2 : 1;
  const bool full = states_->dense().grads_full();
  const int64_t head = o_.pp == 1 && full && su_.head == su_.wte ? wte * db * versions : 0;
  d.memory = {{"mem.params", MemTag::params, Place::device, ms.params * versions},
              {"mem.grads", MemTag::grads, Place::device, ms.grads * versions + head},
              {"mem.optimizer", MemTag::optimizer, Place::device, ms.optimizer},
              {"mem.optimizer.host", MemTag::optimizer, Place::host, ms.optimizer_host},
              {"mem.activations", MemTag::activations, Place::device, act},
              {"mem.workspace", MemTag::workspace, Place::device,
               stage_workspace_bytes(cfg_.model, Bm_, cfg_.seq, cfg_.precision, o_.tensor, moe, ops_->is_host())}};
  // Point to point, the tied wte sum, the stage's data axis, the scalars.
  const int64_t a = boundary_elems() * db;
  d.add_comm(Group::pp, CommOp::send, p2p_per_step(sc, a).send_bytes[size_t(pr_)] * steps);
  const int64_t g = dp::shard_group_size(axis);
  if (tied_ && !cfg_.model.llama())  // what a correct rank moves; a fault that skips or adds it is caught here too
    d.add_comm(Group::pp_tied, CommOp::all_reduce, (full ? wte : dp::ceil_div(wte, g)) * db * steps);
  for (const auto& c : stage_dp_comm_per_step(uses, axis, m_)) {
    const CommOp op = dp::comm_op(c.op);
    d.add_comm(c.group, op, c.bytes * steps);
  }
  if (ex) {
    for (const auto& c : stage_dp_comm_per_step(expert_uses, expert_axis, m_))  // groups "edp", "edp_shard", ...
      d.add_comm(kExpertGroupPrefix + c.group, dp::comm_op(c.op), c.bytes * steps);
    // Full recompute reruns each MoE block's forward (the same routing): its
    // count exchanges, dispatch and combine once more (tensor_parallel/tp_rank.cc's rule).
    const bool rerun = tpm_ && o_.tensor.recompute == Recompute::full;
    const int64_t blocks = int64_t(se_.units.size()) * (rerun ? 2 : 1);
    if (scope_.order) {  // context parallel: every token's choices gathered, the probability sums all-reduced
      const int64_t calls = int64_t(steps) * m_ * blocks;
      d.add_comm(Group::moe, CommOp::all_gather,
                 calls * scope_.capacity_ranks() * held * cfg_.model.moe.top_k * 8);
      d.add_comm(Group::moe, CommOp::all_reduce, calls * cfg_.model.moe.experts * 8);
    } else {
      dp::add_moe_capacity_comm(d, o_.component(), cfg_, steps, int(blocks));
    }
    if (o_.ep > 1)  // the all-to-alls of the routing this rank recorded (a fresh rank's whole run)
      d.add_comm(Group::ep, CommOp::all_to_all,
                 ep::a2a_bytes(cfg_.model, load_.calls, load_.sent_rows, load_.owner_rows, int(sizeof(T))) +
                     (rerun ? load_.calls * cfg_.model.moe.experts * 8 +
                                  (load_.sent_rows + load_.owner_rows) * cfg_.model.C * int64_t(sizeof(T))
                            : 0));
  }
  // Per step: the loss, and the squared norm (one partial per rank when
  // padded; otherwise one per unit, summed in unit order, and an MoE model's
  // experts last).
  const int64_t norm = g > 1 ? 8 : 8 * (int64_t(layout_.num_units()) + (cfg_.model.moe.experts > 0 ? 1 : 0));
  d.add_comm(Group::pp_scalar, CommOp::all_reduce, (8 + norm) * steps);
  if (o_.tp() > 1) {  // the tensor axis inside the stage: its chunks' pieces per microbatch, SP's grads per step
    const tp::TpShape x = tp_shape();
    tp::TpComm c;
    for (int ch = 0; ch < o_.virtual_stages; ++ch) {
      const StageSlice& st = part_.at(pr_, ch);
      const tp::TpComm s = tp::stage_comm_per_microbatch(x, st.num_blocks, st.embedding, st.head);
      c.all_reduce += s.all_reduce, c.all_gather += s.all_gather, c.reduce_scatter += s.reduce_scatter;
    }
    const int64_t n = int64_t(m_) * steps;
    // MoE blocks: no dense MLP all-reduce (SP: reduce-scatter) each way, and
    // full recompute's rerun; the experts' rows instead, from the routing
    // this rank recorded (tensor_parallel/tp_rank.cc's rule).
    int64_t moe_rows = 0;
    if (cfg_.model.moe.experts > 0) {
      const int64_t passes = o_.tensor.recompute == Recompute::full ? 3 : 2;
      (o_.tensor.sp ? c.reduce_scatter : c.all_reduce) -=
          passes * int64_t(se_.units.size()) * x.tokens() * cfg_.model.C * db;
      moe_rows = passes * load_.owner_rows * cfg_.model.C * db;
    }
    d.add_comm(Group::tp, CommOp::all_reduce, c.all_reduce * n + moe_rows + sp_held_ * db * steps);
    if (c.all_gather) d.add_comm(Group::tp, CommOp::all_gather, c.all_gather * n);
    if (c.reduce_scatter) d.add_comm(Group::tp, CommOp::reduce_scatter, c.reduce_scatter * n);
  }
  if (o_.cp() > 1) {  // the context axis: its attention in every layer of the stage's chunks
    int64_t layers = 0;
    for (int ch = 0; ch < o_.virtual_stages; ++ch) layers += part_.at(pr_, ch).num_blocks;
    tp::declare_cp_comm(d, tp_shape(), layers * m_ * steps);
  }
  return d;
}

template <class T>
RankTimes PipelineRank<T>::times() const {
  RankTimes t;
  t.wall_s = timing_.wall_s;
  t.busy_s = timing_.busy_s;
  for (const auto& e : timing_.timeline)
    t.timeline.insert(t.timeline.end(), {double(e.op), double(e.microbatch), double(e.chunk), e.start, e.end});
  return t;
}

template class PipelineRank<double>;
template class PipelineRank<float>;
template class PipelineRank<bf16>;

}  // namespace pb::pipeline
