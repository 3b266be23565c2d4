// The planner as preflight: what a run of a RunSpec needs in one process, so
// train, check, sweep and run refuse a shape this machine cannot hold before
// any rank starts (harness/preflight.h has the limits and the check).
#pragma once
#include <cstdint>

#include "harness/preflight.h"
#include "impl/spec/run_spec.h"
#include "suites/planner/plan_input.h"
#include "suites/planner/planner.h"

namespace pb::planner {

// What a process hosting `hosted_ranks` of the run's ranks needs: the
// planner's per-rank memory of its largest stage (every tag, host optimizer
// states included) at the run's precision, or at fp64 when
// `conformance` (the engine reruns the strategy at fp64 and holds three
// single-device references, counted too), plus kRankOverheadBytes per rank.
// Shapes the planner does not model are estimated from the parameter and
// activation counts alone. local_ranks is hosted_ranks when `local`.
Need run_need(const RunSpec& s, int64_t hosted_ranks, bool local, bool conformance);

}  // namespace pb::planner
