#include "impl/data_parallel/component.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "harness/status.h"
#include "impl/spec/groups.h"
#include "reference/init.h"

namespace pb::dp {

namespace {
// The shard group the ranks actually build: the one asked for, or under
// Fault::hsdp_runs_flat all of dp (the declarations and the replay keep F).
int running_shard_group(const DpOptions& o) { return o.has(Fault::hsdp_runs_flat) ? o.dp : shard_group(o); }
}  // namespace

DpComms make_dp_comms(Communicator& world, const MeshShape& mesh, const DpOptions& o, MeshAxis axis,
                      const std::string& prefix) {
  DpComms c;
  const auto dp_groups = mesh_groups(mesh, axis);
  c.dp = world.split_groups(dp_groups, prefix + group_name(Group::dp));
  if (o.shard == Shard::hsdp) {
    const TwoLevelGroups hs = split_consecutive(dp_groups, running_shard_group(o), "strategy.shard_group");
    c.shard = world.split_groups(hs.intra, prefix + group_name(Group::dp_shard));
    c.replica = world.split_groups(hs.inter, prefix + group_name(Group::dp_replica));
  } else if (o.shard == Shard::hzero) {
    const TwoLevelGroups nodes = split_by_node(dp_groups, mesh.ranks_per_node);
    c.intra = world.split_groups(nodes.intra, prefix + group_name(Group::dp_intra));
    c.inter = world.split_groups(nodes.inter, prefix + group_name(Group::dp_inter));
  }
  return c;
}

int owned_slice(const DpOptions& o, int dp_rank) {
  if (o.shard == Shard::hsdp) return dp_rank % running_shard_group(o);
  if (o.shard == Shard::hzero) {
    const int rpn = o.ranks_per_node, nodes = o.dp / rpn;
    return (dp_rank % rpn) * nodes + dp_rank / rpn;
  }
  return o.shard == Shard::none ? 0 : dp_rank;
}

template <class T>
Component<T>::Component(const DpOptions& o, std::vector<UnitSpan> units, const ParamLayout& layout,
                        uint64_t seed, DpComms& comms, MemoryTracker& mem, const kernels::DeviceOps<T>& ops)
    : o_(o), c_(comms), mem_(mem), ops_(&ops) {
  g_ = running_shard_group(o);
  rpn_ = o.ranks_per_node ? o.ranks_per_node : o.dp;
  nodes_ = o.dp / rpn_;
  sl_ = std::make_unique<ShardLayout>(units, g_, owned_slice(o, c_.dp->rank()));
  const bool full_params = !params_sharded();
  params_ = Buffer<T>(&mem_, MemTag::params, size_t(full_params ? sl_->full_size() : sl_->shard_size()));
  for (int u = 0; u < sl_->num_units(); ++u) {
    const UnitShard& s = sl_->unit(u);
    auto [lo, hi] = full_params ? std::pair{s.begin, s.begin + s.size} : sl_->owned(u);
    init_params(ops, layout, seed, lo, hi, params_.data() + (full_params ? s.full_off : s.shard_off));
  }
  grads_ = Buffer<T>(&mem_, MemTag::grads, size_t(grads_full() ? sl_->full_size() : sl_->shard_size()));
  if (o.shard == Shard::hzero && nodes_ > 1)
    secondary_ = Buffer<T>(&mem_, MemTag::params, size_t(sl_->full_size() / rpn_));
  std::vector<Segment> segs = sl_->segments(full_params, grads_full());
  if (o.offload == Offload::optimizer && !ops.is_host()) {
    // ZeRO-Offload on a device: the optimizer steps host copies of the owned
    // gradients and parameters, laid out like its state (segment i at
    // state_off), on the CPU; the parameters start as the device's.
    offload_segs_ = segs;
    for (Segment& g : segs) g.param_off = g.grad_off = g.state_off;
    host_params_ = Buffer<T>(&mem_, MemTag::optimizer, size_t(sl_->shard_size()), Place::host);
    host_grads_ = Buffer<T>(&mem_, MemTag::optimizer, size_t(sl_->shard_size()), Place::host);
    for (const Segment& g : offload_segs_)
      ops.to_host(host_params_.data() + g.state_off, params_.data() + g.param_off, bytes_of(g));
    opt_ = std::make_unique<AdamW<T>>(layout, seed, std::move(segs), sl_->shard_size(), &mem_, Place::host, false,
                                      kernels::cpu_ops<T>());
    return;
  }
  opt_ = std::make_unique<AdamW<T>>(layout, seed, std::move(segs), sl_->shard_size(), &mem_,
                                    o.offload == Offload::optimizer ? Place::host : Place::device, false, ops);
  if (o.has(Fault::no_copy_back)) dummy_params_ = Buffer<T>(&mem_, MemTag::workspace, params_.size());
}

template <class T>
Component<T>::~Component() = default;

template <class T>
T* Component<T>::unit_params(int u) {
  require(!params_sharded(), "dp: unit_params on a sharded-parameter family");
  return params_.data() + sl_->unit(u).full_off;
}

template <class T>
T* Component<T>::unit_grads(int u) {
  require(grads_full(), "dp: unit_grads on a sharded-gradient family");
  return grads_.data() + sl_->unit(u).full_off;
}

template <class T>
typename Component<T>::Gathered Component<T>::start_gather(int u, bool from_secondary) {
  const DType dt = dtype_of<T>();
  Gathered g;
  const UnitShard& s = sl_->unit(u);
  g.buf = Buffer<T>(&mem_, MemTag::comm, size_t(s.padded));
  if (o_.shard == Shard::hzero && from_secondary) {  // hpZ: the secondary, intra-node
    const int64_t chunk = s.padded / rpn_;
    if (c_.intra->size() == 1) {  // one rank per node: the secondary is the unit
      copy_n(g.buf.data(), secondary_.data() + s.full_off, chunk);
      return g;
    }
    g.req = c_.intra->iall_gather(secondary_.data() + s.full_off / rpn_, g.buf.data(), size_t(chunk), dt);
  } else if (o_.shard == Shard::hzero) {  // forward: over dp, slices arrive in dp-rank order
    g.staging = Buffer<T>(&mem_, MemTag::comm, size_t(s.padded));
    g.req = c_.dp->iall_gather(params_.data() + s.shard_off, g.staging.data(), size_t(s.slice), dt);
  } else if (shard_comm().size() == 1) {
    copy_n(g.buf.data(), params_.data() + s.shard_off, s.slice);
    return g;
  } else {
    g.req = shard_comm().iall_gather(params_.data() + s.shard_off, g.buf.data(), size_t(s.slice), dt);
  }
  g.pending = true;
  return g;
}

// hZeRO: dp rank j owns slice owned_slice(j); put each slice in place, then
// keep this rank's node-local chunk as the secondary copy for backward.
template <class T>
const T* Component<T>::wait_gather(int u, Gathered& g) {
  if (!g.pending) return g.buf.data();
  g.req.wait();
  g.pending = false;
  if (g.staging.empty()) return g.buf.data();
  const UnitShard& s = sl_->unit(u);
  for (int j = 0; j < o_.dp; ++j)
    copy_n(g.buf.data() + owned_slice(o_, j) * s.slice, g.staging.data() + j * s.slice, s.slice);
  g.staging.reset();
  const int64_t chunk = s.padded / rpn_;
  const int local = c_.dp->rank() % rpn_;
  copy_n(secondary_.data() + s.full_off / rpn_, g.buf.data() + local * chunk, chunk);
  return g.buf.data();
}

template <class T>
void Component<T>::reduce_unit(int u, T* full, bool first_micro) {
  const DType dt = dtype_of<T>();
  const UnitShard& s = sl_->unit(u);
  const int fault_unit = sl_->num_units() > 1 ? 1 : 0;
  T* slot = o_.shard == Shard::zero1 ? grads_.data() + s.full_off + s.slice * sl_->slice_index()
                                     : grads_.data() + s.shard_off;
  if (o_.has(Fault::wrong_shard_offset) && u == fault_unit) slot += 1;
  Buffer<T> tmp(&mem_, MemTag::comm, size_t(s.slice));
  if (o_.has(Fault::skip_grad_reduce) && u == fault_unit) {
    copy_n(tmp.data(), full + s.slice * sl_->slice_index(), s.slice);
  } else if (o_.shard == Shard::hzero && nodes_ > 1) {
    const int64_t chunk = s.padded / rpn_;
    Buffer<T> mid(&mem_, MemTag::comm, size_t(chunk));
    if (c_.intra->size() == 1) copy_n(mid.data(), full, chunk);
    else c_.intra->reduce_scatter(full, mid.data(), size_t(chunk), dt);
    if (o_.has(Fault::skip_replica_reduce))
      copy_n(tmp.data(), mid.data() + s.slice * (c_.dp->rank() / rpn_), s.slice);
    else
      c_.inter->reduce_scatter(mid.data(), tmp.data(), size_t(s.slice), dt);
  } else if (shard_comm().size() == 1) {
    copy_n(tmp.data(), full, s.slice);
  } else {
    shard_comm().reduce_scatter(full, tmp.data(), size_t(s.slice), dt);
  }
  if (first_micro) copy_n(slot, tmp.data(), s.slice);
  else ops_->accumulate(slot, tmp.data(), size_t(s.slice));
}

template <class T>
void Component<T>::finish_reduction() {
  if (o_.shard == Shard::zero1)
    for (int u = 0; u < sl_->num_units(); ++u) reduce_unit(u, grads_.data() + sl_->unit(u).full_off, true);
  if (o_.shard == Shard::hsdp && c_.replica->size() > 1 && !o_.has(Fault::skip_replica_reduce))
    c_.replica->all_reduce(grads_.data(), grads_.data(), grads_.size(), dtype_of<T>());
}

template <class T>
void Component<T>::sync_after_flush() {
  if (o_.shard != Shard::none) return finish_reduction();
  if (c_.dp->size() > 1) c_.dp->all_reduce(grads_.data(), grads_.data(), grads_.size(), dtype_of<T>());
}

template <class T>
void Component<T>::swap_grads(Buffer<T>& other) {
  require(other.size() == grads_.size(), "dp: swap_grads needs a buffer of the gradient's size");
  std::swap(grads_, other);
}

template <class T>
void Component<T>::zero_grads() {
  ops_->zero(grads_.data(), grads_.size() * sizeof(T));
}

template <class T>
double Component<T>::norm_sq(const T* data, int64_t lo, int64_t hi) const {
  if (norm_skip_.empty()) return ops_->sum_squares(data, size_t(hi - lo));
  double sq = 0;
  int64_t at = lo;
  for (const auto& [a, b] : norm_skip_) {
    if (b <= at) continue;
    if (a >= hi) break;
    if (a > at) sq += ops_->sum_squares(data + (at - lo), size_t(a - at));
    at = std::max(at, b);
  }
  if (at < hi) sq += ops_->sum_squares(data + (at - lo), size_t(hi - at));
  return sq;
}

template <class T>
void Component<T>::for_each_held(bool grads, const std::function<void(int64_t, int64_t, T*)>& f) {
  T* buf = grads ? grads_.data() : params_.data();
  const bool full = grads ? grads_full() : !params_sharded();
  for (int u = 0; u < sl_->num_units(); ++u) {
    const UnitShard& s = sl_->unit(u);
    if (o_.shard == Shard::none || (full && !grads)) {  // the whole unit
      if (s.size) f(s.begin, s.begin + s.size, buf + s.full_off);
      continue;
    }
    auto [lo, hi] = sl_->owned(u);
    if (lo >= hi) continue;
    f(lo, hi, buf + (full ? s.full_off + s.slice * sl_->slice_index() : s.shard_off));
  }
}

template <class T>
void Component<T>::all_reduce_held_grads(const std::vector<std::pair<int64_t, int64_t>>& ranges, Communicator& group) {
  for_each_held(true, [&](int64_t lo, int64_t hi, T* data) {
    for (const auto& [a, b] : ranges) {
      const int64_t x = std::max(lo, a), y = std::min(hi, b);
      if (x < y) group.all_reduce(data + (x - lo), data + (x - lo), size_t(y - x), dtype_of<T>());
    }
  });
}

template <class T>
int64_t Component<T>::held_grads_in(const std::vector<std::pair<int64_t, int64_t>>& ranges) {
  int64_t n = 0;
  for_each_held(true, [&](int64_t lo, int64_t hi, T*) {
    for (const auto& [a, b] : ranges) n += std::max<int64_t>(0, std::min(hi, b) - std::max(lo, a));
  });
  return n;
}

template <class T>
double Component<T>::local_sq() const {
  double sq = 0;
  if (o_.shard == Shard::none) {  // full grads everywhere, unpadded: one pass in flat order
    for (int u = 0; u < sl_->num_units(); ++u)
      require(sl_->unit(u).in_norm, "dp: DDP's local_sq covers whole-model components only");
    if (norm_skip_.empty()) return norm_sq(grads_.data(), 0, int64_t(grads_.size()));
    // Ranges left out are flat: unit by unit at each unit's flat offset (the
    // expert component's units, or a dense one with its experts cut out, do
    // not start at flat 0 back to back).
    for (int u = 0; u < sl_->num_units(); ++u) {
      const UnitShard& s = sl_->unit(u);
      sq += norm_sq(grads_.data() + s.full_off, s.begin, s.begin + s.size);
    }
    return sq;
  }
  if (o_.shard == Shard::hsdp && c_.dp->rank() >= g_ && !o_.has(Fault::norm_over_replicas))
    return 0;  // replicas hold copies
  for (int u = 0; u < sl_->num_units(); ++u) {  // owned ranges in unit order (the replay's norm parts)
    const UnitShard& s = sl_->unit(u);
    auto [lo, hi] = sl_->owned(u);
    if (!s.in_norm || lo >= hi) continue;
    const int64_t off = grads_full() ? s.full_off + s.slice * sl_->slice_index() : s.shard_off;
    sq += norm_sq(grads_.data() + off, lo, hi);
  }
  return sq;
}

template <class T>
void Component<T>::step(const OptimConfig& oc, long t, double lr, double grad_scale) {
  if (!offload_segs_.empty()) {  // on a device: gradients down, the CPU's step, parameters up
    for (const Segment& g : offload_segs_)
      ops_->to_host(host_grads_.data() + g.state_off, grads_.data() + g.grad_off, bytes_of(g));
    opt_->step(host_params_.data(), host_grads_.data(), oc, t, lr, grad_scale);
    if (!o_.has(Fault::no_copy_back))
      for (const Segment& g : offload_segs_)
        ops_->to_device(params_.data() + g.param_off, host_params_.data() + g.state_off, bytes_of(g));
  } else {
    T* target = dummy_params_.empty() ? params_.data() : dummy_params_.data();
    opt_->step(target, grads_.data(), oc, t, lr, grad_scale);
  }
  // ZeRO-1/2 hold full parameters: every unit is all-gathered from the updated slices.
  if (o_.shard != Shard::zero1 && o_.shard != Shard::zero2) return;
  if (o_.has(Fault::stale_params) || c_.dp->size() == 1) return;
  for (int u = 0; u < sl_->num_units(); ++u) {
    const UnitShard& s = sl_->unit(u);
    Buffer<T> mine(&mem_, MemTag::comm, size_t(s.slice));
    copy_n(mine.data(), params_.data() + s.full_off + s.slice * sl_->slice_index(), s.slice);
    c_.dp->all_gather(mine.data(), params_.data() + s.full_off, size_t(s.slice), dtype_of<T>());
  }
}

template <class T>
void Component<T>::contribute(bool grads, std::vector<double>& full) const {
  const int r = c_.dp->rank();
  if (o_.shard == Shard::none ? r != 0 : (o_.shard == Shard::hsdp && r >= g_)) return;
  const Buffer<T>& held = grads ? grads_ : params_;
  std::vector<T> host;  // off the host: read back once
  if (!ops_->is_host()) {
    host.resize(held.size());
    ops_->to_host(host.data(), held.data(), host.size() * sizeof(T));
  }
  const T* buf = host.empty() ? held.data() : host.data();
  const bool full_layout = grads ? grads_full() : !params_sharded();
  for (int u = 0; u < sl_->num_units(); ++u) {
    const UnitShard& s = sl_->unit(u);
    if (!s.in_norm) continue;
    auto [lo, hi] = o_.shard == Shard::none ? std::pair{s.begin, s.begin + s.size} : sl_->owned(u);
    const int64_t off = o_.shard == Shard::none ? s.full_off
                        : full_layout ? s.full_off + s.slice * sl_->slice_index() : s.shard_off;
    for (int64_t i = lo; i < hi; ++i) full[size_t(i)] = static_cast<double>(buf[off + i - lo]);
  }
}

template <class T>
std::vector<double> Component<T>::gather_full(bool grads, Communicator& check, int64_t total) const {
  std::vector<double> full(size_t(total), 0.0);
  contribute(grads, full);
  check.all_reduce(full.data(), full.data(), full.size(), DType::f64);
  return full;
}

namespace {
// A device's n values of X at p, read through the seam into `stage` (the
// host's: p itself).
template <class X, class T>
const X* host_view(const kernels::DeviceOps<T>& ops, bool device, const X* p, int64_t n, std::vector<X>& stage) {
  if (!device) return p;
  stage.resize(size_t(n));
  ops.to_host(stage.data(), p, size_t(n) * sizeof(X));
  return stage.data();
}
}  // namespace

template <class T>
void Component<T>::save_state(RankCheckpointOut& out) const {
  const int r = c_.dp->rank();
  if (o_.shard == Shard::none ? r != 0 : (o_.shard == Shard::hsdp && r >= g_)) return;  // contribute's rule
  AdamW<T>& opt = *opt_;
  const master_t<T>* master = opt.master_data();
  // On a device the parameters, and unless offloaded the optimizer's state,
  // are read through the seam (kernels/common/device_ops.h). Offloaded, the
  // optimizer's segments index its host copies of the parameters, which the
  // step leaves equal to the device's.
  const bool offloaded = !offload_segs_.empty();
  const bool dev = !ops_->is_host() && !offloaded;
  const T* params = offloaded ? host_params_.data() : params_.data();
  std::vector<T> sp;
  std::vector<master_t<T>> sm, sv, sw;
  for (const Segment& g : opt.segments()) {
    bool in_norm = true;  // a unit outside the norm is a copy (a pipeline's tied wte): its owner writes it
    for (int u = 0; u < sl_->num_units(); ++u)
      if (sl_->unit(u).begin <= g.flat_lo && g.flat_lo < sl_->unit(u).begin + sl_->unit(u).size)
        in_norm = sl_->unit(u).in_norm;
    if (!in_norm) continue;
    // The ranges left out of the norm are copies too (a tensor-parallel
    // rank other than 0's replicated tensors): tp rank 0 writes them.
    int64_t lo = g.flat_lo;
    auto put = [&](int64_t a, int64_t b) {
      if (a >= b) return;
      const int64_t d = a - g.flat_lo, n = b - a;
      out.put("param", a, b, host_view(*ops_, dev, params + g.param_off + d, n, sp));
      if (master) out.put("master", a, b, host_view(*ops_, dev, master + g.state_off + d, n, sw));
      out.put("adam_m", a, b, host_view(*ops_, dev, opt.m_data() + g.state_off + d, n, sm));
      out.put("adam_v", a, b, host_view(*ops_, dev, opt.v_data() + g.state_off + d, n, sv));
    };
    for (const auto& [a, b] : norm_skip_) {
      if (b <= lo || a >= g.flat_hi) continue;
      put(lo, std::min(a, g.flat_hi));
      lo = std::max(lo, b);
    }
    put(lo, g.flat_hi);
  }
}

template <class T>
void Component<T>::load_state(const RankCheckpointIn& in) {
  // Where the state of owned flat lo is read from: lo itself, or under the
  // injected ckpt_uneven_offset the offset an even split of the unit's real
  // elements would give (the same where the unit splits evenly).
  auto source = [&](int64_t lo) {
    if (!in.has(CkptFault::uneven_offset)) return lo;
    for (int u = 0; u < sl_->num_units(); ++u) {
      const UnitShard& s = sl_->unit(u);
      if (lo < s.begin || lo >= s.begin + s.size || s.size % g_ == 0) continue;
      const int64_t idx = (lo - s.begin) / s.slice;
      return s.begin + idx * (s.size / g_) + (lo - s.begin - idx * s.slice);
    }
    return lo;
  };
  // Off the host each range is read into host staging and moved through the
  // seam; an offloaded optimizer's state and parameter copies are the host's.
  const bool device = !ops_->is_host(), dev_state = device && offload_segs_.empty();
  auto fill = [&](const char* kind, int64_t from, int64_t n, auto* dst, bool on_device) {
    using X = std::remove_pointer_t<decltype(dst)>;
    if (!on_device) return in.get(kind, from, from + n, dst);
    std::vector<X> stage(static_cast<size_t>(n));
    in.get(kind, from, from + n, stage.data());
    ops_->to_device(dst, stage.data(), size_t(n) * sizeof(X));
  };
  for_each_held(false, [&](int64_t lo, int64_t hi, T* data) {
    fill("param", params_sharded() ? source(lo) : lo, hi - lo, data, device);
  });
  for (const Segment& g : offload_segs_)  // the optimizer's host copies, as the constructor makes them
    ops_->to_host(host_params_.data() + g.state_off, params_.data() + g.param_off, bytes_of(g));
  AdamW<T>& opt = *opt_;
  master_t<T>* master = opt.master_data();
  for (const Segment& g : opt.segments()) {
    const int64_t from = source(g.flat_lo), n = g.flat_hi - g.flat_lo;
    if (master) fill("master", from, n, master + g.state_off, dev_state);
    if (in.has(CkptFault::drop_moments)) continue;  // left as constructed: zeros
    fill("adam_m", from, n, opt.m_data() + g.state_off, dev_state);
    fill("adam_v", from, n, opt.v_data() + g.state_off, dev_state);
  }
}

template class Component<double>;
template class Component<float>;
template class Component<bf16>;

}  // namespace pb::dp
