// The pipeline's timing report from a conformance result: the measured
// bubble (idle time per rank from the ranks' timers, pipeline replica 0)
// beside the simulated one (simulate() with the measured mean action costs)
// and the declared formula. Definitions: impl/pipeline/simulator.h.
#pragma once
#include <string>
#include <vector>

#include "impl/pipeline/cost.h"
#include "impl/pipeline/timeline.h"
#include "suites/conformance/engine.h"

namespace pb {

struct PipelineReport {
  std::vector<double> busy_s, wall_s;  // per pipeline rank of replica 0
  // bubble_fraction = sum_r (T - busy_r) / (p T), T = max wall; over_ideal =
  // (T - max busy) / max busy.
  double measured_bubble_fraction = 0, measured_bubble_over_ideal = 0;
  double simulated_bubble_fraction = 0, simulated_bubble_over_ideal = 0;
  pipeline::Costs measured_costs;
  pipeline::DeclaredBubble declared;  // the formula at equal costs
  pipeline::Timeline timeline;        // measured, seconds (pipeline::render_timeline draws it)
  double makespan_s = 0;              // T: the longest rank's wall time
};

// From r.times (every world rank's); s must be a pipeline spec.
PipelineReport pipeline_report(const RunSpec& s, const ConformanceResult& r);

// "bubble fraction measured 0.31, simulated 0.29 (measured costs F 1.2 B 1.1
// W 1.1 ms); declared (p-1)/m = 0.375 over ideal (x/(1+x) = 0.273 fraction)".
std::string describe_bubble(const PipelineReport& rep);

}  // namespace pb
