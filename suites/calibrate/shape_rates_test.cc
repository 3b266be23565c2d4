// A training shape's measured rates: the best of their repeats.
#include "suites/calibrate/shape_rates.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "harness/status.h"
#include "reference/model_config.h"

namespace pb::calibrate {
namespace {

TEST(ShapeRates, ShapeRatesAreTheBestOfTheirRepeats) {
  const ModelConfig& m = named_model("tiny");
  const double peak = 50e9;
  const ShapeRates r = measure_shape_rates(m, 4, 16, peak, 2);
  EXPECT_GT(r.gemm_efficiency, 0);
  EXPECT_LE(r.gemm_efficiency, 1);
  const MemoryBoundRates one = measure_memory_bound(m, 4, 16, 0.01);
  EXPECT_DOUBLE_EQ(r.memory.micro_bytes, one.micro_bytes);
  EXPECT_DOUBLE_EQ(r.memory.step_bytes, one.step_bytes);
  EXPECT_GT(r.memory.micro_s, 0);
  EXPECT_GT(r.memory.step_s, 0);
  EXPECT_GT(r.memory.buffer_s, 0);
  EXPECT_DOUBLE_EQ(r.memory.buffer_bytes, one.buffer_bytes);
  EXPECT_THROW(measure_shape_rates(m, 4, 16, peak, 0), InputError);
}
}  // namespace
}  // namespace pb::calibrate
