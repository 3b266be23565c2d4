// Shared helpers of the CPU kernel tests: seeded inputs, dtype conversion, the
// finite-difference gradient check and the one normwise error measure.
// Invariant: inputs from bf16_exact() are representable in bf16, so the fp64,
// fp32 and bf16 runs of an op see bit-identical inputs and differ only by the
// arithmetic under test.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "harness/dtype.h"

namespace pb::kernels::testing {

// Central differences in fp64 with h = 1e-5: truncation error h^2/6 |f'''|
// ~ 1e-11 and cancellation error ~ eps64 |L| / h ~ 1e-10 for |L| <= 10, both
// far below this bound (normalized by max|dL/dx|); a wrong formula errs O(1).
inline constexpr double kFdTol = 1e-6;
inline constexpr double kFdStep = 1e-5;

// fp32 vs fp64, normwise: the ops sum at most a few hundred terms, whose
// rounding error is at most K u (u = eps/2) and typically sqrt(K) u; 128 eps32
// (1.5e-5) covers K u for K <= 256.
inline constexpr double kF32Tol = 128 * 1.1920928955078125e-07;
// bf16 vs fp64, normwise: outputs are computed in fp32 and rounded once to
// bf16 (relative error <= u = eps/2 = 2^-8); ops whose backward re-reads a
// rounded forward result (probs, att, out) pick up at most about one more u.
// Measured: <= 0.0032 on these tests.
inline constexpr double kBf16Tol = 0.0078125;  // eps_bf16 = 2u

inline std::vector<double> random_vec(size_t n, uint64_t seed, double lo = -1, double hi = 1) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

inline std::vector<double> bf16_exact(size_t n, uint64_t seed, double lo = -1, double hi = 1) {
  auto v = random_vec(n, seed, lo, hi);
  for (auto& x : v) x = double(bf16(x));
  return v;
}

inline std::vector<int32_t> random_ints(size_t n, int32_t hi, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> u(0, hi - 1);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

template <class T>
std::vector<T> to(const std::vector<double>& v) {
  std::vector<T> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = cast<T>(v[i]);
  return r;
}

template <class T>
std::vector<double> to_double(const std::vector<T>& v) {
  std::vector<double> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = cast<double>(v[i]);
  return r;
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

inline std::vector<double> minus(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> r(a.size());
  for (size_t i = 0; i < a.size(); ++i) r[i] = a[i] - b[i];
  return r;
}

inline double max_abs(const std::vector<double>& a) {
  double m = 0;
  for (double x : a) m = std::max(m, std::abs(x));
  return m;
}

// max_i |a_i - ref_i| / max_i |ref_i|.
inline double rel_err(const std::vector<double>& a, const std::vector<double>& ref) {
  EXPECT_EQ(a.size(), ref.size());
  double e = 0;
  for (size_t i = 0; i < a.size() && i < ref.size(); ++i) e = std::max(e, std::abs(a[i] - ref[i]));
  const double s = max_abs(ref);
  return s > 0 ? e / s : e;
}

// Checks analytic = dL/dx by central differences on up to `checks` indices of
// x (all if x is small; else a seeded random subset). loss() recomputes L from
// the current contents of x; x is restored after each probe.
inline void expect_gradient(std::vector<double>& x, const std::vector<double>& analytic,
                            const std::function<double()>& loss, const std::string& what,
                            size_t checks = 96, uint64_t seed = 7) {
  ASSERT_EQ(x.size(), analytic.size()) << what;
  std::vector<size_t> idx(x.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  if (idx.size() > checks) {
    std::mt19937_64 rng(seed);
    std::shuffle(idx.begin(), idx.end(), rng);
    idx.resize(checks);
  }
  const double scale = std::max(max_abs(analytic), 1e-300);
  ASSERT_GT(max_abs(analytic), 0.0) << what << ": gradient is identically zero";
  double worst = 0;
  for (size_t i : idx) {
    const double x0 = x[i];
    x[i] = x0 + kFdStep;
    const double lp = loss();
    x[i] = x0 - kFdStep;
    const double lm = loss();
    x[i] = x0;
    const double fd = (lp - lm) / (2 * kFdStep);
    worst = std::max(worst, std::abs(fd - analytic[i]) / scale);
  }
  EXPECT_LE(worst, kFdTol) << what << ": finite-difference mismatch";
}

}  // namespace pb::kernels::testing
