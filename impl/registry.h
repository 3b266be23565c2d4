// The strategies parabench implements: one registration per implementation
// (impl/registry.cc lists them). The engine, the sweep and the CLI find the
// implementation for a run spec here and nowhere else.
#pragma once
#include <vector>

#include "impl/spec/rank.h"

namespace pb {

const std::vector<const Strategy*>& strategies();

// Every axis's fault declarations, each axis's rows together (static): what
// the run-spec parser resolves fault names against (run_spec.h
// apply_strategy_text, read_run_spec).
FaultCatalogue fault_catalogue();

// The implementation that runs `s`: InputError naming the mesh and the axes
// no implementation covers yet, or a fault it does not declare (naming the
// ones it does, by axis).
const Strategy& strategy_for(const RunSpec& s);

}  // namespace pb
