// One rank of an expert-parallel run (mesh dpN.epM, any data-axis option):
// the data-parallel rank (impl/data_parallel/dp_rank.h) with ep > 1, and the
// costs it declares (cost.h). The dense parameters (embeddings, attention,
// LayerNorms, routers) are one data-parallel component over the dp group; the
// experts of every MoE layer are split over the ep group (reference/moe.h
// MoeScope::ep: rank r of the group owns the r-th E/ep contiguous experts),
// and this rank's experts are a second component over the expert-data-
// parallel group edp (the ranks holding the same experts, Megatron-core's
// expert RankGenerator, harness/mesh.h), with the same data-axis option: ZeRO
// shards dense states over dp and expert states over edp. Routing, capacity
// and the load-balancing loss stay with the token's rank (global capacity:
// counts exchanged over the dp group "moe"); admitted rows travel to their
// experts and back by all-to-all(v) over "ep".
// Groups: "dp" (+ the family's dp_shard/dp_replica/dp_intra/dp_inter), the
// expert component's "edp" (+ edp_shard, ...), "ep", "moe", "dp_scalar",
// "ep_scalar" (the expert squared-norm partials), "check".
// On a device: both components' states and the runner's buffers there, the
// all-to-alls on device memory (moe.h: the routing on the host between them).
#pragma once
#include <memory>

#include "impl/data_parallel/dp_rank.h"
#include "impl/spec/run_spec.h"

namespace pb::ep {

template <class T>
class EpRank : public dp::DpRank<T> {
 public:
  // ops, memory: the device this rank trains on (the CPU when null), as DpRank's.
  EpRank(const RunSpec& s, Communicator& world, RankOps<T> ops = {}, RankMemory memory = {});
  Declared declared(int steps) const override;

 private:
  RunSpec spec_;
};

}  // namespace pb::ep
