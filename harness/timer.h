// Wall-clock timing on the steady clock (monotonic: never jumps with NTP or
// date changes). Stopwatch measures; ScopedTimer adds a scope's duration to a
// caller-owned accumulator, so totals live with the caller, not in a global.
#pragma once
#include <chrono>

namespace pb {

class Stopwatch {
 public:
  using clock = std::chrono::steady_clock;
  Stopwatch() : start_(clock::now()) {}
  void restart() { start_ = clock::now(); }
  double elapsed_s() const { return std::chrono::duration<double>(clock::now() - start_).count(); }
  double elapsed_us() const { return elapsed_s() * 1e6; }

 private:
  clock::time_point start_;
};

class ScopedTimer {
 public:
  explicit ScopedTimer(double& total_s) : total_s_(total_s) {}
  ~ScopedTimer() { total_s_ += watch_.elapsed_s(); }
  ScopedTimer(const ScopedTimer&) = delete;
  ScopedTimer& operator=(const ScopedTimer&) = delete;

 private:
  double& total_s_;
  Stopwatch watch_;
};

}  // namespace pb
