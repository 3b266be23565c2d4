// Presenting a plan: the human table `parabench plan` prints and the `plan`
// row of results/SCHEMA.md. Units are stated in every header: memory in GiB
// (2^30 bytes), communication in GB (1e9 bytes, as nccl-tests), time in s or ms.
#pragma once
#include <string>
#include <vector>

#include "harness/io/csv.h"
#include "suites/planner/planner.h"

namespace pb::planner {

// The run spec's strategy text (impl/spec/run_spec.h), e.g.
// "shard=zero1,overlap=off,sp=on,recompute=selective,schedule=1f1b".
std::string strategy_spec(const PlanInput& in);
// "dp96.tp8.pp64" (harness/mesh.h mesh_text).
std::string mesh_spec(const PlanInput& in);
std::string model_label(const PlanInput& in);

// The planner's own options that change the estimate and are not in the
// strategy text, in plan --FLAG's spelling: the non-default ones as
// name=value joined by commas in name order, e.g.
// "attention=flash,kernels=eager,loss=megatron-fp32"; empty when all are
// defaults (the `plan_options` column, results/SCHEMA.md). A 2-byte gradient
// reduce is written grad_reduce=bf16 (--grad-reduce fp16 plans the same).
// `extra` name=value parts (plan's hardware figures typed by hand) join them
// in the same name order.
std::string plan_options(const PlanInput& in, std::vector<std::string> extra = {});

std::string format_plan_table(const PlanInput& in, const PlanResult& r);

// The kind-specific columns of a `plan` row (common columns come from RunMeta).
// Unknown figures (activations without a shape, estimates without hardware)
// stay empty. `machine` is in.hw.machine (the profile's own name); a caller
// that loaded the profile from a name or file sets it to that text as given.
CsvRecord plan_record(const PlanInput& in, const PlanResult& r);

// Logical bytes per step of the rows whose group belongs to an axis:
// "dp" (dp, dp_shard, dp_replica, dp_intra, dp_inter), "tp", "cp", "pp"
// (pp and the tied-embedding all-reduce); and the inter-node part of all.
int64_t comm_bytes(const PlanResult& r, std::string_view axis);
int64_t comm_inter_node_bytes(const PlanResult& r);

}  // namespace pb::planner
