// Tests of the sgemm peak measurement: a positive, plausible figure, the
// caller's BLAS thread count restored, and bad arguments rejected.
#include "kernels/cpu/peak.h"

#include <cblas.h>
#include <gtest/gtest.h>

#include <stdexcept>

#include "kernels/cpu/ops.h"

namespace pb::kernels {
namespace {

TEST(SgemmPeak, PositiveAndRestoresThreads) {
  set_blas_threads(2);
  const int before = openblas_get_num_threads();
  const double gflops = measure_sgemm_gflops(/*n=*/128, /*min_seconds=*/0.05);
  EXPECT_GT(gflops, 0.1);     // any machine that runs the suite
  EXPECT_LT(gflops, 1.0e4);   // one core cannot exceed ~10 TFLOP/s
  EXPECT_EQ(openblas_get_num_threads(), before);
  set_blas_threads(1);
}

// Every transpose combination of a non-square shape runs (a wrong leading
// dimension would make OpenBLAS report a parameter error and skip the call,
// which would show as an implausibly high rate).
TEST(SgemmPeak, RectangularShapesInEveryLayout) {
  const double square = measure_sgemm_gflops(96, 0.02);
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const double g = measure_sgemm_gflops(/*m=*/96, /*n=*/40, /*k=*/72, ta, tb, 0.02);
      EXPECT_GT(g, 0.1) << ta << tb;
      EXPECT_LT(g, 20 * square) << ta << tb;
    }
}

TEST(SgemmPeak, RejectsBadArguments) {
  EXPECT_THROW(measure_sgemm_gflops(0, 0.1), std::invalid_argument);
  EXPECT_THROW(measure_sgemm_gflops(16, -1.0), std::invalid_argument);
  EXPECT_THROW(measure_sgemm_gflops(4, 0, 4, false, false, 0.1), std::invalid_argument);
}

}  // namespace
}  // namespace pb::kernels
