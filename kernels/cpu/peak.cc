// Single-thread sgemm peak measurement (see peak.h).
// Invariants: the timed region holds only sgemm calls on warm, initialized
// buffers; the flop count is 2 n^3 per call (one multiply + one add per term);
// time is the calling thread's CPU time (one BLAS thread runs in the caller),
// so other processes sharing the core do not deflate the peak.
#include "kernels/cpu/peak.h"

#include <cblas.h>

#include <ctime>
#include <stdexcept>
#include <string>
#include <vector>

namespace pb::kernels {

double measure_sgemm_gflops(int n, double min_seconds) {
  if (n <= 0) throw std::invalid_argument("measure_sgemm_gflops: n must be > 0, got " + std::to_string(n));
  if (!(min_seconds >= 0))
    throw std::invalid_argument("measure_sgemm_gflops: min_seconds must be >= 0");
  const size_t nn = size_t(n) * n;
  std::vector<float> a(nn), b(nn), c(nn);
  for (size_t i = 0; i < nn; ++i) {  // small, sign-varying values: no overflow, no denormals
    a[i] = float(int(i % 17) - 8) * 0.0625f;
    b[i] = float(int(i % 13) - 6) * 0.125f;
  }
  const int saved = openblas_get_num_threads();
  openblas_set_num_threads(1);
  auto call = [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n,
                0.0f, c.data(), n);
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
  return 2.0 * double(n) * n * n * double(calls) / elapsed * 1e-9;
}

}  // namespace pb::kernels
