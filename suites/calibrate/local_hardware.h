// This machine as the planner sees one rank of a local run: the measured
// communication figures (comm_rates.h) by world and group size, and their
// conversion into planner::Hardware at a world's core share.
// Invariant: the local backend runs `world` ranks as threads on `cores`
// cores, so a rank's share of the machine is min(1, cores / world) of one
// core's GEMM peak and one thread's copy bandwidth.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "suites/calibrate/comm_rates.h"
#include "suites/planner/planner.h"

namespace pb::calibrate {

struct LocalHardware {
  double peak_flops_per_rank = 0;  // one core's dense-GEMM rate, FLOP/s (the sweep's MFU peak)
  double copy_GBps = 0;            // one thread's memcpy bandwidth, GB/s (1e9 bytes)
  double latency_us = 0;           // one ring step, for worlds not in latency_us_by_world
  int cores = 1;                   // hardware threads available to the ranks
  std::map<int, double> latency_us_by_world;  // one ring step at that many ranks (local_step_latency_us)
  // At more ranks than cores: measure_async_call_cost at that many ranks.
  std::map<int, std::vector<planner::AsyncCallCost>> async_call_cost_by_world;
  // Bus bandwidth (GB/s, nccl-tests' bus bytes) by group size, then op,
  // measured on the local backend (measure_bus_bandwidth); a group is
  // measured once even when no op gave a figure; ops or sizes missing use
  // copy_GBps.
  std::map<int, std::map<std::string, double>> bus_GBps{};
  // The fixed part of each op's call, us, by group size, from the same
  // measurement (the fit's intercept); an op not in it, or below the world's
  // ring steps, uses those.
  std::map<int, std::map<std::string, double>> bus_alpha_us{};
};

// The per-world figures of `world` ranks the plan rows need, measured once:
// its ring step (local_step_latency_us), the bus bandwidth of every op at
// each power-of-two group size up to `world` (the groups its points' axes
// make) and, at more ranks than cores, the cost of a collective issued
// without waiting.
void measure_world(LocalHardware& h, int world);


// Measures copy bandwidth (best of a few 32 MiB memcpys) and the 2-rank ring
// step (the fallback latency); takes the GEMM peak as measured by the sweep.
// The per-world latencies are the caller's to add.
LocalHardware measure_local_hardware(double peak_flops_per_rank, int cores);

// What the planner is told about one rank of a `world`-rank local run: the
// measured figures times the core share; intra = inter bandwidth (one node).
// The measured bus bandwidths become per-op fits (planner::Hardware::
// collectives) whose alpha is the world's ring steps or the measured
// intercept (bus_alpha_us), the larger; a group's figures measured with its
// own g threads are scaled by the world's core share over the group's own
// (cores / g at more threads than cores).
planner::Hardware planner_hardware(const LocalHardware& h, int world);

// A rank's share of the machine's cores among `world` ranks.
double core_share(const LocalHardware& h, int world);

}  // namespace pb::calibrate
