// Counter-based random numbers: Philox4x32-10 (J. K. Salmon, M. A. Moraes,
// R. O. Dror, D. E. Shaw, "Parallel random numbers: as easy as 1, 2, 3",
// SC'11; doi 10.1145/2063384.2063405) from Random123's philox.h, checked
// against its kat_vectors.
//
// Invariant: every draw is a pure function of (seed, stream, index). The
// 64-bit seed is the Philox key; the 128-bit counter is (block lo, block hi,
// stream lo, stream hi), as curand and PyTorch place their subsequence. No
// state is carried between draws, so a shard fills elements [a, b) of a tensor
// without generating [0, a), and every sharding of a tensor sees identical
// values. Index -> block maps (one Philox block = 128 bits):
//   u32(i): word i%4 of block i/4        u64(i), uniform(i): half i%2 of block i/2
//   normal(i): block i/2 -> Box-Muller pair (cos for even i, sin for odd i)
// Distinct purposes (init of each parameter, data, dropout) take distinct
// streams, e.g. stream_id("h.3.attn.c_attn.weight").
#pragma once
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <utility>

#include <Random123/philox.h>

#include "harness/dtype.h"

namespace pb::rng {

using Block = std::array<uint32_t, 4>;
using Key = std::array<uint32_t, 2>;

// Philox4x32 with R rounds (R = 10 is the standard generator) from Random123
// itself (Debian's librandom123-dev, the authors' reference implementation,
// __host__ __device__ under nvcc): the CPU and a GPU kernel draw identical
// values from one source. (Random123 defines a macro philox4x32, hence the name.)
template <int R = 10>
inline Block philox(Block ctr, Key key) {
  using G = r123::Philox4x32_R<R>;
  const typename G::ctr_type c = {{ctr[0], ctr[1], ctr[2], ctr[3]}};
  const typename G::key_type k = {{key[0], key[1]}};
  const typename G::ctr_type r = G()(c, k);
  return {r[0], r[1], r[2], r[3]};
}

// The 128 random bits of block `block` of stream `stream` under `seed`.
inline Block block(uint64_t seed, uint64_t stream, uint64_t block) {
  return philox<10>({uint32_t(block), uint32_t(block >> 32), uint32_t(stream), uint32_t(stream >> 32)},
                        {uint32_t(seed), uint32_t(seed >> 32)});
}

inline uint32_t u32(uint64_t seed, uint64_t stream, uint64_t index) {
  return block(seed, stream, index >> 2)[index & 3];
}

inline uint64_t u64(uint64_t seed, uint64_t stream, uint64_t index) {
  const Block b = block(seed, stream, index >> 1);
  const int h = int(index & 1) * 2;
  return uint64_t{b[h]} | (uint64_t{b[h + 1]} << 32);
}

// 53 random bits -> a double in [0, 1) (every value is a multiple of 2^-53).
constexpr double to_unit(uint64_t bits) { return double(bits >> 11) * 0x1.0p-53; }

inline double uniform(uint64_t seed, uint64_t stream, uint64_t index) {
  return to_unit(u64(seed, stream, index));
}

// Both standard normals of block `pair` (Box & Muller 1958): u1 in (0, 1] so
// log(u1) is finite, z0 = r cos(2 pi u2), z1 = r sin(2 pi u2), r = sqrt(-2 ln u1).
// Deterministic for a given libm; std::log/cos/sin of glibc are the same on
// every rank of one build.
inline std::pair<double, double> normal_pair(uint64_t seed, uint64_t stream, uint64_t pair) {
  const Block b = block(seed, stream, pair);
  const double u1 = to_unit(uint64_t{b[0]} | (uint64_t{b[1]} << 32)) + 0x1.0p-53;
  const double u2 = to_unit(uint64_t{b[2]} | (uint64_t{b[3]} << 32));
  const double r = std::sqrt(-2.0 * std::log(u1));
  const double theta = 6.283185307179586 * u2;
  return {r * std::cos(theta), r * std::sin(theta)};
}

inline double normal(uint64_t seed, uint64_t stream, uint64_t index) {
  const auto [z0, z1] = normal_pair(seed, stream, index >> 1);
  return (index & 1) ? z1 : z0;
}

// out[k] = cast<T>(mean + std * normal(seed, stream, first_index + k)), k < n.
// Rounded from double with dtype.h's cast<T>, so fill_normal<bf16> equals
// cast<bf16> of fill_normal<double> bit for bit.
template <class T>
void fill_normal(T* out, size_t n, double mean, double std, uint64_t seed, uint64_t stream,
                 uint64_t first_index);

// out[k] = cast<T>(lo + (hi - lo) * uniform(seed, stream, first_index + k)):
// in [lo, hi) in double; rounding to float/bf16 may land on hi.
template <class T>
void fill_uniform(T* out, size_t n, double lo, double hi, uint64_t seed, uint64_t stream,
                  uint64_t first_index);

// FNV-1a, 64-bit (Fowler, Noll, Vo): offset basis 0xcbf29ce484222325, prime
// 0x100000001b3. Stable across platforms and runs (unlike std::hash).
constexpr uint64_t fnv1a64(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : s) {
    h ^= uint8_t(c);
    h *= 0x100000001b3ull;
  }
  return h;
}

// The stream a named thing draws from: a parameter's name picks its stream.
constexpr uint64_t stream_id(std::string_view name) { return fnv1a64(name); }

}  // namespace pb::rng
