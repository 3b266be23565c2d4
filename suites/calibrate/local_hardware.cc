// This machine's figures for the planner (see local_hardware.h).
#include "suites/calibrate/local_hardware.h"

#include <algorithm>

#include "suites/planner/model_cost.h"

namespace pb::calibrate {

void measure_world(LocalHardware& h, int world) {
  if (world < 2) return;
  if (!h.latency_us_by_world.count(world)) h.latency_us_by_world[world] = local_step_latency_us(world);
  for (int g = 2; g <= world; g *= 2)
    if (!h.bus_GBps.count(g)) h.bus_GBps[g] = measure_bus_bandwidth(g, &h.bus_alpha_us[g]);
  if (world > h.cores && !h.async_call_cost_by_world.count(world))
    h.async_call_cost_by_world[world] = measure_async_call_cost(world, h.cores);
}

double core_share(const LocalHardware& h, int world) { return std::min(1.0, double(h.cores) / double(world)); }

LocalHardware measure_local_hardware(double peak_flops_per_rank, int cores) {
  LocalHardware h;
  h.peak_flops_per_rank = peak_flops_per_rank;
  h.cores = std::max(1, cores);
  h.copy_GBps = copy_bandwidth_GBps();
  h.latency_us = local_step_latency_us(2);
  h.latency_us_by_world[2] = h.latency_us;  // measured once: the sweep's 2-rank points use it
  return h;
}

planner::Hardware planner_hardware(const LocalHardware& h, int world) {
  const double share = core_share(h, world);
  planner::Hardware hw;
  hw.peak_tflops = h.peak_flops_per_rank * share / 1e12;
  hw.bw_intra_GBps = h.copy_GBps * share;
  hw.bw_inter_GBps = hw.bw_intra_GBps;
  const auto lat = h.latency_us_by_world.find(world);
  hw.latency_us = lat != h.latency_us_by_world.end() ? lat->second : h.latency_us;
  hw.core_share = share;
  if (const auto a = h.async_call_cost_by_world.find(world); a != h.async_call_cost_by_world.end())
    hw.async_call_cost = a->second;
  for (const auto& [g, by_op] : h.bus_GBps) {
    const double own_share = std::min(1.0, double(h.cores) / double(g));
    const auto alphas = h.bus_alpha_us.find(g);
    for (const auto& [op, gbps] : by_op) {
      double alpha = hw.latency_us * planner::ring_steps(op, g);
      if (alphas != h.bus_alpha_us.end())
        if (const auto a = alphas->second.find(op); a != alphas->second.end())
          alpha = std::max(alpha, a->second * own_share / share);
      hw.collectives[op].push_back({g, alpha, gbps * share / own_share});
    }
  }
  // A copy reads and writes every byte; the traffic counts do both.
  hw.mem_bw_GBps = 2 * h.copy_GBps * share;
  return hw;
}

}  // namespace pb::calibrate
