#include "reference/init.h"

#include "harness/dtype.h"
#include "harness/rng.h"

namespace pb {

using rng::normal;
using rng::stream_id;

template <class U>
void init_params(const ParamLayout& layout, uint64_t seed, int64_t lo, int64_t hi, U* out) {
  for (const auto& p : layout.params()) {
    int64_t b = std::max(lo, p.offset), e = std::min(hi, p.offset + p.numel);
    if (b >= e) continue;
    uint64_t stream = stream_id(p.name);
    for (int64_t i = b; i < e; ++i) {
      // A tensor-parallel shard draws its elements' full-tensor values.
      const int64_t j = p.replicated ? i - p.offset : p.full_index(i - p.offset);
      double v = j < 0 || p.init == InitKind::zeros ? 0.0  // vocabulary padding stays zero
                 : p.init == InitKind::ones         ? 1.0
                                                    : p.init_std * normal(seed, stream, uint64_t(j));
      out[i - lo] = cast<U>(v);
    }
  }
}

template void init_params<double>(const ParamLayout&, uint64_t, int64_t, int64_t, double*);
template void init_params<float>(const ParamLayout&, uint64_t, int64_t, int64_t, float*);
template void init_params<bf16>(const ParamLayout&, uint64_t, int64_t, int64_t, bf16*);

}  // namespace pb
