// Bulk fills over the counter-based generator of rng.h. A fill of [a, b) is
// the slice [a, b) of a fill of [0, n): an odd first index starts with the sin
// half of its Box-Muller pair, so pairs never straddle two shards differently.
#include "harness/rng.h"

namespace pb::rng {

template <class T>
void fill_normal(T* out, size_t n, double mean, double std, uint64_t seed, uint64_t stream,
                 uint64_t first_index) {
  size_t k = 0;
  uint64_t i = first_index;
  if (n > 0 && (i & 1)) {
    out[k++] = cast<T>(mean + std * normal_pair(seed, stream, i >> 1).second);
    ++i;
  }
  for (; k + 1 < n; k += 2, i += 2) {
    const auto [z0, z1] = normal_pair(seed, stream, i >> 1);
    out[k] = cast<T>(mean + std * z0);
    out[k + 1] = cast<T>(mean + std * z1);
  }
  if (k < n) out[k] = cast<T>(mean + std * normal_pair(seed, stream, i >> 1).first);
}

template <class T>
void fill_uniform(T* out, size_t n, double lo, double hi, uint64_t seed, uint64_t stream,
                  uint64_t first_index) {
  const double width = hi - lo;
  for (size_t k = 0; k < n; ++k) out[k] = cast<T>(lo + width * uniform(seed, stream, first_index + k));
}

template void fill_normal<double>(double*, size_t, double, double, uint64_t, uint64_t, uint64_t);
template void fill_normal<float>(float*, size_t, double, double, uint64_t, uint64_t, uint64_t);
template void fill_normal<bf16>(bf16*, size_t, double, double, uint64_t, uint64_t, uint64_t);
template void fill_uniform<double>(double*, size_t, double, double, uint64_t, uint64_t, uint64_t);
template void fill_uniform<float>(float*, size_t, double, double, uint64_t, uint64_t, uint64_t);
template void fill_uniform<bf16>(bf16*, size_t, double, double, uint64_t, uint64_t, uint64_t);

}  // namespace pb::rng
