// The pipeline's registration (impl/registry.cc): any schedule on a mesh
// dp<d>.pp<p>, each stage's dp group under any data-axis option (the data-
// parallel component), and the view of a run spec the executor takes.
#pragma once
#include <cstdint>
#include <span>

#include "impl/pipeline/executor.h"
#include "impl/spec/rank.h"

namespace pb::pipeline {

const Strategy& strategy();

// The pipeline's own injected faults (PipelineFaults' fields), declared
// (impl/spec/fault.h).
enum class Fault : uint8_t {
  skip_microbatch,
  grad_to_wrong_stage,
  tied_grad_not_summed,
  drop_w,
  // Bug classes shipped by frameworks (each FaultDecl names its source):
  grads_rescaled_by_microbatches,
  unnormalized_loss,
  zero_grads_per_microbatch,
  tied_sum_after_reduce_scatter,
  // The llama family's (issue 46):
  untied_head_summed,
  // Tensor- and context-parallel stages under 2BW (issue 49):
  bw_newest_weights,
};
std::span<const FaultDecl> fault_decls();

// The spec's pipeline faults go to PipelineOptions::faults, each axis's to
// the stage's axis options.
PipelineOptions options_of(const RunSpec& s);

}  // namespace pb::pipeline
