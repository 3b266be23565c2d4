// What an expert-parallel rank declares (the conformance engine holds it to
// every figure exactly) and the planner reuses:
//  - model states: the dense component's over dp plus the expert component's
//    (E/ep experts per MoE layer) over edp, each by the data-parallel cost
//    model (impl/data_parallel/cost.h);
//  - comm buffers: both components' protocols replayed on one meter in the
//    order the microbatch runner calls their hooks;
//  - collectives: the dense component's on dp groups, the expert
//    component's on edp groups, the capacity counts on "moe" (global
//    capacity), and on "ep" per MoE layer and microbatch: an all-to-all of
//    the E per-expert counts (8 bytes each), and of rows of C elements:
//    dispatch (this rank's admitted choices) and combine (the rows its
//    experts ran on) forward, the same two backward. The row counts are the
//    routing's: the runner records them (MoeLoad), the planner assumes a
//    balanced router (every admitted row counted, capacity-limited).
#pragma once
#include <cstdint>
#include <vector>

#include "impl/data_parallel/cost.h"
#include "impl/spec/rank.h"
#include "reference/layout.h"

namespace pb::ep {

// Logical all-to-all bytes on "ep" per MoE layer forward + backward, given the
// rows dispatched and the rows run (elem: the storage element's bytes).
int64_t a2a_bytes(const ModelConfig& m, int64_t calls, int64_t sent_rows, int64_t owner_rows, int elem);

// Rows a balanced router dispatches per MoE layer and microbatch of N tokens
// on one rank: N * top_k choices, each admitted up to the capacity
// (global: of the scope's tokens, shared by the scope's ranks).
int64_t balanced_rows(const ModelConfig& m, int64_t N, int64_t scope_tokens);

// The two components' model states, their comm-buffer peak together, and
// their collectives per step (the expert component's groups prefixed "e").
struct StateCosts {
  dp::ModelStateBytes dense, experts;
  int64_t comm_peak = 0;
  std::vector<dp::CollCost> dense_comm, expert_comm;
  int64_t local_traffic = 0;  // both components' own buffer bytes per step (dp::local_traffic_bytes)
};
StateCosts state_costs(const RunSpec& s);

// Everything but the "ep" all-to-alls (which the caller adds from its routing).
Declared declared_costs(const RunSpec& s, int steps);

}  // namespace pb::ep
