// DDP's hooks (hooks.h): gradient buckets (PyTorch DDP's Reducer: a bucket
// closes once it holds bucket_bytes, units in backward order), all-reduced as
// soon as their last unit's gradient is in (overlap) or after backward.
// Also a pipeline stage's full-gradient hooks (DDP and ZeRO-1, with
// PipeDream-2BW's two versions) and make_stage_hooks.
#include <stdexcept>
#include <string>
#include <vector>

#include "impl/data_parallel/hooks.h"

namespace pb::dp {
namespace {

template <class T>
class DdpHooks final : public FamilyHooks<T> {
 public:
  explicit DdpHooks(Component<T>& dp) : dp_(dp), o_(dp.options()) {
    // Units in backward order (last, ..., 0) are contiguous descending ranges
    // of the gradient buffer.
    Bucket cur;
    const ShardLayout& sl = dp.shards();
    unit_bucket_.resize(size_t(sl.num_units()));
    for (int u = sl.num_units() - 1; u >= 0; --u) {
      if (cur.units == 0) cur.hi = sl.unit(u).full_off + sl.unit(u).size;
      cur.lo = sl.unit(u).full_off;
      cur.units++;
      unit_bucket_[size_t(u)] = int(buckets_.size());
      if (int64_t(cur.hi - cur.lo) * int64_t(sizeof(T)) >= o_.bucket_bytes || u == 0) {
        buckets_.push_back(cur);
        cur = Bucket{};
      }
    }
  }

  void start_microbatch(int k, int micro) override {
    sync_ = o_.has(Fault::sync_wrong_microbatch) ? k == 0 : k == micro - 1;
    for (auto& b : buckets_) b.pending = b.units;
  }
  const T* params(int u) override { return dp_.unit_params(u); }
  T* grads(int u) override { return dp_.unit_grads(u); }

  void grads_ready(int u) override {
    if (!sync_ || dp_.dp().size() == 1) return;  // no_sync: accumulate locally
    Bucket& b = buckets_[size_t(unit_bucket_[size_t(u)])];
    if (--b.pending > 0) return;
    if (o_.has(Fault::skip_bucket) && &b == &buckets_.front()) return;
    if (o_.overlap) requests_.push_back(dp_.dp().iall_reduce(at(b), at(b), size_t(b.hi - b.lo), dtype_of<T>()));
    else b.deferred = true;
  }

  void finish() override {
    for (auto& b : buckets_)
      if (b.deferred) {
        dp_.dp().all_reduce(at(b), at(b), size_t(b.hi - b.lo), dtype_of<T>());
        b.deferred = false;
      }
    wait_all(requests_);
    requests_.clear();
  }

 private:
  struct Bucket {
    int64_t lo = 0, hi = 0;  // range of the gradient buffer (DDP's: the units unpadded, in order)
    int units = 0, pending = 0;
    bool deferred = false;
  };
  T* at(const Bucket& b) { return dp_.grads_data() + b.lo; }

  Component<T>& dp_;
  const DpOptions& o_;
  bool sync_ = true;
  std::vector<Bucket> buckets_;
  std::vector<int> unit_bucket_;
  std::vector<Request> requests_;
};

// A stage's DDP or ZeRO-1 (hooks.h StageHooks): gradients accumulate in
// place (the kernels' += in microbatch order) and are reduced once after the
// flush, the tied rows summed first. 2BW: W(k-1)'s copy beside the
// component's W(k), and g of the other parity in a second buffer.
template <class T>
class FullGradStageHooks final : public StageHooks<T> {
 public:
  FullGradStageHooks(Component<T>& dp, const StagePlan& plan, MemoryTracker& mem) : dp_(dp) {
    const size_t n = size_t(dp.shards().full_size());
    if (plan.two_versions) {
      prev_params_ = Buffer<T>(&mem, MemTag::params, n);
      other_grads_ = Buffer<T>(&mem, MemTag::grads, n);
    }
    if (plan.head_rows > 0)
      for (int i = 0; i < (plan.two_versions ? 2 : 1); ++i)
        head_grads_[i] = Buffer<T>(&mem, MemTag::grads, size_t(plan.head_rows));
  }

  void start_step() override {
    dp_.zero_grads();
    const Buffer<T>& h = head_grads_[grads_version_];
    if (!h.empty()) dp_.ops().zero(h.data(), h.size() * sizeof(T));
  }
  const T* params(int u, int version, bool /*backward*/) override {
    if (version == version_) return dp_.unit_params(u);
    if (version == version_ - 1) return prev_params_.data() + dp_.shards().unit(u).full_off;
    throw std::logic_error("2bw: a microbatch needs weight version " + std::to_string(version) +
                           " but the rank holds " + std::to_string(version_));
  }
  T* grads(int /*mb*/, int u, int version) override {
    if (version % 2 == grads_version_) return dp_.unit_grads(u);
    return other_grads_.data() + dp_.shards().unit(u).full_off;
  }
  T* head_grads(int /*mb*/, int /*wte*/, int version) override { return head_grads_[version % 2].data(); }
  void finish(const TiedGrad<T>& tied) override {
    if (tied.unit >= 0) {  // E + H before the reduction
      T* mine = dp_.unit_grads(tied.unit);
      if (tied.sum) tied.sum(mine, size_t(tied.rows));
      else dp_.ops().accumulate(mine, head_grads_[grads_version_].data(), size_t(tied.rows));
    }
    dp_.sync_after_flush();
  }
  void keep_version(int k) override {
    dp_.ops().copy(prev_params_.data(), dp_.params_data(), prev_params_.size() * sizeof(T));
    version_ = k;
  }
  void bring_grads(int k) override {
    if (grads_version_ == k % 2) return;
    dp_.swap_grads(other_grads_);
    grads_version_ = k % 2;
  }
  int version() const override { return version_; }
  bool idle() const override { return true; }

 private:
  Component<T>& dp_;
  Buffer<T> prev_params_, other_grads_, head_grads_[2];
  int version_ = 0;        // the weight version the component holds
  int grads_version_ = 0;  // the parity of the versions whose gradients the component holds
};

}  // namespace

template <class T>
std::unique_ptr<StageHooks<T>> make_full_grad_stage_hooks(Component<T>& dp, const StagePlan& plan,
                                                          MemoryTracker& mem) {
  return std::make_unique<FullGradStageHooks<T>>(dp, plan, mem);
}

template <class T>
std::unique_ptr<StageHooks<T>> make_stage_hooks(Component<T>& dp, const StagePlan& plan, MemoryTracker& mem) {
  if (dp.grads_full()) return make_full_grad_stage_hooks(dp, plan, mem);
  return make_sharded_stage_hooks(dp, mem);
}

template <class T>
std::unique_ptr<FamilyHooks<T>> make_ddp_hooks(Component<T>& dp) {
  return std::make_unique<DdpHooks<T>>(dp);
}

template <class T>
std::unique_ptr<FamilyHooks<T>> make_hooks(Component<T>& dp, UnitRoles roles, MemoryTracker& mem) {
  if (dp.options().shard == Shard::none) return make_ddp_hooks(dp);
  return make_zero_hooks(dp, roles, mem);
}

template <class T>
std::unique_ptr<FamilyHooks<T>> make_hooks(Component<T>& dp, const ParamLayout& layout, MemoryTracker& mem) {
  return make_hooks(dp, UnitRoles::model(layout.num_units()), mem);
}

#define PB_INSTANTIATE(T)                                                                          \
  template std::unique_ptr<FamilyHooks<T>> make_ddp_hooks(Component<T>&);                         \
  template std::unique_ptr<FamilyHooks<T>> make_hooks(Component<T>&, UnitRoles, MemoryTracker&);  \
  template std::unique_ptr<FamilyHooks<T>> make_hooks(Component<T>&, const ParamLayout&, MemoryTracker&);       \
  template std::unique_ptr<StageHooks<T>> make_full_grad_stage_hooks(Component<T>&, const StagePlan&,            \
                                                                     MemoryTracker&);                          \
  template std::unique_ptr<StageHooks<T>> make_stage_hooks(Component<T>&, const StagePlan&, MemoryTracker&);
PB_INSTANTIATE(double)
PB_INSTANTIATE(float)
PB_INSTANTIATE(bf16)
#undef PB_INSTANTIATE

}  // namespace pb::dp
