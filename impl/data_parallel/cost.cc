// Declared data-parallel costs (see cost.h for the formulas and the padding
// rule). Integer arithmetic throughout so declared bytes compare exactly with
// the tracker's counts.
#include "impl/data_parallel/cost.h"

#include <algorithm>
#include <numeric>

#include "harness/status.h"
#include "impl/spec/groups.h"

namespace pb::dp {

BytesPerParam bytes_per_param(Precision p) {
  switch (p) {
    case Precision::fp64: return {8, 8, 16};
    case Precision::fp32: return {4, 4, 8};
    default: return {2, 2, 12};  // ZeRO Sec. 3.1: fp16 params + grads, K = 12
  }
}

int64_t dp_ranks_per_node(const DataAxis& a) {
  if (a.ranks_per_node <= 0 || a.stride >= a.ranks_per_node) return a.ranks_per_node <= 0 ? a.dp : 1;
  return std::min(a.dp, a.ranks_per_node / a.stride);
}

int64_t shard_group_size(const DataAxis& a) {
  switch (a.shard) {
    case Shard::none: return 1;
    case Shard::hsdp: return a.shard_group > 0 ? a.shard_group : dp_ranks_per_node(a);
    default: return a.dp;
  }
}

void validate(const DataAxis& a) {
  require(a.dp >= 1, "dp: must be >= 1 (got " + std::to_string(a.dp) + ")");
  require(a.stride >= 1, "stride: must be >= 1");
  require(a.grad_accum >= 1, "grad_accum: must be >= 1");
  require(a.prefetch >= 0, "prefetch: must be >= 0");
  require(a.ranks_per_node >= 0, "ranks_per_node: must be >= 0 (0 = one node)");
  const int64_t R = a.ranks_per_node;
  if (R > 0)
    require(a.stride < R ? R % a.stride == 0 : a.stride % R == 0,
            "ranks_per_node: must divide, or be a multiple of, the dp stride (tp*cp = " +
                std::to_string(a.stride) + ")");
  const int64_t r = dp_ranks_per_node(a);
  if (a.shard == Shard::hsdp) {
    const int64_t F = shard_group_size(a);
    require(F >= 1 && a.dp % F == 0, "hsdp shard group: F = " + std::to_string(F) +
                                         " must divide dp = " + std::to_string(a.dp));
    require(F % r == 0 || r % F == 0, "hsdp shard group: F = " + std::to_string(F) +
                                          " must divide or be a multiple of the dp ranks per node (" +
                                          std::to_string(r) + ")");
  }
  if (a.shard == Shard::hzero)
    require(a.dp % r == 0, "hzero: dp = " + std::to_string(a.dp) +
                               " must be a multiple of the dp ranks per node (" + std::to_string(r) + ")");
}

int64_t full_elems(int64_t n, int64_t g, Padding p) {
  return p == Padding::padded ? g * ceil_div(n, g) : n;
}

ModelStateBytes model_state_bytes(std::span<const int64_t> units, const DataAxis& a) {
  validate(a);
  const BytesPerParam b = bytes_per_param(a.precision);
  const int64_t g = shard_group_size(a), r = dp_ranks_per_node(a);
  const Padding pd = a.padding;
  int64_t p = 0, gr = 0, opt = 0;  // per-rank elements
  for (int64_t u : units) {
    require(u >= 0, "parameter count: must be >= 0 (got " + std::to_string(u) + ")");
    const int64_t full = a.shard == Shard::none ? u : full_elems(u, g, pd), shard = ceil_div(u, g);
    switch (a.shard) {
      case Shard::none: p += u; gr += u; opt += u; break;
      case Shard::zero1: p += full; gr += full; opt += shard; break;
      case Shard::zero2: p += full; gr += shard; opt += shard; break;
      default: p += shard; gr += shard; opt += shard; break;
    }
    // hpZ secondary copy (ZeRO++ Sec. 3.2): the dp-padded full vector split
    // over the node's r ranks; only when the dp group spans nodes.
    if (a.shard == Shard::hzero && r < a.dp) p += ceil_div(full_elems(u, a.dp, pd), r);
  }
  ModelStateBytes m;
  m.params = p * b.param;
  m.grads = gr * b.grad;
  (a.offload == Offload::optimizer ? m.optimizer_host : m.optimizer) = opt * b.optimizer;
  if (a.offload == Offload::optimizer && a.on_device) m.optimizer_host += opt * (b.param + b.grad);
  return m;
}

ModelStateBytes model_state_bytes(int64_t psi, const DataAxis& a) {
  const int64_t units[] = {psi};
  return model_state_bytes(units, a);
}

UnitBufferBytes zero3_unit_buffer_bytes(int64_t largest_unit, int prefetch, const DataAxis& a) {
  validate(a);
  require(largest_unit >= 0, "unit size: must be >= 0");
  require(prefetch >= 0, "prefetch: must be >= 0");
  const BytesPerParam b = bytes_per_param(a.precision);
  // hzero gathers over dp in forward and over the node (from the dp-padded
  // secondary) in backward: the full buffer is padded to its group, dp.
  const int64_t g = shard_group_size(a);
  const int64_t full = full_elems(largest_unit, g, a.padding);
  return {(1 + int64_t(prefetch)) * full * b.param, full * b.grad};
}

CommBufferReplay::CommBufferReplay(std::span<const int64_t> units, const DataAxis& a, UnitRoles roles,
                                   PeakMeter& m)
    : a_(a), roles_(roles), m_(m), b_(bytes_per_param(a.precision)) {
  validate(a);
  const int n = int(units.size());
  const int64_t g = shard_group_size(a);
  r_ = dp_ranks_per_node(a);
  nodes_ = a.dp / r_;
  for (int u = 0; u < n; ++u) {
    pad_.push_back(full_elems(units[size_t(u)], g, a.padding));
    slice_.push_back(ceil_div(units[size_t(u)], g));
  }
  gathered_.assign(size_t(n), false);
  staged_.assign(size_t(n), false);
  unit_grad_.assign(size_t(n), false);
  params_sharded_ = a.shard == Shard::zero3 || a.shard == Shard::hsdp || a.shard == Shard::hzero;
  grads_per_unit_ = a.shard != Shard::none && a.shard != Shard::zero1;
}

void CommBufferReplay::reduce(int u) {  // Component::reduce_unit
  m_.alloc(slice_[size_t(u)] * b_.grad);
  if (a_.shard == Shard::hzero && nodes_ > 1) {
    m_.alloc(pad_[size_t(u)] / r_ * b_.grad);
    m_.free(pad_[size_t(u)] / r_ * b_.grad);
  }
  m_.free(slice_[size_t(u)] * b_.grad);
}

void CommBufferReplay::start_gather(int u) {
  if (gathered_[size_t(u)]) return;
  gathered_[size_t(u)] = true;
  m_.alloc(pad_[size_t(u)] * b_.param);
  if (a_.shard == Shard::hzero && !(backward_ && roles_.is_block(u))) {
    staged_[size_t(u)] = true;
    m_.alloc(pad_[size_t(u)] * b_.param);
  }
}

void CommBufferReplay::params(int u) {
  if (!params_sharded_) return;
  start_gather(u);
  if (staged_[size_t(u)]) staged_[size_t(u)] = false, m_.free(pad_[size_t(u)] * b_.param);
  if (!backward_ && u == roles_.last_forward) forward_done_ = true;
  if (forward_done_ && !backward_) return;
  for (int j = 1; j <= a_.prefetch; ++j) {
    const int next = backward_ ? u - j : u + j;
    if (backward_ ? next >= roles_.first_block : next <= roles_.last_forward) start_gather(next);
  }
}

void CommBufferReplay::release(int u) {
  if (!params_sharded_ || !roles_.is_block(u) || (!backward_ && !a_.reshard_after_forward) || !gathered_[size_t(u)])
    return;
  gathered_[size_t(u)] = false;
  m_.free(pad_[size_t(u)] * b_.param);
}

void CommBufferReplay::grads(int u) {
  backward_ = true;
  if (!grads_per_unit_ || unit_grad_[size_t(u)]) return;
  unit_grad_[size_t(u)] = true;
  m_.alloc(pad_[size_t(u)] * b_.grad);
}

void CommBufferReplay::grads_ready(int u) {
  if (!grads_per_unit_) return;
  reduce(u);
  unit_grad_[size_t(u)] = false;
  m_.free(pad_[size_t(u)] * b_.grad);
}

void CommBufferReplay::end_microbatch() {
  for (size_t u = 0; u < gathered_.size(); ++u)  // the roots are resharded
    if (gathered_[u]) gathered_[u] = false, m_.free(pad_[u] * b_.param);
  backward_ = forward_done_ = false;
}

void CommBufferReplay::finish() {
  if (a_.shard == Shard::zero1)
    for (size_t u = 0; u < pad_.size(); ++u) reduce(int(u));
}

void CommBufferReplay::after_step() {
  if ((a_.shard == Shard::zero1 || a_.shard == Shard::zero2) && a_.dp > 1)
    for (size_t u = 0; u < pad_.size(); ++u) m_.alloc(slice_[u] * b_.param), m_.free(slice_[u] * b_.param);
}

void replay_step(CommBufferReplay& d, int units, CommBufferReplay* e, const std::function<bool(int)>& is_moe) {
  const int L = units - 2, fin = units - 1;
  d.params(0), d.release(0);
  for (int i = 0, j = 0; i < L; ++i) {
    d.params(1 + i);
    if (e && is_moe(i)) e->params(j), e->release(j), ++j;
    d.release(1 + i);
  }
  d.params(fin), d.params(0);
  d.grads(fin), d.grads(0), d.grads_ready(fin);
  d.release(fin), d.release(0);
  int j = 0;
  for (int i = 0; e && i < L; ++i) j += is_moe(i);
  for (int i = L - 1; i >= 0; --i) {
    d.grads(1 + i), d.params(1 + i);
    if (e && is_moe(i)) {
      --j;
      e->grads(j), e->params(j), e->grads_ready(j), e->release(j);
      if (j == 0) e->end_microbatch();  // the expert hooks' last unit of the microbatch
    }
    d.grads_ready(1 + i), d.release(1 + i);
  }
  d.grads(0), d.grads_ready(0), d.end_microbatch();
  d.finish();
  if (e) e->finish();
  d.after_step();
  if (e) e->after_step();
}

int64_t comm_buffer_peak_bytes(std::span<const int64_t> units, const DataAxis& a) {
  validate(a);
  const int n = int(units.size());
  require(n >= 2, "units: the canonical layout has at least 2 (embeddings, final LayerNorm)");
  if (a.shard == Shard::none) return 0;
  PeakMeter m;
  CommBufferReplay r(units, a, UnitRoles::model(n), m);
  // Every microbatch frees all it allocated, so one replay gives the peak of
  // any number of them (and keeps the planner O(units) at any batch).
  replay_step(r, n, nullptr, {});
  return m.peak();
}

std::vector<UnitUse> unit_uses(std::span<const int64_t> units, const DataAxis& a, UnitRoles roles) {
  std::vector<UnitUse> out;
  for (size_t u = 0; u < units.size(); ++u)
    out.push_back({units[u], 1, roles.is_block(int(u)) && a.reshard_after_forward ? 1 : 0});
  return out;
}

int64_t local_traffic_bytes(std::span<const UnitUse> units, const DataAxis& a) {
  validate(a);
  const BytesPerParam b = bytes_per_param(a.precision);
  const int64_t g = shard_group_size(a), m = a.grad_accum, r = dp_ranks_per_node(a), nodes = a.dp / r;
  std::vector<int64_t> sizes;
  for (const UnitUse& u : units) {
    require(u.size >= 0 && u.fwd_uses >= 0 && u.bwd_uses >= 0, "unit uses: sizes and uses must be >= 0");
    sizes.push_back(u.size);
  }
  int64_t bytes = model_state_bytes(sizes, a).grads;  // zero_grads, once per step
  if (a.shard == Shard::none) return bytes;
  const bool hzero_split = a.shard == Shard::hzero && nodes > 1;
  for (const UnitUse& u : units) {
    const int64_t pad = full_elems(u.size, g, a.padding), slice = ceil_div(u.size, g), chunk = pad / r;
    // Component::reduce_unit: the slice buffer, its fill, then into the held gradient.
    int64_t reduce = slice * b.grad;
    if (hzero_split) reduce += chunk * b.grad + (r == 1 ? 2 * chunk * b.grad : 0);
    else if (g == 1) reduce += 2 * slice * b.grad;
    const int64_t into_first = 2 * slice * b.grad, into_more = 3 * slice * b.grad;
    if (a.shard == Shard::zero1) {
      bytes += reduce + into_first;  // once, after the last microbatch
    } else {  // the unit's full gradient per microbatch, reduced as it completes
      bytes += m * (pad * b.grad + reduce) + into_first + (m - 1) * into_more;
    }
    if (a.shard == Shard::zero1 || a.shard == Shard::zero2) {
      if (a.dp > 1) bytes += slice * b.param;  // the updated slice's buffer for the all-gather
      continue;
    }
    // ZeRO-3 family: a zero-filled buffer per gather.
    int64_t fwd = pad * b.param, bwd = pad * b.param;
    if (a.shard == Shard::hzero) {
      fwd += pad * b.param + 2 * pad * b.param + 2 * chunk * b.param;  // staging, re-order, secondary
      if (r == 1) bwd += 2 * chunk * b.param;                            // the secondary is the unit
    } else if (g == 1) {
      fwd += 2 * slice * b.param, bwd += 2 * slice * b.param;
    }
    bytes += m * (u.fwd_uses * fwd + u.bwd_uses * bwd);
  }
  return bytes;
}

std::string_view coll_name(Coll c) {
  constexpr std::string_view names[] = {"all_reduce", "reduce_scatter", "all_gather"};
  return names[int(c)];
}

double bus_factor(Coll c, int64_t n) {
  if (n <= 1) return 0.0;
  const double f = double(n - 1) / double(n);
  return c == Coll::all_reduce ? 2.0 * f : f;
}

std::vector<CollCost> comm_per_step(std::span<const int64_t> units, const DataAxis& a) {
  const int n = int(units.size());
  return comm_per_step(units, a, n > 2 ? UnitRoles::model(n) : UnitRoles::all_blocks(n));
}

std::vector<CollCost> comm_per_step(std::span<const int64_t> units, const DataAxis& a, UnitRoles roles,
                                    const std::string& prefix) {
  validate(a);
  const BytesPerParam b = bytes_per_param(a.precision);
  const int64_t m = a.grad_accum, r = dp_ranks_per_node(a), dp = a.dp;
  const int64_t nu = int64_t(units.size());
  int64_t psi = 0;
  for (int64_t u : units) {
    require(u >= 0, "parameter count: must be >= 0 (got " + std::to_string(u) + ")");
    psi += u;
  }
  // Sum over units of the full (padded to g) buffer.
  auto full = [&](int64_t g) {
    int64_t s = 0;
    for (int64_t u : units) s += full_elems(u, g, a.padding);
    return s;
  };
  // Units gathered again in backward (see DataAxis::reshard_after_forward).
  int64_t nb = 0;
  for (int64_t i = 0; i < nu; ++i) nb += roles.is_block(int(i)) && a.reshard_after_forward;
  auto blocks = [&](int64_t g) {
    int64_t s = 0;
    for (int64_t i = 0; i < nu; ++i)
      if (roles.is_block(int(i))) s += full_elems(units[size_t(i)], g, a.padding);
    return a.reshard_after_forward ? s : 0;
  };
  std::vector<CollCost> out;
  auto add = [&](Group group, const char* phase, Coll op, int64_t n, int64_t calls, int64_t bytes, bool inter) {
    if (n > 1 && calls > 0) out.push_back({prefix + group_name(group), phase, op, n, calls, bytes, inter});
  };
  const bool dp_inter = dp > r;
  switch (a.shard) {
    case Shard::none:
      add(Group::dp, "bwd", Coll::all_reduce, dp, 1, psi * b.grad, dp_inter);
      break;
    case Shard::zero1:
    case Shard::zero2: {
      const int64_t rs_calls = a.shard == Shard::zero1 ? 1 : m;
      add(Group::dp, "bwd", Coll::reduce_scatter, dp, rs_calls * nu, rs_calls * full(dp) * b.grad, dp_inter);
      add(Group::dp, "step", Coll::all_gather, dp, nu, full(dp) * b.param, dp_inter);
      break;
    }
    case Shard::zero3:
      add(Group::dp, "fwd", Coll::all_gather, dp, m * nu, m * full(dp) * b.param, dp_inter);
      add(Group::dp, "bwd", Coll::all_gather, dp, m * nb, m * blocks(dp) * b.param, dp_inter);
      add(Group::dp, "bwd", Coll::reduce_scatter, dp, m * nu, m * full(dp) * b.grad, dp_inter);
      break;
    case Shard::hsdp: {
      const int64_t F = shard_group_size(a);
      int64_t shard = 0;
      for (int64_t u : units) shard += ceil_div(u, F);
      add(Group::dp_shard, "fwd", Coll::all_gather, F, m * nu, m * full(F) * b.param, F > r);
      add(Group::dp_shard, "bwd", Coll::all_gather, F, m * nb, m * blocks(F) * b.param, F > r);
      add(Group::dp_shard, "bwd", Coll::reduce_scatter, F, m * nu, m * full(F) * b.grad, F > r);
      add(Group::dp_replica, "step", Coll::all_reduce, dp / F, nu, shard * b.grad, dp_inter);
      break;
    }
    case Shard::hzero: {
      const int64_t S = full(dp);  // dp-padded, so r | S and dp | S when padded
      add(Group::dp, "fwd", Coll::all_gather, dp, m * nu, m * S * b.param, dp_inter);
      add(Group::dp_intra, "bwd", Coll::all_gather, r, m * nb, m * blocks(dp) * b.param, false);
      add(Group::dp_intra, "bwd", Coll::reduce_scatter, r, m * nu, m * S * b.grad, false);
      add(Group::dp_inter, "bwd", Coll::reduce_scatter, dp / r, m * nu, m * ceil_div(S, r) * b.grad, dp_inter);
      break;
    }
  }
  return out;
}

std::vector<CollCost> comm_per_step(int64_t psi, const DataAxis& a) {
  const int64_t units[] = {psi};
  return comm_per_step(units, a);
}

CommTotals comm_totals(std::span<const CollCost> c) {
  CommTotals t;
  for (const CollCost& x : c) {
    (x.inter_node ? t.logical_inter : t.logical_intra) += x.bytes;
    (x.inter_node ? t.bus_inter : t.bus_intra) += x.bus_bytes();
  }
  return t;
}

double hzero_inter_node_reduction(int64_t psi, const DataAxis& a) {
  require(a.ranks_per_node > 0 && dp_ranks_per_node(a) < a.dp,
          "hzero: the inter-node reduction needs a dp group spanning nodes (set ranks_per_node)");
  DataAxis flat = a, hier = a;
  flat.shard = Shard::zero3;
  hier.shard = Shard::hzero;
  const auto f = comm_per_step(psi, flat), h = comm_per_step(psi, hier);
  return double(comm_totals(f).logical_inter) / double(comm_totals(h).logical_inter);
}

}  // namespace pb::dp
