// Pipeline simulator: runs a schedule against per-action costs and returns each
// rank's timeline, the bubble and the peak in-flight microbatches per rank.
//
// Model: each rank executes its list in order. A compute action starts when the
// rank is free and takes cost / v (costs are for a full pipeline stage, i.e. all
// of a rank's layers; a chunk holds 1/v of them); BW costs B + W. SEND takes no
// rank time (non-blocking); a RECV completes at max(rank free, send time + p2p).
// Exact for these semantics: no event queue is needed because every rank is
// sequential and messages are the only coupling.
//
// Bubble, two definitions (T = makespan, busy_r = rank r's compute time):
//   bubble_over_ideal = (T - ideal) / ideal, ideal = max_r busy_r: the
//     Megatron / zero-bubble papers' form, which the declared formulas in cost.h
//     give ((p-1)/m for GPipe and 1F1B, (p-1)/(v m) interleaved, ...);
//   bubble_fraction   = sum_r (T - busy_r) / (p T): the share of rank-time idle;
//     with balanced ranks it equals x / (1 + x) for x = bubble_over_ideal.
//
// In-flight microbatches (activation memory), counted in (microbatch, chunk)
// units in each rank's action order:
//   peak_in_flight: F done and the last backward (BW, or W when split) not yet
//     done: everything a microbatch holds is freed only then. This is the count
//     the declared peaks give (GPipe m, 1F1B min(p - r, m), ZB-H1 p);
//   peak_until_b:   F done and B/BW not yet done: the activations needed for the
//     input gradient. ZB-H1 keeps 1F1B's min(p - r, m) here; what stays until W
//     (the inputs of the weight matmuls) is smaller (Qi et al., Table 1).
#pragma once
#include <vector>

#include "impl/pipeline/cost.h"
#include "impl/pipeline/schedule.h"

namespace pb::pipeline {

struct TimelineEntry {
  Op op = Op::forward;  // compute only
  int microbatch = 0;
  int chunk = 0;
  double start = 0, end = 0;
};

struct SimResult {
  std::vector<std::vector<TimelineEntry>> timeline;  // [rank], in execution order
  double makespan = 0;
  std::vector<double> busy;  // [rank] compute time
  double ideal = 0;          // max busy
  double bubble_over_ideal = 0;
  double bubble_fraction = 0;
  std::vector<int> peak_in_flight;  // [rank], (microbatch, chunk) units
  std::vector<int> peak_until_b;    // [rank]
};

// Costs must be >= 0 with f + b + w > 0 (InputError naming --costs). Throws
// InputError if the schedule cannot finish (validate() first for the reason).
SimResult simulate(const Schedule& s, const Costs& c);

// Peaks from the action order alone (no timing needed).
std::vector<int> peak_in_flight(const Schedule& s);
std::vector<int> peak_until_b(const Schedule& s);

}  // namespace pb::pipeline
