// The expert-parallel registration (impl/registry.cc): a mixture-of-experts
// model on a mesh of dp ranks with ep > 1 (ep_rank.h), every data-axis option
// on both the dense (dp) and the expert (edp) components.
#pragma once
#include "impl/spec/rank.h"

namespace pb::ep {

const Strategy& strategy();

}  // namespace pb::ep
