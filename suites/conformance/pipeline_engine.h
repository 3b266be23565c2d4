// The conformance engine for pipeline parallelism (impl/pipeline), composed
// with DDP or ZeRO-1 over each stage's dp group. Mirrors run_conformance
// (engine.h): the fp64 reference is the truth, the reference at the precision
// under test and the reference replaying the run's arithmetic order
// (pipeline_replay_plan) are the floor, and synchronous schedules whose
// backwards run in microbatch order are declared bitwise on the local backend.
// PipeDream-2BW is judged against one-step-delayed-weight training
// (delayed_reference.h), not synchronous training; its strategy string says so.
// Exact checks per rank: peak activation bytes = declared in-flight (microbatch,
// chunk) units x their bytes (stage.h, cost.h), p2p send bytes = cost.h
// p2p_per_step, tied-embedding all-reduce bytes = cost.h. The measured bubble
// (idle time per rank from timers) is reported beside the simulated one.
#pragma once
#include <string>
#include <vector>

#include "harness/comm/runner.h"
#include "impl/pipeline/cost.h"
#include "impl/pipeline/executor.h"
#include "impl/pipeline/timeline.h"
#include "suites/conformance/engine.h"

namespace pb {

struct PipelineRun {
  TrainConfig cfg;  // cfg.microbatches = m per step and replica; 2bw: cfg.steps groups
  pipeline::PipelineOptions pipe;
  WorldOptions world;  // size is set to dp * pp by the local overload
  ToleranceRule rule;
};

// Timing of the last step, pipeline replica 0.
struct PipelineReport {
  std::vector<double> busy_s, wall_s;  // per pipeline rank
  // bubble_fraction = sum_r (T - busy_r) / (p T), T = max wall; over_ideal =
  // (T - max busy) / max busy (definitions: impl/pipeline/simulator.h).
  double measured_bubble_fraction = 0, measured_bubble_over_ideal = 0;
  // simulate() of the same schedule with the measured mean action costs.
  double simulated_bubble_fraction = 0, simulated_bubble_over_ideal = 0;
  pipeline::Costs measured_costs;
  pipeline::DeclaredBubble declared;  // the formula at equal costs
  pipeline::Timeline timeline;        // measured, seconds (pipeline::render_timeline draws it)
  double makespan_s = 0;              // T: the longest rank's wall time
  Trace trace;                        // the run's (rank 0)
};

bool pipeline_declares_bitwise(const PipelineRun& r);

// "bubble fraction measured 0.31, simulated 0.29 (measured costs F 1.2 B 1.1
// W 1.1 ms); declared (p-1)/m = 0.375 over ideal (x/(1+x) = 0.273 fraction)".
std::string describe_bubble(const PipelineReport& rep);

// Runs on `world`, whose size must be dp * pp. report (optional): timing and trace.
ConformanceResult run_pipeline_conformance(const PipelineRun& r, World& world,
                                           PipelineReport* report = nullptr);
// Convenience: a local world of dp * pp ranks built from r.world.
ConformanceResult run_pipeline_conformance(const PipelineRun& r, PipelineReport* report = nullptr);

}  // namespace pb
