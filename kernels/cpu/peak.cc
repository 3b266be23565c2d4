// Single-thread sgemm peak measurement (see peak.h).
// Invariant: the timed region holds only sgemm calls on warm, initialized
// buffers; the flop count is 2 n^3 per call (one multiply + one add per term).
#include "kernels/cpu/peak.h"

#include <cblas.h>

#include <chrono>
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
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  long calls = 0;
  double elapsed = 0;
  do {
    call();
    ++calls;
    elapsed = std::chrono::duration<double>(clock::now() - t0).count();
  } while (elapsed < min_seconds);
  openblas_set_num_threads(saved);
  return 2.0 * double(n) * n * n * double(calls) / elapsed * 1e-9;
}

}  // namespace pb::kernels
