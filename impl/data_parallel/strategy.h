// The data-parallel family's registration (impl/registry.cc): DDP, ZeRO-1/2/3,
// HSDP, hZeRO and offload on a mesh of dp ranks only, and the view of a run
// spec the family's code takes (DpOptions).
#pragma once
#include <cstdint>
#include <span>

#include "impl/data_parallel/options.h"
#include "impl/spec/rank.h"

namespace pb::dp {

const Strategy& strategy();

// The data axis of `s` as DpOptions: dp = mesh.dp, ranks_per_node from the
// mesh, the faults this family knows (InputError naming any other).
DpOptions options_of(const RunSpec& s);

// What one rank of the family declares for `steps` steps: model-state bytes
// by tag, the comm-buffer peak, and bytes per (group, op) — cost.h evaluated
// for this run.
Declared declared_costs(const DpOptions& o, const TrainConfig& cfg, int steps);
// The same for a rank holding units of the given sizes (a tensor-parallel
// shard of the model).
Declared declared_costs(const DpOptions& o, const TrainConfig& cfg, int steps, std::span<const int64_t> units);

// The "dp_scalar" group's all-reduces over `steps` steps: the loss, and the
// squared-norm partials when the states are sharded.
void add_scalar_comm(Declared& d, const DpOptions& o, int steps);

// A mixture-of-experts model sharing global capacity over the dp ranks:
// per MoE layer and microbatch, the (choice rank, expert) counts all-gathered
// and the probability sums all-reduced on group "moe" (8 bytes each).
// layers: the MoE layers the rank runs (-1: every one of the model's).
void add_moe_capacity_comm(Declared& d, const DpOptions& o, const TrainConfig& cfg, int steps, int layers = -1);

// The communicator op of a cost-model collective.
CommOp comm_op(Coll c);

}  // namespace pb::dp
