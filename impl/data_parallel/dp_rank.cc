#include "impl/data_parallel/dp_rank.h"

#include <chrono>
#include <cmath>
#include <cstring>

#include "harness/status.h"
#include "reference/init.h"

namespace pb::dp {

namespace {
template <class T>
void copy_n(T* dst, const T* src, int64_t n) {
  std::memcpy(static_cast<void*>(dst), src, size_t(n) * sizeof(T));
}
}  // namespace

// ---- the hooks: where each strategy differs ---------------------------------
template <class T>
class DpRank<T>::Hooks : public UnitHooks<T> {
 public:
  explicit Hooks(DpRank& r) : r_(r), dt_(dtype_of<T>()) { build_buckets(); }

  void start_microbatch(int k, int micro) {
    k_ = k;
    sync_ = r_.o_.has(Fault::sync_wrong_microbatch) ? k == 0 : k == micro - 1;
    backward_ = false;
    forward_done_ = false;
    for (auto& b : buckets_) b.pending = b.units;
  }

  const T* params(int u) override {
    const auto& l = r_.layout_;
    if (!r_.params_sharded()) return r_.params_.data() + (r_.sharded() ? r_.sl_->unit(u).full_off : l.unit_begin(u));
    if (backward_ && is_block(u) && r_.o_.has(Fault::stale_params) && !last_released_.empty()) {
      gathered_[u].buf = std::move(last_released_);  // stale: never gathered
    }
    const T* p = acquire(u);
    const int L = l.model().L;
    if (!backward_ && u == L + 1) forward_done_ = true;  // the head re-uses unit 0
    if (forward_done_ && !backward_) return p;
    for (int k = 1; k <= r_.o_.prefetch; ++k) {  // prefetch in use order
      int next = backward_ ? u - k : u + k;
      if (backward_ ? next >= 1 : next <= L + 1) start_gather(next);
    }
    return p;
  }

  void release_params(int u) override {
    if (!r_.params_sharded() || !is_block(u)) return;
    if (!backward_ && !r_.o_.reshard_after_forward) return;
    auto it = gathered_.find(u);
    if (it == gathered_.end()) return;
    if (!backward_ && r_.o_.has(Fault::keep_gathered)) {  // leaked, yet gathered again for backward
      leaked_.push_back(std::move(it->second.buf));
      gathered_.erase(it);
      return;
    }
    // Only the stale_params fault reuses a released buffer; otherwise it is
    // freed here, as the declared comm peak assumes.
    if (r_.o_.has(Fault::stale_params)) last_released_ = std::move(it->second.buf);
    gathered_.erase(it);
  }

  T* grads(int u) override {
    backward_ = true;
    const auto& l = r_.layout_;
    if (r_.o_.shard == Shard::none) return r_.grads_.data() + l.unit_begin(u);
    if (r_.o_.shard == Shard::zero1) return r_.grads_.data() + r_.sl_->unit(u).full_off;
    auto& b = unit_grads_[u];
    if (b.empty()) b = Buffer<T>(&r_.mem_, MemTag::comm, size_t(r_.sl_->unit(u).padded));
    return b.data();
  }

  void grads_ready(int u) override {
    if (r_.o_.shard == Shard::none) return bucket_ready(u);
    if (r_.o_.shard == Shard::zero1) return;  // reduced once, after the last microbatch
    auto it = unit_grads_.find(u);
    r_.reduce_unit(u, it->second.data(), k_ == 0);
    unit_grads_.erase(it);
    if (u == 0) end_microbatch();
  }

  // DDP: waits for (or, without overlap, issues) every bucket's all-reduce.
  void finish_ddp() {
    for (auto& b : buckets_)
      if (b.deferred) {
        r_.dp_->all_reduce(r_.grads_.data() + b.lo, r_.grads_.data() + b.lo, size_t(b.hi - b.lo), dt_);
        b.deferred = false;
      }
    wait_all(requests_);
    requests_.clear();
  }

 private:
  struct Gathered {
    Buffer<T> buf, staging;
    Request req;
    bool pending = false;
  };
  struct Bucket {
    int64_t lo = 0, hi = 0;
    int units = 0, pending = 0;
    bool deferred = false;
  };

  bool is_block(int u) const { return u >= 1 && u <= r_.layout_.model().L; }

  void build_buckets() {
    if (r_.o_.shard != Shard::none) return;
    const auto& l = r_.layout_;
    // Units in backward order (L+1, L, ..., 0) are contiguous descending
    // ranges; a bucket closes once it holds bucket_bytes (PyTorch's rule).
    Bucket cur;
    for (int u = l.num_units() - 1; u >= 0; --u) {
      if (cur.units == 0) cur.hi = l.unit_end(u);
      cur.lo = l.unit_begin(u);
      cur.units++;
      unit_bucket_.insert(unit_bucket_.begin(), int(buckets_.size()));
      if (int64_t(cur.hi - cur.lo) * int64_t(sizeof(T)) >= r_.o_.bucket_bytes || u == 0) {
        buckets_.push_back(cur);
        cur = Bucket{};
      }
    }
  }

  void bucket_ready(int u) {
    if (!sync_ || r_.dp_->size() == 1) return;  // no_sync: accumulate locally
    Bucket& b = buckets_[size_t(unit_bucket_[size_t(u)])];
    if (--b.pending > 0) return;
    if (r_.o_.has(Fault::skip_bucket) && &b == &buckets_.front()) return;
    T* p = r_.grads_.data() + b.lo;
    if (r_.o_.overlap) requests_.push_back(r_.dp_->iall_reduce(p, p, size_t(b.hi - b.lo), dt_));
    else b.deferred = true;
  }

  void start_gather(int u) {
    if (gathered_.count(u)) return;
    Gathered& g = gathered_[u];
    const UnitShard& s = r_.sl_->unit(u);
    g.buf = Buffer<T>(&r_.mem_, MemTag::comm, size_t(s.padded));
    if (r_.o_.shard == Shard::hzero && backward_ && is_block(u)) {  // hpZ: secondary, intra-node
      const int64_t chunk = s.padded / r_.rpn_;
      if (r_.intra_->size() == 1) {  // one rank per node: the secondary is the unit
        copy_n(g.buf.data(), r_.secondary_.data() + s.full_off, chunk);
        return;
      }
      g.req = r_.intra_->iall_gather(r_.secondary_.data() + s.full_off / r_.rpn_, g.buf.data(),
                                     size_t(chunk), dt_);
    } else if (r_.o_.shard == Shard::hzero) {  // forward: over dp, slices arrive in rank order
      g.staging = Buffer<T>(&r_.mem_, MemTag::comm, size_t(s.padded));
      g.req = r_.dp_->iall_gather(r_.params_.data() + s.shard_off, g.staging.data(),
                                  size_t(s.slice), dt_);
    } else if (r_.shard_comm().size() == 1) {
      copy_n(g.buf.data(), r_.params_.data() + s.shard_off, s.slice);
      return;
    } else {
      g.req = r_.shard_comm().iall_gather(r_.params_.data() + s.shard_off, g.buf.data(),
                                          size_t(s.slice), dt_);
    }
    g.pending = true;
  }

  const T* acquire(int u) {
    start_gather(u);
    Gathered& g = gathered_[u];
    if (g.pending) {
      g.req.wait();
      g.pending = false;
      if (!g.staging.empty()) finish_hzero_gather(u, g);
    }
    return g.buf.data();
  }

  // hZeRO: rank j owns slice sigma(j) = local(j) * nodes + node(j) (the slice
  // the two-level reduce-scatter leaves it); put each slice in place, then keep
  // this rank's node-local chunk as the secondary copy for backward.
  void finish_hzero_gather(int u, Gathered& g) {
    const UnitShard& s = r_.sl_->unit(u);
    for (int j = 0; j < r_.o_.dp; ++j) {
      int sigma = (j % r_.rpn_) * r_.nodes_ + j / r_.rpn_;
      copy_n(g.buf.data() + sigma * s.slice, g.staging.data() + j * s.slice, s.slice);
    }
    g.staging.reset();
    const int64_t chunk = s.padded / r_.rpn_;
    const int local = r_.dp_->rank() % r_.rpn_;
    copy_n(r_.secondary_.data() + s.full_off / r_.rpn_, g.buf.data() + local * chunk, chunk);
  }

  void end_microbatch() {
    gathered_.clear();  // the root units (embedding, final LN) are resharded now
    last_released_.reset();
    leaked_.clear();
  }

  DpRank& r_;
  DType dt_;
  int k_ = 0;
  bool sync_ = true, backward_ = false, forward_done_ = false;
  std::vector<Bucket> buckets_;
  std::vector<int> unit_bucket_;
  std::vector<Request> requests_;
  std::map<int, Gathered> gathered_;
  std::map<int, Buffer<T>> unit_grads_;
  Buffer<T> last_released_;
  std::vector<Buffer<T>> leaked_;  // Fault::keep_gathered
};

// ---- construction -------------------------------------------------------------
template <class T>
DpRank<T>::DpRank(const TrainConfig& cfg, const DpOptions& o, Communicator& world)
    : cfg_(cfg), o_(o), world_(world), layout_(cfg.model),
      data_(cfg.model.V, cfg.data.seed, cfg.data.branching, cfg.data.mix) {
  validate(o_, cfg);
  require(world.size() == o.dp, "strategy.dp: must equal the world size (" +
                                    std::to_string(world.size()) + "), got " + std::to_string(o.dp));
  const int per_rank = cfg.batch / o.dp;
  kernels::set_blas_threads(cfg.threads);
  const int r = world.rank();
  dp_ = world.split(0, r, "dp");
  scalar_ = world.split(0, r, "dp_scalar");
  check_ = world.split(0, r, "check");
  rpn_ = o.ranks_per_node ? o.ranks_per_node : o.dp;
  nodes_ = o.dp / rpn_;
  int slice = r;
  g_ = shard_group(o);
  if (o.shard == Shard::hsdp) {
    shard_ = world.split(r / g_, r, "dp_shard");
    replica_ = world.split(r % g_, r, "dp_replica");
    scalar_shard_ = world.split(r / g_, r, "dp_scalar");
    slice = r % g_;
  } else if (o.shard == Shard::hzero) {
    intra_ = world.split(r / rpn_, r, "dp_intra");
    inter_ = world.split(r % rpn_, r, "dp_inter");
    slice = (r % rpn_) * nodes_ + r / rpn_;
  }
  sl_ = std::make_unique<ShardLayout>(layout_, g_, slice);

  const int64_t psi = layout_.total();
  if (o.shard == Shard::none) {
    params_ = Buffer<T>(&mem_, MemTag::params, size_t(psi));
    init_params<T>(layout_, cfg.seed, 0, psi, params_.data());
    grads_ = Buffer<T>(&mem_, MemTag::grads, size_t(psi));
  } else {
    const bool full_params = !params_sharded();
    params_ = Buffer<T>(&mem_, MemTag::params, size_t(full_params ? sl_->full_size() : sl_->shard_size()));
    for (int u = 0; u < sl_->num_units(); ++u) {
      const UnitShard& s = sl_->unit(u);
      if (full_params) {
        init_params<T>(layout_, cfg.seed, s.begin, s.begin + s.size, params_.data() + s.full_off);
      } else {
        auto [lo, hi] = sl_->owned(u);
        init_params<T>(layout_, cfg.seed, lo, hi, params_.data() + s.shard_off);
      }
    }
    grads_ = Buffer<T>(&mem_, MemTag::grads,
                       size_t(o.shard == Shard::zero1 ? sl_->full_size() : sl_->shard_size()));
    if (o.shard == Shard::hzero && nodes_ > 1)
      secondary_ = Buffer<T>(&mem_, MemTag::params, size_t(sl_->full_size() / rpn_));
  }
  std::vector<Segment> segs =
      o.shard == Shard::none ? std::vector<Segment>{{0, psi, 0, 0, 0}}
                             : sl_->segments(!params_sharded(), o.shard == Shard::zero1);
  const int64_t state_n = o.shard == Shard::none ? psi : sl_->shard_size();
  opt_ = std::make_unique<AdamW<T>>(layout_, cfg.seed, std::move(segs), state_n, &mem_,
                                    o.offload == Offload::optimizer ? Place::host : Place::device);
  if (o.has(Fault::no_copy_back)) dummy_params_ = Buffer<T>(&mem_, MemTag::workspace, params_.size());
  runner_ = std::make_unique<MicrobatchRunner<T>>(layout_, data_, &mem_,
                                                  per_rank / cfg.microbatches, cfg.seq);
  hooks_ = std::make_unique<Hooks>(*this);
}

template <class T>
DpRank<T>::~DpRank() = default;

template <class T>
Communicator& DpRank<T>::shard_comm() {
  return o_.shard == Shard::hsdp ? *shard_ : *dp_;
}

// ---- the step ------------------------------------------------------------------
template <class T>
StepStats DpRank<T>::step() {
  auto t0 = std::chrono::steady_clock::now();
  const int micro = cfg_.microbatches, Bm = runner_->Bm();
  const int per_rank = Bm * micro;
  const double tokens = o_.has(Fault::grad_not_averaged) ? double(per_rank) * cfg_.seq
                                                          : double(cfg_.tokens_per_step());
  std::memset(static_cast<void*>(grads_.data()), 0, grads_.size() * sizeof(T));
  double loss = 0;
  for (int k = 0; k < micro; ++k) {
    hooks_->start_microbatch(k, micro);
    loss += runner_->run(step_, int64_t(dp_->rank()) * per_rank + int64_t(k) * Bm, 1.0 / tokens,
                         *hooks_);
    if (k == 0 && o_.has(Fault::sync_wrong_microbatch)) hooks_->finish_ddp();
  }
  finish_step();
  if (scalar_->size() > 1) scalar_->all_reduce(&loss, &loss, 1, DType::f64);

  double sq = 0;
  if (o_.shard == Shard::none) {
    sq = kernels::sum_squares(grads_.data(), grads_.size());
  } else {
    for (const auto& s : sl_->segments(!params_sharded(), o_.shard == Shard::zero1))
      sq += kernels::sum_squares(grads_.data() + s.grad_off, size_t(s.flat_hi - s.flat_lo));
    Communicator& c = o_.shard == Shard::hsdp ? *scalar_shard_ : *scalar_;
    if (c.size() > 1) c.all_reduce(&sq, &sq, 1, DType::f64);
  }
  StepStats st;
  st.step = ++step_;
  st.loss = loss / double(cfg_.tokens_per_step());
  st.grad_norm = std::sqrt(sq);
  st.lr = lr_at(cfg_.optim, st.step, cfg_.steps);
  T* target = dummy_params_.empty() ? params_.data() : dummy_params_.data();
  opt_->step(target, grads_.data(), cfg_.optim, st.step, st.lr,
             clip_factor(st.grad_norm, cfg_.optim.clip));
  gather_params_after_step();
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return st;
}

template <class T>
void DpRank<T>::finish_step() {
  const DType dt = dtype_of<T>();
  if (o_.shard == Shard::none) return hooks_->finish_ddp();
  if (o_.shard == Shard::zero1)
    for (int u = 0; u < sl_->num_units(); ++u)
      reduce_unit(u, grads_.data() + sl_->unit(u).full_off, true);
  if (o_.shard == Shard::hsdp && replica_->size() > 1 && !o_.has(Fault::skip_replica_reduce))
    replica_->all_reduce(grads_.data(), grads_.data(), grads_.size(), dt);
}

// Reduce-scatters one unit's full gradient into this rank's slot: the shard
// buffer (ZeRO-2/3, HSDP, hZeRO), or the slice's place in the full buffer
// (ZeRO-1). Later microbatches accumulate onto the first.
template <class T>
void DpRank<T>::reduce_unit(int u, T* full, bool first_micro) {
  const DType dt = dtype_of<T>();
  const UnitShard& s = sl_->unit(u);
  T* slot = o_.shard == Shard::zero1 ? grads_.data() + s.full_off + s.slice * sl_->slice_index()
                                     : grads_.data() + s.shard_off;
  if (o_.has(Fault::wrong_shard_offset) && u == 1) slot += 1;
  Buffer<T> tmp(&mem_, MemTag::comm, size_t(s.slice));
  if (o_.has(Fault::skip_grad_reduce) && u == 1) {
    copy_n(tmp.data(), full + s.slice * sl_->slice_index(), s.slice);
  } else if (o_.shard == Shard::hzero && nodes_ > 1) {
    const int64_t chunk = s.padded / rpn_;
    Buffer<T> mid(&mem_, MemTag::comm, size_t(chunk));
    if (intra_->size() == 1) copy_n(mid.data(), full, chunk);
    else intra_->reduce_scatter(full, mid.data(), size_t(chunk), dt);
    if (o_.has(Fault::skip_replica_reduce))
      copy_n(tmp.data(), mid.data() + s.slice * (dp_->rank() / rpn_), s.slice);
    else
      inter_->reduce_scatter(mid.data(), tmp.data(), size_t(s.slice), dt);
  } else if (shard_comm().size() == 1) {
    copy_n(tmp.data(), full, s.slice);
  } else {
    shard_comm().reduce_scatter(full, tmp.data(), size_t(s.slice), dt);
  }
  if (first_micro) copy_n(slot, tmp.data(), s.slice);
  else kernels::accumulate(slot, tmp.data(), size_t(s.slice));
}

// ZeRO-1/2 hold full parameters: every unit is all-gathered from the updated slices.
template <class T>
void DpRank<T>::gather_params_after_step() {
  if (o_.shard != Shard::zero1 && o_.shard != Shard::zero2) return;
  if (o_.has(Fault::stale_params) || dp_->size() == 1) return;
  for (int u = 0; u < sl_->num_units(); ++u) {
    const UnitShard& s = sl_->unit(u);
    Buffer<T> mine(&mem_, MemTag::comm, size_t(s.slice));
    copy_n(mine.data(), params_.data() + s.full_off + s.slice * sl_->slice_index(), s.slice);
    dp_->all_gather(mine.data(), params_.data() + s.full_off, size_t(s.slice), dtype_of<T>());
  }
}

// ---- full vectors for the checks --------------------------------------------------
template <class T>
std::vector<double> DpRank<T>::gather_full(const T* buf, bool full_layout) {
  const int64_t psi = layout_.total();
  std::vector<double> out(static_cast<size_t>(psi));
  if (o_.shard == Shard::none) {
    for (int64_t i = 0; i < psi; ++i) out[size_t(i)] = static_cast<double>(buf[i]);
    return out;
  }
  // Every rank of the run contributes its slice; for HSDP every replica holds
  // the same shard, so gathering over all dp ranks and reading replica 0 works.
  const int n = check_->size();
  for (int u = 0; u < sl_->num_units(); ++u) {
    const UnitShard& s = sl_->unit(u);
    const T* mine = buf + (full_layout ? s.full_off + s.slice * sl_->slice_index() : s.shard_off);
    std::vector<T> all(size_t(s.slice) * n);
    check_->all_gather(mine, all.data(), size_t(s.slice), dtype_of<T>());
    for (int j = 0; j < n; ++j) {
      int idx = j;
      if (o_.shard == Shard::hsdp) {
        if (j >= g_) break;
      } else if (o_.shard == Shard::hzero) {
        idx = (j % rpn_) * nodes_ + j / rpn_;
      }
      for (int64_t e = 0; e < s.slice; ++e) {
        int64_t pos = int64_t(idx) * s.slice + e;
        if (pos < s.size) out[size_t(s.begin + pos)] = static_cast<double>(all[size_t(j * s.slice + e)]);
      }
    }
  }
  return out;
}

template <class T>
std::vector<double> DpRank<T>::full_params() {
  return gather_full(params_.data(), !params_sharded());
}

template <class T>
std::vector<double> DpRank<T>::full_grads() {
  return gather_full(grads_.data(), o_.shard == Shard::zero1);
}

template class DpRank<double>;
template class DpRank<float>;
template class DpRank<bf16>;

}  // namespace pb::dp
