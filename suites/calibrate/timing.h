// Timing helpers the machine measurements share.
#pragma once
#include <algorithm>
#include <chrono>
#include <utility>
#include <vector>

#include "harness/comm/comm.h"

namespace pb::calibrate {

// Warm-up: f() (at least once) until `seconds` have passed on rank 0's
// clock, which decides for every rank, so all make as many calls (new rank
// threads can share a core until the scheduler moves one: their first calls
// are slow). The calls of f made.
template <class F>
int warm_up(Communicator& comm, F&& f, double seconds) {
  double warm = 0;
  int n = 0;
  const auto w0 = std::chrono::steady_clock::now();
  while (warm < seconds) {
    f();
    ++n;
    warm = std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
    comm.broadcast(&warm, 1, DType::f64, 0);
  }
  return n;
}

// The upper median of v (its middle value; of the two middle ones, the
// upper): the figure the calibration takes of repeated timings.
inline double upper_median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median seconds of one call of f over repeats totalling at least `seconds`
// (at least 3, after one warm-up call).
template <class F>
double median_seconds(F f, double seconds) {
  f();
  std::vector<double> t;
  double total = 0;
  while (t.size() < 3 || total < seconds) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    total += t.back();
  }
  return upper_median(std::move(t));
}

}  // namespace pb::calibrate
