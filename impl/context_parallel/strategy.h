// The context-parallel registration (impl/registry.cc): ring attention or
// Ulysses on a mesh of dp x tp x cp ranks. A rank is the tensor-parallel one
// (impl/tensor_parallel/tp_rank.h) with its attention over the cp group, its
// tokens placed by impl/context_parallel/options.h, and its data-parallel
// component over the dp x cp ranks (gradients reduced, optimizer states
// sharded over that combined group, as Megatron-LM does).
#pragma once
#include "impl/spec/rank.h"

namespace pb::cp {

const Strategy& strategy();

}  // namespace pb::cp
