#include "impl/data_parallel/replay.h"

#include "impl/data_parallel/component.h"
#include "impl/data_parallel/shard.h"

namespace pb::dp {

SplitPlan replay_plan(const DpOptions& o, const TrainConfig& cfg) {
  SplitPlan p;
  p.groups = o.dp;
  p.micro = cfg.microbatches;
  if (o.shard == Shard::hsdp) p.block = shard_group(o);
  if (o.shard == Shard::hzero) p.block = o.ranks_per_node;
  // ZeRO-2 and the ZeRO-3 family reduce-scatter every microbatch (hZeRO both
  // levels; HSDP's replica all-reduce once per step).
  p.reduce_per_micro = o.shard >= Shard::zero2;
  p.outer_per_micro = o.shard == Shard::hzero;
  p.moe_joint = moe_shares_capacity(o, cfg);
  if (o.shard == Shard::none) return p;
  // Norm partial sums: every rank sums its owned ranges in unit order, then the
  // scalar all-reduce adds the ranks in rank order. HSDP reduces the norm
  // within one shard group (slices 0..F-1); hZeRO's rank r owns slice
  // (r % rpn) * nodes + r / rpn (the slice its two-level reduce-scatter leaves
  // it, component.h owned_slice) and the scalar all-reduce spans all dp ranks.
  const ParamLayout l(cfg.model);
  const int g = shard_group(o);
  const int ranks = o.shard == Shard::hsdp ? g : o.dp;
  for (int r = 0; r < ranks; ++r) {
    ShardLayout sl(l, g, owned_slice(o, r));
    std::vector<std::pair<int64_t, int64_t>> ranges;
    for (int u = 0; u < sl.num_units(); ++u) {
      auto rg = sl.owned(u);
      if (rg.first < rg.second) ranges.push_back(rg);
    }
    p.norm_parts.push_back(std::move(ranges));
  }
  return p;
}

bool moe_shares_capacity(const DpOptions& o, const TrainConfig& cfg) {
  return cfg.model.moe.experts > 0 && cfg.model.moe.capacity == MoeCapacity::global && o.dp > 1;
}

bool declares_bitwise(const DpOptions& o, const TrainConfig& cfg, bool local_backend) {
  // Every family's order is replayed (per-microbatch reductions included), so
  // on the local backend every one is bit-equal to its replay — except a
  // mixture of experts whose capacity spans the ranks: the reference runs
  // their microbatches as one (the same routing, another summation order).
  return local_backend && !moe_shares_capacity(o, cfg);
}

}  // namespace pb::dp
