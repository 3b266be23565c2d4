// Expert parallel as a rank runs it: the two data-parallel components' options
// (dense over dp, experts over edp), their unit lists, and the rules a run
// spec must meet (InputError naming the field).
//  - the model is a mixture of experts; ep divides the experts and the dp
//    ranks (mesh tp = cp = pp = 1 for now);
//  - the data-axis option applies to both components: ZeRO-1/2/3 shard the
//    expert states over edp; HSDP's shard group of F dp ranks holds F / ep
//    ranks of each edp group (F a multiple of ep, or F dividing ep: one);
//    hZeRO needs the edp group to span nodes as the dp group does.
#pragma once
#include <cstdint>
#include <vector>

#include "impl/data_parallel/component.h"
#include "impl/data_parallel/options.h"
#include "impl/data_parallel/shard.h"
#include "impl/spec/run_spec.h"
#include "reference/layout.h"

namespace pb::ep {

// The expert component's options: the spec's data option over edp =
// dp / ep ranks (ranks_per_node: the edp group's members per node); the
// data-parallel faults stay with the dense component.
dp::DpOptions expert_options(const RunSpec& s);
// The dense component's options: the spec's data axis, its ranks_per_node
// counting data-parallel ranks (a replica's tp x cp ranks share a node).
dp::DpOptions dense_options(const RunSpec& s);
// The dense component as it runs: over the dp x cp ranks (context parallel's
// cp ranks hold the same parameters, other tokens), ranks_per_node counting
// them; dense_options at cp 1.
dp::DpOptions dense_component_options(const RunSpec& s);
int edp_size(const MeshShape& m);

// The dense and expert units (the components' split) are
// impl/data_parallel/model_states.h's dense_units and expert_units.
std::vector<int64_t> sizes(const std::vector<dp::UnitSpan>& u);

void validate(const RunSpec& s);

}  // namespace pb::ep
