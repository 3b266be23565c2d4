// The one conversion from a run spec to the planner's input: what a run of
// the spec does, as the planner models it. `plan`, the sweep's plan rows and
// the preflight all take it, so the same spec plans the same everywhere.
// What the planner is told about options it times (run_spec.h's meaning):
// zigzag and prefetch as given; overlap is DDP's bucket overlap with backward
// (data.overlap, shard=none), which the pipeline executor does not do (its
// stages sync after the flush).
#pragma once

#include "impl/spec/run_spec.h"
#include "suites/planner/planner.h"

namespace pb::planner {

// Whether the run's DDP all-reduces its buckets during backward: shard=none
// with overlap on, outside a pipeline (no pp > 1, no named schedule).
bool ddp_overlaps(const RunSpec& s);

// The mesh (every axis, ranks per node) and every axis's options of `s`
// into `in`; the model, batch and hardware are left alone.
void set_parallelism(PlanInput& in, const RunSpec& s);

// The planner's input for the run `s` describes: its model shape, mesh,
// options, precision, global batch and microbatches.
PlanInput plan_input_of(const RunSpec& s);

}  // namespace pb::planner
