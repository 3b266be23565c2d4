// Declared pipeline costs (formulas and sources in cost.h).
#include "impl/pipeline/cost.h"

#include <algorithm>

#include "harness/status.h"
#include "impl/spec/groups.h"

namespace pb::pipeline {

DeclaredBubble declared_bubble(ScheduleKind kind, const ScheduleConfig& cfg, const Costs& c) {
  check_config(kind, cfg);
  const double p = cfg.pp, m = cfg.microbatches, v = cfg.virtual_stages, k = cfg.steps;
  DeclaredBubble d;
  switch (kind) {
    case ScheduleKind::gpipe:
    case ScheduleKind::one_f_one_b:
      d.over_ideal = (p - 1) / m;
      d.formula = "(p-1)/m";
      break;
    case ScheduleKind::interleaved:
      d.over_ideal = (p - 1) / (v * m);
      d.formula = "(p-1)/(v*m)";
      break;
    case ScheduleKind::zb_h1:
      d.formula = "(p-1)(F+B-W)/(m(F+B+W))";
      if (c.w <= std::min(c.f, c.b)) d.over_ideal = (p - 1) * (c.f + c.b - c.w) / (m * (c.f + c.b + c.w));
      break;
    case ScheduleKind::pipedream_2bw:
      d.over_ideal = (p - 1) / (k * m);
      d.formula = "(p-1)/(K*m)";
      break;
  }
  if (d.over_ideal) d.fraction = *d.over_ideal / (1 + *d.over_ideal);
  return d;
}

namespace {
std::vector<int> declared_peak(ScheduleKind kind, const ScheduleConfig& cfg, bool until_w) {
  check_config(kind, cfg);
  const int p = cfg.pp, m = cfg.microbatches, v = cfg.virtual_stages, n = m * cfg.steps;
  std::vector<int> out;
  for (int r = 0; r < p; ++r) {
    switch (kind) {
      case ScheduleKind::gpipe: out.push_back(m); break;
      case ScheduleKind::interleaved:
        if (v > 1) {
          out.push_back(std::min(2 * (p - r - 1) + (v - 1) * p + 1, v * m));
          break;
        }
        [[fallthrough]];
      case ScheduleKind::one_f_one_b:
      case ScheduleKind::pipedream_2bw: out.push_back(std::min(p - r, n)); break;
      case ScheduleKind::zb_h1: out.push_back(until_w ? p : p - r); break;
    }
  }
  return out;
}
}  // namespace

std::vector<int> declared_peak_in_flight(ScheduleKind kind, const ScheduleConfig& cfg) {
  return declared_peak(kind, cfg, /*until_w=*/true);
}
std::vector<int> declared_peak_until_b(ScheduleKind kind, const ScheduleConfig& cfg) {
  return declared_peak(kind, cfg, /*until_w=*/false);
}

int64_t boundary_bytes(int64_t B, int64_t T, int64_t C, int64_t dtype_bytes) {
  require(B >= 1 && T >= 1 && C >= 1 && dtype_bytes >= 1,
          "boundary_bytes: B, T, C, dtype bytes must be >= 1");
  return B * T * C * dtype_bytes;
}

P2PVolume p2p_per_step(const ScheduleConfig& cfg, int64_t a) {
  require(cfg.pp >= 1 && cfg.microbatches >= 1 && cfg.virtual_stages >= 1,
          "p2p_per_step: pp, microbatches, virtual stages must be >= 1");
  P2PVolume out;
  const int64_t p = cfg.pp, m = cfg.microbatches, v = cfg.virtual_stages;
  out.send_bytes.assign(size_t(p), 0);
  if (p == 1) return out;
  out.messages = 2 * m * (p * v - 1);
  out.bytes = out.messages * a;
  for (int64_t r = 0; r < p; ++r) out.send_bytes[size_t(r)] = m * a * (2 * v - (r == p - 1) - (r == 0));
  return out;
}

int64_t tied_embedding_grad_bytes(int64_t V, int64_t C, int64_t dtype_bytes, int pp) {
  require(pp >= 1, "pp: must be >= 1");
  return pp == 1 ? 0 : V * C * dtype_bytes;
}

Partition partition_layers(int L, int pp, int v) {
  require(L >= 1, "L: the model needs at least one block, got " + std::to_string(L));
  require(pp >= 1, "pp: must be >= 1, got " + std::to_string(pp));
  require(v >= 1, "virtual_stages: must be >= 1, got " + std::to_string(v));
  const int n = pp * v;
  require(n <= L, "pp * virtual_stages = " + std::to_string(n) + " stages but the model has only L = " +
                      std::to_string(L) + " blocks: more stages than layers");
  Partition part{L, pp, v, {}};
  const int base = L / n;
  int extra = L % n;
  std::vector<int> blocks(size_t(n), base);
  for (int vs = 1; vs + 1 < n && extra > 0; ++vs, --extra) ++blocks[size_t(vs)];
  if (extra > 0) ++blocks[0];  // extra <= n - 1, so at most one is left here
  int first = 0;
  for (int vs = 0; vs < n; ++vs) {
    part.stages.push_back({vs % pp, vs / pp, vs, first, blocks[size_t(vs)], vs == 0, vs == n - 1});
    first += blocks[size_t(vs)];
  }
  return part;
}

void check_pipeline_mesh(int world, int pp) {
  require(pp >= 1, "pp: must be >= 1, got " + std::to_string(pp));
  require(world >= 1 && world % pp == 0, "pp: " + std::to_string(pp) + " does not divide world size " +
                                             std::to_string(world) + " (world = dp * tp * cp * pp)");
}

std::vector<dp::CollCost> stage_dp_comm_per_step(const std::vector<StageUnitUse>& units, const dp::DataAxis& a,
                                                 int microbatches) {
  using dp::Coll;
  using dp::Shard;
  const dp::BytesPerParam b = dp::bytes_per_param(a.precision);
  const int64_t g = dp::shard_group_size(a), m = microbatches;
  std::vector<dp::CollCost> out;
  auto add = [&](Group name, const char* phase, Coll op, int64_t n, int64_t calls, int64_t bytes) {
    if (n <= 1 || bytes == 0) return;
    const char* group = group_name(name);
    for (auto& c : out)
      if (c.group == group && c.phase == phase && c.op == op) {
        c.calls += calls;
        c.bytes += bytes;
        return;
      }
    out.push_back({group, phase, op, n, calls, bytes, false});
  };
  const int64_t r = dp::dp_ranks_per_node(a), nodes = a.dp / std::max<int64_t>(r, 1);
  if (a.shard == Shard::none) {  // one all-reduce of the whole (unpadded) buffer
    int64_t n = 0;
    for (const StageUnitUse& u : units) n += u.size;
    add(Group::dp, "step", Coll::all_reduce, a.dp, 1, n * b.grad);
    return out;
  }
  bool first = true;
  for (const StageUnitUse& u : units) {
    const int64_t padded = dp::full_elems(u.size, g, dp::Padding::padded), slice = padded / g;
    switch (a.shard) {
      case Shard::none:
        break;
      case Shard::zero1:
      case Shard::zero2: {
        const int64_t rs = a.shard == Shard::zero1 ? 1 : m;
        add(Group::dp, a.shard == Shard::zero1 ? "step" : "bwd", Coll::reduce_scatter, a.dp, rs, rs * padded * b.grad);
        add(Group::dp, "step", Coll::all_gather, a.dp, 1, padded * b.param);
        break;
      }
      case Shard::zero3:
        add(Group::dp, "fwd", Coll::all_gather, a.dp, m * u.fwd_uses, m * u.fwd_uses * padded * b.param);
        add(Group::dp, "bwd", Coll::all_gather, a.dp, m * u.bwd_uses, m * u.bwd_uses * padded * b.param);
        add(Group::dp, "bwd", Coll::reduce_scatter, a.dp, m, m * padded * b.grad);
        break;
      case Shard::hsdp:
        add(Group::dp_shard, "fwd", Coll::all_gather, g, m * u.fwd_uses, m * u.fwd_uses * padded * b.param);
        add(Group::dp_shard, "bwd", Coll::all_gather, g, m * u.bwd_uses, m * u.bwd_uses * padded * b.param);
        add(Group::dp_shard, "bwd", Coll::reduce_scatter, g, m, m * padded * b.grad);
        add(Group::dp_replica, "step", Coll::all_reduce, a.dp / g, first ? 1 : 0, slice * b.grad);  // one call, the whole shard
        break;
      case Shard::hzero:
        add(Group::dp, "fwd", Coll::all_gather, a.dp, m * u.fwd_uses, m * u.fwd_uses * padded * b.param);
        add(Group::dp_intra, "bwd", Coll::all_gather, r, m * u.bwd_uses, m * u.bwd_uses * padded * b.param);
        add(Group::dp_intra, "bwd", Coll::reduce_scatter, r, m, m * padded * b.grad);
        add(Group::dp_inter, "bwd", Coll::reduce_scatter, nodes, m, m * (padded / r) * b.grad);
        break;
    }
    first = false;
  }
  return out;
}

}  // namespace pb::pipeline
