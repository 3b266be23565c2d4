#include "impl/data_parallel/replay.h"

#include "impl/data_parallel/shard.h"

namespace pb::dp {

SplitPlan replay_plan(const DpOptions& o, const TrainConfig& cfg) {
  SplitPlan p;
  p.groups = o.dp;
  p.micro = cfg.microbatches;
  if (o.shard == Shard::hsdp) p.block = shard_group(o);
  if (o.shard == Shard::hzero) p.block = o.ranks_per_node;
  if (o.shard == Shard::none) return p;
  // Norm partial sums: every rank sums its owned ranges in unit order, then the
  // scalar all-reduce adds the ranks in rank order. HSDP reduces the norm
  // within one shard group (slices 0..F-1); hZeRO's rank r owns slice
  // (r % rpn) * nodes + r / rpn (the slice its two-level reduce-scatter leaves
  // it, dp_rank.cc) and the scalar all-reduce spans all dp ranks.
  const ParamLayout l(cfg.model);
  const int g = shard_group(o);
  const int ranks = o.shard == Shard::hsdp ? g : o.dp;
  const int rpn = o.ranks_per_node ? o.ranks_per_node : o.dp, nodes = o.dp / rpn;
  for (int r = 0; r < ranks; ++r) {
    const int slice = o.shard == Shard::hzero ? (r % rpn) * nodes + r / rpn : r;
    ShardLayout sl(l, g, slice);
    std::vector<std::pair<int64_t, int64_t>> ranges;
    for (int u = 0; u < sl.num_units(); ++u) {
      auto rg = sl.owned(u);
      if (rg.first < rg.second) ranges.push_back(rg);
    }
    p.norm_parts.push_back(std::move(ranges));
  }
  return p;
}

bool declares_bitwise(const DpOptions& o, const TrainConfig& cfg, bool local_backend) {
  if (!local_backend) return false;
  switch (o.shard) {
    case Shard::none:
    case Shard::zero1: return true;  // gradients accumulate locally, reduced once per step
    default: return cfg.microbatches == 1;  // reduced per microbatch: see replay.h
  }
}

}  // namespace pb::dp
