// Single-thread sgemm rate measurement (see peak.h).
// Invariants: the timed region holds only sgemm calls on warm, initialized
// buffers; the flop count is 2 m n k per call (one multiply + one add per term);
// time is the calling thread's CPU time (one BLAS thread runs in the caller),
// so other processes sharing the core do not deflate the peak.
#include "kernels/cpu/peak.h"

#include <cblas.h>

#include <ctime>
#include <stdexcept>
#include <string>
#include <vector>

namespace pb::kernels {

double measure_sgemm_gflops(int m, int n, int k, bool trans_a, bool trans_b, double min_seconds) {
  if (m <= 0 || n <= 0 || k <= 0)
    throw std::invalid_argument("measure_sgemm_gflops: m, n, k must be > 0, got " + std::to_string(m) + ", " +
                                std::to_string(n) + ", " + std::to_string(k));
  if (!(min_seconds >= 0))
    throw std::invalid_argument("measure_sgemm_gflops: min_seconds must be >= 0");
  std::vector<float> a(size_t(m) * k), b(size_t(k) * n), c(size_t(m) * n);
  for (size_t i = 0; i < a.size(); ++i) a[i] = float(int(i % 17) - 8) * 0.0625f;  // small, sign-varying:
  for (size_t i = 0; i < b.size(); ++i) b[i] = float(int(i % 13) - 6) * 0.125f;   // no overflow, no denormals
  const int saved = openblas_get_num_threads();
  openblas_set_num_threads(1);
  auto call = [&] {
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, m, n, k,
                1.0f, a.data(), trans_a ? m : k, b.data(), trans_b ? k : n, 0.0f, c.data(), n);
  };
  call();  // warm-up: page in buffers, spin up caches
  auto thread_seconds = [] {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
  };
  const double t0 = thread_seconds();
  long calls = 0;
  double elapsed = 0;
  do {
    call();
    ++calls;
    elapsed = thread_seconds() - t0;
  } while (elapsed < min_seconds || elapsed <= 0);
  openblas_set_num_threads(saved);
  return 2.0 * double(m) * n * k * double(calls) / elapsed * 1e-9;
}

double measure_sgemm_gflops(int n, double min_seconds) {
  if (n <= 0) throw std::invalid_argument("measure_sgemm_gflops: n must be > 0, got " + std::to_string(n));
  return measure_sgemm_gflops(n, n, n, false, false, min_seconds);
}

}  // namespace pb::kernels
