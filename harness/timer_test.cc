// Stopwatch and ScopedTimer measure sleeps from below (sleep_for never wakes
// early) and accumulate across scopes.
#include "harness/timer.h"

#include <gtest/gtest.h>

#include <thread>

namespace pb {
namespace {

using namespace std::chrono_literals;

TEST(Timer, StopwatchMeasuresASleep) {
  Stopwatch w;
  std::this_thread::sleep_for(20ms);
  const double t = w.elapsed_s();
  EXPECT_GE(t, 0.020);
  EXPECT_LT(t, 2.0);  // generous: a loaded CI machine may deschedule us
  EXPECT_GE(w.elapsed_us(), t * 1e6);
  w.restart();
  EXPECT_LT(w.elapsed_s(), t);
}

TEST(Timer, ScopedTimerAccumulates) {
  double total = 0.5;
  for (int i = 0; i < 3; ++i) {
    ScopedTimer s(total);
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_GE(total, 0.5 + 0.015);
  EXPECT_LT(total, 0.5 + 2.0);
}

}  // namespace
}  // namespace pb
