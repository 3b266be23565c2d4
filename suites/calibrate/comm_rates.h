// The local backend's communication figures, measured on this machine: the
// fixed cost of one ring step, each collective's bus bandwidth and intercept
// as a training step makes its calls, the cost of a collective issued without
// waiting on time-shared cores, and one thread's memcpy bandwidth. `parabench
// sweep` (its plan rows) and `parabench calibrate` (a machine profile) both
// measure through these.
// Invariant: every figure is rank 0's, on a fresh local world of the size
// asked; sizes are logical bytes in nccl-tests' convention.
#pragma once
#include <cstddef>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "harness/comm/runner.h"
#include "suites/planner/planner.h"

namespace pb::calibrate {

// Seconds per call of `op` (planner::collective_ops(): all_reduce,
// reduce_scatter, all_gather, all_to_all; send_recv, a ring exchange, each
// rank sending to the next and receiving from the previous) at each total
// logical size in `bytes` (nccl-tests' convention) among n local ranks, fp32:
// rank 0's mean over enough back-to-back calls to fill `seconds` per size,
// after warm-up calls. (logical bytes, seconds) pairs.
std::vector<std::pair<double, double>> measure_collective_times(const std::string& op, int n,
                                                                const std::vector<size_t>& bytes, double seconds);

// The bus bandwidth of every collective op among n local ranks at the sizes
// a step's collectives have (16 KiB .. 1 MiB), timed as a step makes them:
// per size, rank 0's time per call of 15 calls, each after the rank read its
// previous output and rewrote its input, less those reads and writes alone
// (the median of three windows, after 5 ms of warm-up calls); 1 / the median
// of the slopes between every two sizes (time over bus bytes); the median of
// three such fits. With `alpha_us`, that fit's intercept too, per op (us per
// call). An op whose times do not grow with size in two of them is left out.
// The local backend's ops differ by up to 4x here (at 2 ranks, send_recv
// about 4 GB/s, all_reduce 13 back to back), which one copy bandwidth for
// all of them hides.
std::map<std::string, double> measure_bus_bandwidth(int n, std::map<std::string, double>* alpha_us = nullptr);

// What a collective issued without waiting costs `world` ranks time-sharing
// `cores` cores (planner::Hardware::async_call_cost), at four amounts of
// compute between calls (wall 50 us, 250 us, 1 ms, 4 ms at the core share): every
// rank starts a 64 KiB-per-rank all_gather, computes (a spin of calibrated
// length), then waits for the gather, against the same compute alone; the
// difference per call, the median of three windows of about 0.1 s each.
// Only meaningful when world > cores and the world runs its collectives on
// progress threads (`progress`, resolved at `cores`; WorldOptions::Progress):
// empty otherwise. Deferred, they are plain blocking calls made at the wait,
// which the planner times as exposed collectives.
std::vector<planner::AsyncCallCost> measure_async_call_cost(
    int world, int cores, WorldOptions::Progress progress = WorldOptions::Progress::automatic);

// One ring step of the local backend's collectives at `world` (>= 2) ranks,
// in microseconds: the median over 16 B .. 4 KiB of an all_reduce's time over
// its 2 (world - 1) steps (at more ranks than cores, wake-ups included); the
// least of three such measurements, each on a fresh world (on this VM the
// first one in a process can take 100x longer: 112 us, then 0.3 us).
double local_step_latency_us(int world);

// One thread's memcpy bandwidth, GB/s (1e9 bytes): the best of four 32 MiB
// copies (the first also faults the pages in).
double copy_bandwidth_GBps();

}  // namespace pb::calibrate
