// Pipeline executor, part 2: options, the gradient synchronisation after the
// flush (tied wte sum, dp reduction, loss and norm), the optimizer, and the
// PipeDream-2BW weight versions (executor.h).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "harness/status.h"
#include "impl/pipeline/executor.h"

namespace pb::pipeline {

std::string_view dp_mode_name(DpMode m) { return m == DpMode::ddp ? "ddp" : "zero1"; }

DpMode parse_dp_mode(std::string_view s, std::string_view field) {
  if (s == "ddp") return DpMode::ddp;
  if (s == "zero1") return DpMode::zero1;
  throw InputError(std::string(field) + ": must be ddp or zero1, got '" + std::string(s) + "'");
}

std::string PipelineFaults::describe() const {
  std::string f;
  auto add = [&](bool on, const char* n) { if (on) f += (f.empty() ? " fault:" : ",") + std::string(n); };
  add(skip_microbatch, "skip_microbatch");
  add(grad_to_wrong_stage, "grad_to_wrong_stage");
  add(tied_grad_not_summed, "tied_grad_not_summed");
  add(drop_w, "drop_w");
  return f;
}

std::string PipelineOptions::describe(int microbatches) const {
  std::string d = std::string(schedule_name(kind)) + " pp" + std::to_string(pp) + " v" +
                  std::to_string(virtual_stages) + " m" + std::to_string(microbatches);
  if (dp > 1) d += " x " + std::string(dp_mode_name(dp_mode)) + " dp" + std::to_string(dp);
  if (kind == ScheduleKind::pipedream_2bw) d += " (judged against delayed-weight training)";
  return d + faults.describe();
}

ScheduleConfig schedule_config(const PipelineOptions& o, const TrainConfig& cfg) {
  return {o.pp, cfg.microbatches, o.virtual_stages,
          o.kind == ScheduleKind::pipedream_2bw ? cfg.steps : 1};
}

void validate(const PipelineOptions& o, const TrainConfig& cfg, int world) {
  cfg.validate();
  require(o.dp >= 1, "dp: must be >= 1, got " + std::to_string(o.dp));
  check_pipeline_mesh(world, o.pp);
  require(world == o.dp * o.pp, "dp: world size " + std::to_string(world) + " must equal dp * pp = " +
                                    std::to_string(o.dp * o.pp));
  partition_layers(cfg.model.L, o.pp, o.virtual_stages);  // more stages than layers
  check_config(o.kind, schedule_config(o, cfg));
  const int split = o.dp * cfg.microbatches;
  require(cfg.batch % split == 0, "train.batch: " + std::to_string(cfg.batch) +
                                      " sequences do not split into dp * microbatches = " +
                                      std::to_string(split) + " equal microbatches");
  const auto& f = o.faults;
  require(!f.grad_to_wrong_stage || (o.pp >= 2 && o.virtual_stages == 1 && cfg.microbatches >= 2),
          "fault grad_to_wrong_stage: needs pp >= 2, virtual_stages = 1 and microbatches >= 2");
  // drop_w is the one fault of some schedules only: the others have no W action.
  require(!f.drop_w || o.kind == ScheduleKind::zb_h1,
          "fault drop_w: does not apply to " + std::string(schedule_name(o.kind)) +
              " (applies to: zb-h1, the split-backward schedule)");
  require(!f.skip_microbatch || cfg.microbatches >= 2, "fault skip_microbatch: needs microbatches >= 2");
  require(!f.tied_grad_not_summed || o.pp >= 2, "fault tied_grad_not_summed: needs pp >= 2");
}

SplitPlan pipeline_replay_plan(const PipelineOptions& o, const TrainConfig& cfg) {
  SplitPlan p;
  p.groups = o.dp;
  p.micro = cfg.microbatches;
  p.separate_head_grad = true;
  const ParamLayout l(cfg.model);
  const Partition part = partition_layers(cfg.model.L, o.pp, o.virtual_stages);
  if (o.dp == 1 || o.dp_mode == DpMode::ddp) {  // per-unit sums, added in unit order
    for (int u = 0; u < l.num_units(); ++u) p.norm_parts.push_back({{l.unit_begin(u), l.unit_end(u)}});
    return p;
  }
  for (int pr = 0; pr < o.pp; ++pr) {  // ZeRO-1: per-rank sums, world rank order (dp fastest)
    const StagePieces sp = stage_pieces(l, part, pr);
    const int64_t slice = (sp.size + o.dp - 1) / o.dp;
    for (int d = 0; d < o.dp; ++d)
      p.norm_parts.push_back(norm_ranges(sp, d * slice, std::min((d + 1) * slice, sp.size)));
  }
  return p;
}

template <class T>
double PipelineRank<T>::reduce_grads(T* g, T* hg) {
  const size_t wte = size_t(cfg_.model.V) * cfg_.model.C;
  const DType dt = dtype_of<T>();
  if (!o_.faults.tied_grad_not_summed) {
    if (tied_) {
      T* mine = g + (pr_ == 0 ? unit_off(0) : sp_.head_wte_local());
      tied_->all_reduce(mine, mine, wte, dt);
    } else if (o_.pp == 1) {
      kernels::accumulate(g + unit_off(0), hg, wte);
    }
  }
  if (o_.dp > 1 && o_.dp_mode == DpMode::zero1) {
    // Each rank's partial over its owned slice, summed over the world in rank order.
    dp_->reduce_scatter(g, g + dr_ * slice_, size_t(slice_), dt);
    const int64_t lo = dr_ * slice_, hi = std::min(lo + slice_, sp_.size);
    double sq = 0;
    for (auto [b, e] : norm_ranges(sp_, lo, hi)) sq += kernels::sum_squares(g + sp_.local(b), size_t(e - b));
    scalar_->all_reduce(&sq, &sq, 1, DType::f64);
    return sq;
  }
  if (o_.dp > 1) dp_->all_reduce(g, g, size_t(padded_), dt);
  // Per-unit sums (each unit's from exactly one rank, so the all-reduce is
  // exact), added in unit order: the same bits for every pp, v and schedule.
  std::vector<double> unit_sq(size_t(layout_.num_units()), 0.0);
  if (dr_ == 0)
    for (const Piece& p : sp_.pieces)
      for (int u = 0; u < layout_.num_units() && !p.tied; ++u)
        if (layout_.unit_begin(u) >= p.flat_lo && layout_.unit_end(u) <= p.flat_hi)
          unit_sq[size_t(u)] = kernels::sum_squares(g + unit_off(u), size_t(layout_.unit_size(u)));
  scalar_->all_reduce(unit_sq.data(), unit_sq.data(), unit_sq.size(), DType::f64);
  double sq = 0;
  for (double x : unit_sq) sq += x;
  return sq;
}

template <class T>
void PipelineRank<T>::apply(T* g, long t, double norm) {
  const double lr = lr_at(cfg_.optim, int(t), cfg_.steps);
  opt_->step(params_.data(), g, cfg_.optim, t, lr, clip_factor(norm, cfg_.optim.clip));
  if (o_.dp > 1 && o_.dp_mode == DpMode::zero1)
    dp_->all_gather(params_.data() + dr_ * slice_, params_.data(), size_t(slice_), dtype_of<T>());
}

template <class T>
StepStats PipelineRank<T>::step() {
  require(!s_.async_weights, "pipeline: step() runs synchronous schedules; use run_window() for 2bw");
  std::memset(static_cast<void*>(grads_[0].data()), 0, grads_[0].size() * sizeof(T));
  if (o_.pp == 1) std::memset(static_cast<void*>(head_grads_[0].data()), 0, head_grads_[0].size() * sizeof(T));
  losses_.assign(size_t(m_), 0.0);
  run_actions();
  const double sq = reduce_grads(grads_[0].data(), head_grads_[0].data());
  double loss = 0;
  if (pr_ == o_.pp - 1)
    for (double l : losses_) loss += l;  // microbatch order
  scalar_->all_reduce(&loss, &loss, 1, DType::f64);
  StepStats st;
  st.step = ++step_;
  st.loss = loss / double(cfg_.tokens_per_step());
  st.grad_norm = std::sqrt(sq);
  st.lr = lr_at(cfg_.optim, st.step, cfg_.steps);
  apply(grads_[0].data(), st.step, st.grad_norm);
  st.seconds = timing_.wall_s;
  return st;
}

template <class T>
void PipelineRank<T>::update_2bw(int k) {
  // Before group k: W(k) = W(k-1) stepped with g(k-2) (schedule.h); W(1) = W(0).
  std::memcpy(static_cast<void*>(prev_params_.data()), params_.data(), params_.size() * sizeof(T));
  if (k >= 2) {
    T* g = grads_[k % 2].data();
    T* hg = o_.pp == 1 ? head_grads_[k % 2].data() : nullptr;
    const double sq = reduce_grads(g, hg);
    norms_.push_back(std::sqrt(sq));
    if (!snapshot_taken_) {
      grads_snapshot_ = gather(g, true);
      snapshot_taken_ = true;
    }
    apply(g, k - 1, norms_.back());
    std::memset(static_cast<void*>(g), 0, grads_[k % 2].size() * sizeof(T));
    if (hg) std::memset(static_cast<void*>(hg), 0, head_grads_[k % 2].size() * sizeof(T));
  }
  version_ = k;
}

template <class T>
std::vector<StepStats> PipelineRank<T>::run_window() {
  require(s_.async_weights, "pipeline: run_window() runs PipeDream-2BW");
  const int K = s_.steps;
  losses_.assign(size_t(K) * m_, 0.0);
  norms_.clear();
  run_actions();
  // Drain: g(K-2) and g(K-1) are still to be applied (as updates K and K+1 would).
  for (int k = std::max(2, K); k <= K + 1; ++k) update_2bw(k);
  std::vector<double> loss(size_t(K), 0.0);
  if (pr_ == o_.pp - 1)
    for (int j = 0; j < K * m_; ++j) loss[size_t(j / m_)] += losses_[size_t(j)];
  scalar_->all_reduce(loss.data(), loss.data(), loss.size(), DType::f64);
  std::vector<StepStats> out;
  for (int k = 0; k < K; ++k) {
    StepStats st;
    st.step = k + 1;
    st.loss = loss[size_t(k)] / double(cfg_.tokens_per_step());
    st.grad_norm = norms_[size_t(k)];
    st.lr = lr_at(cfg_.optim, k + 1, cfg_.steps);
    out.push_back(st);
  }
  step_ = K;
  return out;
}

template <class T>
std::vector<double> PipelineRank<T>::gather(const T* buf, bool grads) {
  std::vector<double> full(size_t(layout_.total()), 0.0);
  int64_t lo = 0, hi = sp_.size;
  if (o_.dp > 1 && (o_.dp_mode == DpMode::ddp || !grads)) {
    if (dr_ != 0) hi = 0;
  } else if (o_.dp > 1) {
    lo = dr_ * slice_;
    hi = std::min(lo + slice_, sp_.size);
  }
  for (auto [b, e] : norm_ranges(sp_, lo, hi))
    for (int64_t i = b; i < e; ++i) full[size_t(i)] = static_cast<double>(buf[sp_.local(b) + i - b]);
  check_->all_reduce(full.data(), full.data(), full.size(), DType::f64);
  return full;
}

template <class T>
std::vector<double> PipelineRank<T>::full_params() { return gather(params_.data(), false); }

template <class T>
std::vector<double> PipelineRank<T>::full_grads() {
  if (s_.async_weights) return grads_snapshot_;
  return gather(grads_[0].data(), true);
}

template class PipelineRank<double>;
template class PipelineRank<float>;
template class PipelineRank<bf16>;

}  // namespace pb::pipeline
