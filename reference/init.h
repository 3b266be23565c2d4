// GPT-2 initialization from a counter-based RNG: the value of element j of
// parameter p is normal(seed, stream_id(p.name), j) * std (or 0 / 1), a pure
// function of (seed, name, index) — so any shard [lo, hi) of the flat vector
// inits itself without the full tensor and every sharding sees the same values.
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/common/device_ops.h"
#include "reference/layout.h"

namespace pb {

// Writes the init values of flat elements [lo, hi) to out[0 .. hi-lo), each
// computed in double and rounded once to U.
template <class U>
void init_params(const ParamLayout& layout, uint64_t seed, int64_t lo, int64_t hi, U* out);

// The same into `ops`' memory: in place on the host, else drawn on the host
// (the same values) and moved.
template <class U, class T>
void init_params(const kernels::DeviceOps<T>& ops, const ParamLayout& layout, uint64_t seed, int64_t lo, int64_t hi,
                 U* out) {
  if (ops.is_host()) return init_params<U>(layout, seed, lo, hi, out);
  if (hi <= lo) return;
  std::vector<U> host(static_cast<size_t>(hi - lo));
  init_params<U>(layout, seed, lo, hi, host.data());
  ops.to_device(out, host.data(), host.size() * sizeof(U));
}

}  // namespace pb
