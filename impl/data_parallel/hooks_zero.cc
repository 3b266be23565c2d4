// The ZeRO family's hooks (hooks.h). ZeRO-1 accumulates full gradients and
// reduces once per step; ZeRO-2 and the ZeRO-3 family reduce-scatter each
// unit's gradient of each microbatch as it completes; the ZeRO-3 family
// (ZeRO-3, HSDP, hZeRO) also gathers every unit's parameters before use.
// Also a pipeline stage's sharded-gradient hooks (ZeRO-2, the ZeRO-3 family).
#include <map>
#include <utility>
#include <vector>

#include "impl/data_parallel/hooks.h"

namespace pb::dp {
namespace {

// ZeRO-1 and ZeRO-2: full parameters in place.
template <class T>
class ZeroHooks : public FamilyHooks<T> {
 public:
  ZeroHooks(Component<T>& dp, UnitRoles roles, MemoryTracker& mem) : dp_(dp), roles_(roles), mem_(mem) {}

  void start_microbatch(int k, int /*micro*/) override {
    k_ = k;
    backward_ = false;
  }
  const T* params(int u) override { return dp_.unit_params(u); }
  T* grads(int u) override {
    backward_ = true;
    if (dp_.grads_full()) return dp_.unit_grads(u);  // ZeRO-1: reduced once, after the last microbatch
    auto& b = unit_grads_[u];
    if (b.empty()) b = Buffer<T>(&mem_, MemTag::comm, size_t(dp_.shards().unit(u).padded));
    return b.data();
  }
  void grads_ready(int u) override {
    if (dp_.grads_full()) return;
    auto it = unit_grads_.find(u);
    dp_.reduce_unit(u, it->second.data(), k_ == 0);
    unit_grads_.erase(it);
    if (u == 0) end_microbatch();  // unit 0's gradient completes last
  }
  void finish() override { dp_.finish_reduction(); }

 protected:
  virtual void end_microbatch() {}

  Component<T>& dp_;
  UnitRoles roles_;
  MemoryTracker& mem_;
  int k_ = 0;
  bool backward_ = false;
  std::map<int, Buffer<T>> unit_grads_;
};

// ZeRO-3 family: parameters gathered per use.
template <class T>
class Zero3Hooks final : public ZeroHooks<T> {
 public:
  using ZeroHooks<T>::ZeroHooks;

  void start_microbatch(int k, int micro) override {
    ZeroHooks<T>::start_microbatch(k, micro);
    forward_done_ = false;
  }

  const T* params(int u) override {
    const DpOptions& o = this->dp_.options();
    if (this->backward_ && is_block(u) && o.has(Fault::stale_params) && !last_released_.empty())
      gathered_[u].buf = std::move(last_released_);  // stale: never gathered
    const T* p = acquire(u);
    const UnitRoles& r = this->roles_;
    if (!this->backward_ && u == r.last_forward) forward_done_ = true;  // the model's head re-uses unit 0
    if (forward_done_ && !this->backward_) return p;
    for (int k = 1; k <= o.prefetch; ++k) {  // prefetch in use order
      const int next = this->backward_ ? u - k : u + k;
      if (this->backward_ ? next >= r.first_block : next <= r.last_forward) start(next);
    }
    return p;
  }

  void release_params(int u) override {
    const DpOptions& o = this->dp_.options();
    if (!is_block(u)) return;
    if (!this->backward_ && !o.reshard_after_forward) return;
    auto it = gathered_.find(u);
    if (it == gathered_.end()) return;
    if (!this->backward_ && o.has(Fault::keep_gathered)) {  // leaked, yet gathered again for backward
      leaked_.push_back(std::move(it->second.buf));
      gathered_.erase(it);
      return;
    }
    // Only the stale_params fault reuses a released buffer; otherwise it is
    // freed here, as the declared comm peak assumes.
    if (o.has(Fault::stale_params)) last_released_ = std::move(it->second.buf);
    gathered_.erase(it);
  }

 private:
  using Gathered = typename Component<T>::Gathered;
  bool is_block(int u) const { return this->roles_.is_block(u); }

  void start(int u) {
    if (gathered_.count(u)) return;
    // hZeRO's backward gathers blocks from the node-local secondary copy.
    gathered_[u] = this->dp_.start_gather(u, this->backward_ && is_block(u));
  }
  const T* acquire(int u) {
    start(u);
    return this->dp_.wait_gather(u, gathered_[u]);
  }
  void end_microbatch() override {
    gathered_.clear();  // the root units (embedding, final LN) are resharded now
    last_released_.reset();
    leaked_.clear();
  }

  bool forward_done_ = false;
  std::map<int, Gathered> gathered_;
  Buffer<T> last_released_;
  std::vector<Buffer<T>> leaked_;  // Fault::keep_gathered
};

// A stage's ZeRO-2 or ZeRO-3 family (hooks.h StageHooks): each (microbatch,
// unit)'s gradient reduce-scattered as it completes, the step's first per
// unit overwriting the shard; ZeRO-3 family parameters gathered per read.
// The tied rows are summed on the reduced shards (TiedGrad).
template <class T>
class ShardedStageHooks final : public StageHooks<T> {
 public:
  ShardedStageHooks(Component<T>& dp, MemoryTracker& mem) : dp_(dp), mem_(mem) {
    reduced_.assign(size_t(dp.num_units()), 0);
  }

  void start_step() override {
    dp_.zero_grads();
    reduced_.assign(size_t(dp_.num_units()), 0);
  }
  const T* params(int u, int /*version*/, bool backward) override {
    if (!dp_.params_sharded()) return dp_.unit_params(u);
    auto [it, fresh] = gathered_.try_emplace(u);
    if (fresh) it->second = dp_.start_gather(u, backward);  // hZeRO: backward from the secondary
    return dp_.wait_gather(u, it->second);
  }
  void release_params(int u) override { gathered_.erase(u); }
  T* grads(int mb, int u, int /*version*/) override {
    auto [it, fresh] = unit_grads_.try_emplace({mb, u});
    if (fresh) {
      const size_t n = size_t(dp_.shards().unit(u).padded);
      it->second = Buffer<T>(&mem_, MemTag::comm, n);
      dp_.ops().zero(it->second.data(), n * sizeof(T));
    }
    return it->second.data();
  }
  void grads_ready(int mb, int u) override {
    auto it = unit_grads_.find({mb, u});
    dp_.reduce_unit(u, it->second.data(), /*first_micro=*/!reduced_[size_t(u)]);
    reduced_[size_t(u)] = 1;
    unit_grads_.erase(it);
  }
  // pp = 1: the head adds to the embedding's own buffer of the microbatch.
  T* head_grads(int mb, int wte, int version) override { return grads(mb, wte, version); }
  void finish(const TiedGrad<T>& tied) override {
    dp_.sync_after_flush();
    if (tied.unit < 0 || !tied.sum) return;
    const UnitShard& s = dp_.shards().unit(tied.unit);
    tied.sum(dp_.grads_data() + s.shard_off, size_t(s.slice));
  }
  bool idle() const override { return gathered_.empty() && unit_grads_.empty(); }

 private:
  Component<T>& dp_;
  MemoryTracker& mem_;
  std::map<int, typename Component<T>::Gathered> gathered_;
  std::map<std::pair<int, int>, Buffer<T>> unit_grads_;  // (microbatch, unit)
  std::vector<char> reduced_;  // unit already reduced this step (later microbatches accumulate)
};

}  // namespace

template <class T>
std::unique_ptr<StageHooks<T>> make_sharded_stage_hooks(Component<T>& dp, MemoryTracker& mem) {
  return std::make_unique<ShardedStageHooks<T>>(dp, mem);
}

template <class T>
std::unique_ptr<FamilyHooks<T>> make_zero_hooks(Component<T>& dp, UnitRoles roles, MemoryTracker& mem) {
  if (dp.params_sharded()) return std::make_unique<Zero3Hooks<T>>(dp, roles, mem);
  return std::make_unique<ZeroHooks<T>>(dp, roles, mem);
}

template std::unique_ptr<FamilyHooks<double>> make_zero_hooks(Component<double>&, UnitRoles, MemoryTracker&);
template std::unique_ptr<FamilyHooks<float>> make_zero_hooks(Component<float>&, UnitRoles, MemoryTracker&);
template std::unique_ptr<FamilyHooks<bf16>> make_zero_hooks(Component<bf16>&, UnitRoles, MemoryTracker&);
template std::unique_ptr<StageHooks<double>> make_sharded_stage_hooks(Component<double>&, MemoryTracker&);
template std::unique_ptr<StageHooks<float>> make_sharded_stage_hooks(Component<float>&, MemoryTracker&);
template std::unique_ptr<StageHooks<bf16>> make_sharded_stage_hooks(Component<bf16>&, MemoryTracker&);

}  // namespace pb::dp
