// DDP's hooks (hooks.h): gradient buckets (PyTorch DDP's Reducer: a bucket
// closes once it holds bucket_bytes, units in backward order), all-reduced as
// soon as their last unit's gradient is in (overlap) or after backward.
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

}  // namespace

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
  template std::unique_ptr<FamilyHooks<T>> make_hooks(Component<T>&, const ParamLayout&, MemoryTracker&);
PB_INSTANTIATE(double)
PB_INSTANTIATE(float)
PB_INSTANTIATE(bf16)
#undef PB_INSTANTIATE

}  // namespace pb::dp
