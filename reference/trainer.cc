#include "reference/trainer.h"

#include <cmath>
#include <cstring>

#include "harness/status.h"
#include "reference/init.h"

namespace pb {

template <class T>
double sum_squares_ranges(const T* g, const std::vector<std::pair<int64_t, int64_t>>& ranges) {
  double s = 0;
  for (auto [lo, hi] : ranges) s += kernels::sum_squares(g + lo, size_t(hi - lo));
  return s;
}

template <class T>
ReferenceTrainer<T>::ReferenceTrainer(const TrainConfig& cfg, SplitPlan plan,
                                      std::shared_ptr<const kernels::DeviceOps<T>> ops,
                                      std::shared_ptr<DeviceMemory> memory)
    : cfg_(cfg), plan_(std::move(plan)), ops_(kernels::ops_or_cpu<T>(std::move(ops))), memory_(std::move(memory)),
      layout_(cfg.model), data_(cfg.model.V, cfg.data.seed, cfg.data.branching, cfg.data.mix) {
  cfg_.validate();
  tracker_.set_device_memory(memory_.get());
  if (!ops_->is_host()) {
    // The plain plan, or a mixture of experts' joint microbatches (the
    // network a run with global capacity trains; moe_joint's groups only
    // choose the samples): the replays' orders of summation are host code.
    require((plan_.groups == 1 || plan_.moe_joint) && !plan_.separate_head_grad && plan_.norm_parts.empty() &&
                plan_.block == 0 && !plan_.reduce_per_micro,
            "reference trainer: on " + ops_->name() + " only the plain plan runs (the strategies' replays are host code)");
    require(memory_ != nullptr, "reference trainer: a device trainer needs the device's memory");
  }
  int split = plan_.groups * plan_.micro;
  require(plan_.groups > 0 && plan_.micro > 0, "split plan: groups and micro must be > 0");
  require(plan_.block >= 0 && (plan_.block == 0 || plan_.groups % plan_.block == 0),
          "split plan: block must divide groups");
  require(cfg.batch % split == 0, "train.batch: must divide into " + std::to_string(split) +
                                      " microbatches, got " + std::to_string(cfg.batch));
  kernels::set_blas_threads(cfg.threads);
  const int64_t n = layout_.total();
  params_ = Buffer<T>(&tracker_, MemTag::params, size_t(n));
  init_params(*ops_, layout_, cfg.seed, 0, n, params_.data());
  grads_ = Buffer<T>(&tracker_, MemTag::grads, size_t(n));
  if (plan_.separate_head_grad)
    head_grads_ = Buffer<T>(&tracker_, MemTag::grads, size_t(cfg.model.V) * cfg.model.C);
  if ((plan_.groups > 1 && !plan_.moe_joint) || plan_.reduce_per_micro) {
    group_grads_ = Buffer<T>(&tracker_, MemTag::workspace, size_t(n));
    group_acc_ = Buffer<acc_t<T>>(&tracker_, MemTag::workspace, size_t(n));
    if (plan_.two_level()) outer_acc_ = Buffer<acc_t<T>>(&tracker_, MemTag::workspace, size_t(n));
  }
  opt_ = std::make_unique<AdamW<T>>(layout_, cfg.seed, std::vector<Segment>{{0, n, 0, 0, 0}}, n, &tracker_,
                                    Place::device, false, *ops_);
  runner_ = std::make_unique<MicrobatchRunner<T>>(layout_, data_, &tracker_,
                                                  cfg.batch / (plan_.moe_joint ? plan_.micro : split), cfg.seq,
                                                  MoeScope{}, *ops_);
  clock_ = ops_->timeline();
}

template <class T>
StepStats ReferenceTrainer<T>::step() {
  clock_->clear();
  const int t0 = clock_->mark();
  const int64_t n = layout_.total();
  const int Bm = runner_->Bm();
  const double dloss = 1.0 / double(cfg_.tokens_per_step());
  double loss = 0;
  const bool moe = cfg_.model.moe.experts > 0;
  if (moe) runner_->reset_moe_step();
  if (plan_.moe_joint) {  // microbatch k of every group at once
    ops_->zero(grads_.data(), size_t(n) * sizeof(T));
    FlatHooks<T> hooks(layout_, params_.data(), grads_.data());
    const int per = Bm / plan_.groups;
    for (int k = 0; k < plan_.micro; ++k) {
      std::vector<int64_t> firsts;
      for (int g = 0; g < plan_.groups; ++g) firsts.push_back(int64_t(g * plan_.micro + k) * per);
      loss += runner_->run_samples(step_, firsts, dloss, hooks);
    }
  }
  if (plan_.reduce_per_micro && !plan_.moe_joint) loss = step_reduced_per_micro();
  for (int g = 0; g < plan_.groups && !plan_.reduce_per_micro && !plan_.moe_joint; ++g) {
    T* gb = plan_.groups > 1 ? group_grads_.data() : grads_.data();
    ops_->zero(gb, size_t(n) * sizeof(T));
    if (plan_.separate_head_grad)
      std::memset(static_cast<void*>(head_grads_.data()), 0, head_grads_.size() * sizeof(T));
    FlatHooks<T> hooks(layout_, params_.data(), gb,
                       plan_.separate_head_grad ? head_grads_.data() : nullptr);
    double group_loss = 0;
    for (int k = 0; k < plan_.micro; ++k)
      group_loss += runner_->run(step_, int64_t(g * plan_.micro + k) * Bm, dloss, hooks);
    if (plan_.separate_head_grad)
      kernels::accumulate(gb + layout_.wte_offset(), head_grads_.data(), head_grads_.size());
    loss += group_loss;
    if (plan_.groups > 1) add_group(g, gb);
  }
  if (plan_.groups > 1 && !plan_.reduce_per_micro && !plan_.moe_joint) {
    const auto* sum = plan_.two_level() ? outer_acc_.data() : group_acc_.data();
    for (int64_t i = 0; i < n; ++i) grads_[i] = cast<T>(sum[i]);
  }

  StepStats st;
  st.step = ++step_;
  st.loss = loss / double(cfg_.tokens_per_step());
  if (moe) {
    const MoeStepRecord& r = runner_->moe_step();
    st.moe_tokens = r.tokens;
    st.moe_margins = r.margins;
    for (double a : r.aux_tokens) st.moe_aux.push_back(a / double(cfg_.tokens_per_step()));
  }
  double sq = 0;
  if (plan_.norm_parts.empty()) sq = ops_->sum_squares(grads_.data(), size_t(n));
  for (const auto& ranges : plan_.norm_parts) sq += sum_squares_ranges(grads_.data(), ranges);
  st.grad_norm = std::sqrt(sq);
  st.lr = lr_at(cfg_.optim, st.step, cfg_.steps);
  opt_->step(params_.data(), grads_.data(), cfg_.optim, st.step, st.lr,
             clip_factor(st.grad_norm, cfg_.optim.clip));
  st.seconds = clock_->seconds(t0, clock_->mark());  // the device's time (waits for the step's last op)
  ops_->synchronize();
  return st;
}

// The local backend's reduction, as in harness/comm_local_ops.cc: members in
// order, ((x0 + x1) + x2) + ... in the accumulation type, rounded once per
// collective. Two levels: the inner sum is rounded to T before the outer one
// adds it.
template <class T>
void ReferenceTrainer<T>::add_group(int g, const T* gb) {
  using A = acc_t<T>;
  const int64_t n = layout_.total();
  const int b = plan_.two_level() ? plan_.block : plan_.groups;
  A* acc = group_acc_.data();
  for (int64_t i = 0; i < n; ++i) acc[i] = g % b == 0 ? static_cast<A>(gb[i]) : acc[i] + static_cast<A>(gb[i]);
  if (!plan_.two_level() || g % b != b - 1) return;
  A* outer = outer_acc_.data();
  for (int64_t i = 0; i < n; ++i) {
    const A inner = static_cast<A>(cast<T>(acc[i]));
    outer[i] = g / b == 0 ? inner : outer[i] + inner;
  }
}

namespace {

// One vector (the gradient, or the LM head's separate wte gradient) reduced
// across groups per microbatch as the run reduces it — a rank-ordered sum in
// the accumulation type rounded once per collective, two levels when asked —
// then accumulated over microbatches with the kernels' += (the first copied):
// a reduce-scatter per microbatch onto a zeroed shard. HSDP's outer level
// (the replica all-reduce) runs once, in finish(). Replay-only scratch:
// plain vectors, not the tracked memory the strategies are held to.
template <class T>
struct MicroReducer {
  using A = acc_t<T>;
  int64_t n = 0;
  int groups = 1, block = 1;
  bool two = false, outer_per_micro = false;
  T* dst = nullptr;
  std::vector<A> acc, outer;
  std::vector<T> tmp, blocks;

  MicroReducer(int64_t n_, const SplitPlan& p, T* dst_) : n(n_), groups(p.groups), dst(dst_) {
    // A block of one is a level here: HSDP with shard groups of one reduces
    // nothing per microbatch and all-reduces the replicas once.
    two = p.block >= 1 && p.block < p.groups;
    block = two ? p.block : p.groups;
    outer_per_micro = p.outer_per_micro;
    acc.resize(size_t(n));
    tmp.resize(size_t(n));
    if (two) outer.resize(size_t(n));
    if (two && !outer_per_micro) blocks.resize(size_t(n) * size_t(groups / block));
  }
  void into(T* d, const A* sum, bool first) {  // round, then copy or accumulate
    for (int64_t i = 0; i < n; ++i) tmp[size_t(i)] = cast<T>(sum[i]);
    if (first) std::memcpy(static_cast<void*>(d), tmp.data(), size_t(n) * sizeof(T));
    else kernels::accumulate(d, tmp.data(), size_t(n));
  }
  void add(int g, int k, const T* src) {
    for (int64_t i = 0; i < n; ++i)
      acc[size_t(i)] = g % block == 0 ? static_cast<A>(src[i]) : acc[size_t(i)] + static_cast<A>(src[i]);
    if (g % block != block - 1) return;  // the inner sum is complete at the block's last group
    if (!two) return into(dst, acc.data(), k == 0);
    if (!outer_per_micro) return into(blocks.data() + size_t(g / block) * size_t(n), acc.data(), k == 0);
    for (int64_t i = 0; i < n; ++i) {
      const A inner = static_cast<A>(cast<T>(acc[size_t(i)]));
      outer[size_t(i)] = g / block == 0 ? inner : outer[size_t(i)] + inner;
    }
    if (g == groups - 1) into(dst, outer.data(), k == 0);
  }
  void finish() {  // HSDP: the replicas' accumulated sums, once
    if (!two || outer_per_micro) return;
    for (int blk = 0; blk < groups / block; ++blk)
      for (int64_t i = 0; i < n; ++i) {
        const A v = static_cast<A>(blocks[size_t(blk) * size_t(n) + size_t(i)]);
        outer[size_t(i)] = blk == 0 ? v : outer[size_t(i)] + v;
      }
    for (int64_t i = 0; i < n; ++i) dst[i] = cast<T>(outer[size_t(i)]);
  }
};

}  // namespace

// Microbatch k of every group, reduced as the run reduces it, then
// accumulated over k. With a separate head gradient (a pipeline's last stage
// holds the tied wte copy) it is reduced apart and added to the embedding's
// at the end, E + H in the accumulation type, rounded once (the tied
// all-reduce over {first, last} stage). Group losses are summed per group in
// microbatch order, then over groups in order (the run's loss all-reduce).
template <class T>
double ReferenceTrainer<T>::step_reduced_per_micro() {
  using A = acc_t<T>;
  const int64_t n = layout_.total();
  const int Bm = runner_->Bm(), G = plan_.groups;
  const double dloss = 1.0 / double(cfg_.tokens_per_step());
  std::vector<double> group_loss(size_t(G), 0.0);
  T* gb = group_grads_.data();
  const bool sep = plan_.separate_head_grad;
  std::vector<T> head_sum(sep ? head_grads_.size() : 0);
  MicroReducer<T> grad(n, plan_, grads_.data());
  MicroReducer<T> head(int64_t(head_sum.size()), plan_, head_sum.data());
  for (int k = 0; k < plan_.micro; ++k)
    for (int g = 0; g < G; ++g) {
      std::memset(static_cast<void*>(gb), 0, size_t(n) * sizeof(T));
      if (sep) std::memset(static_cast<void*>(head_grads_.data()), 0, head_grads_.size() * sizeof(T));
      FlatHooks<T> hooks(layout_, params_.data(), gb, sep ? head_grads_.data() : nullptr);
      group_loss[size_t(g)] += runner_->run(step_, int64_t(g * plan_.micro + k) * Bm, dloss, hooks);
      grad.add(g, k, gb);
      if (sep) head.add(g, k, head_grads_.data());
    }
  grad.finish();
  if (sep) {
    head.finish();
    T* wte = grads_.data() + layout_.wte_offset();
    for (size_t i = 0; i < head_sum.size(); ++i) wte[i] = cast<T>(static_cast<A>(wte[i]) + static_cast<A>(head_sum[i]));
  }
  double loss = 0;
  for (double l : group_loss) loss += l;
  return loss;
}

template <class T>
std::vector<double> ReferenceTrainer<T>::to_f64(const Buffer<T>& b) const {
  std::vector<T> host;  // off the host: read back first
  if (!ops_->is_host()) {
    host.resize(b.size());
    ops_->to_host(host.data(), b.data(), host.size() * sizeof(T));
  }
  const T* src = host.empty() ? b.data() : host.data();
  std::vector<double> out(b.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<double>(src[i]);
  return out;
}

template <class T>
std::vector<double> ReferenceTrainer<T>::params_f64() const {
  return to_f64(params_);
}

template <class T>
std::vector<double> ReferenceTrainer<T>::grads_f64() const {
  return to_f64(grads_);
}

template double sum_squares_ranges<double>(const double*,
                                          const std::vector<std::pair<int64_t, int64_t>>&);
template double sum_squares_ranges<float>(const float*,
                                         const std::vector<std::pair<int64_t, int64_t>>&);
template double sum_squares_ranges<bf16>(const bf16*,
                                        const std::vector<std::pair<int64_t, int64_t>>&);
template class ReferenceTrainer<double>;
template class ReferenceTrainer<float>;
template class ReferenceTrainer<bf16>;

std::unique_ptr<TrainerBase> make_reference_trainer(const TrainConfig& cfg, SplitPlan plan, const TrainDevice* device) {
  return on_train_device(cfg, device, [&](auto t, auto ops, auto memory) -> std::unique_ptr<TrainerBase> {
    return std::make_unique<ReferenceTrainer<decltype(t)>>(cfg, std::move(plan), std::move(ops), std::move(memory));
  });
}

}  // namespace pb
