// Test helpers the planner's tests share.
#pragma once
#include <cstdint>

#include "suites/planner/planner.h"

namespace pb::planner {

// A plan input of psi parameters (no model shape) over dp ranks.
inline PlanInput params_only(int64_t psi, int dp, dp::Shard shard) {
  PlanInput in;
  in.params = psi;
  in.dp = dp;
  in.shard = shard;
  in.precision = Precision::bf16_mixed;
  return in;
}

}  // namespace pb::planner
