// The selftest's kernel checks on this build: every op at fp32 and bf16
// within its tolerance of fp64, and a wrong result would be seen (the
// tolerance is far below the error of a plainly wrong kernel).
#include "suites/selftest/kernel_checks.h"

#include <gtest/gtest.h>

#include <set>

namespace pb::selftest {
namespace {

TEST(SelftestKernels, EveryOpAtBothPrecisionsIsWithinItsTolerance) {
  const auto checks = check_cpu_kernels();
  std::set<std::string> ops;
  for (const auto& c : checks) {
    ops.insert(c.op);
    EXPECT_TRUE(c.pass) << c.op << " " << dtype_name(c.dtype) << ": " << c.error << " > " << c.tolerance;
    EXPECT_GT(c.error, 0.0) << c.op << " " << dtype_name(c.dtype) << ": no rounding at all is suspicious";
  }
  EXPECT_EQ(checks.size(), 2 * ops.size());
  for (const char* op : {"encoder_forward", "layernorm_backward.dinp", "matmul_backward.dweight",
                         "attention_backward.dqkv", "gelu_backward", "crossentropy_backward", "adamw_step.params"})
    EXPECT_TRUE(ops.count(op)) << op;
}

TEST(SelftestKernels, TolerancesAreStated) {
  EXPECT_DOUBLE_EQ(kernel_tolerance(DType::f32), 64 * 1.1920928955078125e-07);
  EXPECT_DOUBLE_EQ(kernel_tolerance(DType::bf16), 2 * 0.0078125);
}

}  // namespace
}  // namespace pb::selftest
