// How the reference replays a data-parallel run's arithmetic (reference/
// trainer.h SplitPlan), and when the run declares itself bit-equal to that
// replay. On the local backend every collective sums its members in rank
// order in the accumulation type and rounds once (harness/comm_local_ops.cc),
// so the replay is exact when the plan nests the sums as the run does:
//  - DDP, ZeRO-1/2/3: one rank-ordered sum over all dp ranks;
//  - HSDP: a sum within each shard group (F consecutive ranks), rounded, then
//    a sum over the replicas in order;
//  - hZeRO: a sum within each node (ranks_per_node consecutive ranks),
//    rounded, then a sum over the nodes in order.
//  - ZeRO-2/3, HSDP and hZeRO with accumulation: reduced every microbatch
//    (the plan's reduce_per_micro, and outer_per_micro for hZeRO).
// Not replayed (held to the ratio rule only, and run again at fp64): any
// backend other than local (MPI/NCCL reduce in their own order).
#pragma once
#include "impl/data_parallel/options.h"
#include "reference/trainer.h"

namespace pb::dp {

// The reference's split plan that replays the run's reduction order and its
// per-rank gradient-norm partial sums.
SplitPlan replay_plan(const DpOptions& o, const TrainConfig& cfg);
// Does the run do the replay's arithmetic in its order (so bits must match)?
bool declares_bitwise(const DpOptions& o, const TrainConfig& cfg, bool local_backend);
// A mixture-of-experts model with global capacity over more than one data
// rank: its ranks exchange routing counts (group "moe") and the reference
// replays their microbatches jointly (SplitPlan::moe_joint).
bool moe_shares_capacity(const DpOptions& o, const TrainConfig& cfg);

}  // namespace pb::dp
