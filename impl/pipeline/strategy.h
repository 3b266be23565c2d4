// The pipeline's registration (impl/registry.cc): any schedule on a mesh
// dp<d>.pp<p>, each stage's dp group under any data-axis option (the data-
// parallel component), and the view of a run spec the executor takes.
#pragma once
#include "impl/pipeline/executor.h"
#include "impl/spec/rank.h"

namespace pb::pipeline {

const Strategy& strategy();

// The spec's pipeline faults go to PipelineOptions::faults, the rest to the
// stage's data axis (InputError naming a fault neither knows).
PipelineOptions options_of(const RunSpec& s);

}  // namespace pb::pipeline
