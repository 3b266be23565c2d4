// parabench selftest, kernels: every op of kernels/cpu run at fp32 and bf16
// on small fixed shapes and compared with the same op at fp64 on the same
// (rounded) inputs, output by output, by relative L2 distance. What this
// catches is the build and the machine (a BLAS or compiler that computes
// wrong, a vector path that misbehaves on this CPU), not the math: the unit
// tests check that against finite differences.
// Tolerance per precision: fp32 64 eps (7.6e-6), bf16 2 eps (0.0156): the
// outputs are stored at the precision (a bf16 rounding is up to 2^-9
// relative) after reductions in fp32 over at most a few hundred terms.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "harness/dtype.h"

namespace pb::selftest {

struct KernelCheck {
  std::string op;      // e.g. "matmul_backward.dweight"
  DType dtype = DType::f32;
  double error = 0;    // relative L2 distance to the fp64 op
  double tolerance = 0;
  bool pass = false;
};

double kernel_tolerance(DType t);
// The selftest's inputs: a splitmix64 hash of (seed, i).
uint64_t input_hash(uint64_t seed, size_t i);
std::vector<KernelCheck> check_cpu_kernels();

}  // namespace pb::selftest
