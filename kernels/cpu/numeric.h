// Internal helpers shared by the CPU kernels: load a stored value into the
// compute type A = acc_t<T>, store an A back to T, and the one accumulation
// rule of every backward output.
// Invariant: add_into() is the only way a backward kernel touches its output,
// so "d = T(A(d) + contribution), rounded once" holds everywhere by
// construction; callers must pass the complete contribution.
#pragma once
#include <cstddef>
#include <type_traits>

#include "harness/dtype.h"

namespace pb::kernels::detail {

template <class T>
inline acc_t<T> load(T x) {
  if constexpr (std::is_same_v<T, bf16>) return static_cast<float>(x);
  else return x;
}

template <class T>
inline T store(acc_t<T> x) {
  if constexpr (std::is_same_v<T, bf16>) return bf16(x);
  else return x;
}

// d = T(A(d) + c): one rounding per destination element.
template <class T>
inline void add_into(T& d, acc_t<T> c) {
  d = store<T>(load(d) + c);
}

}  // namespace pb::kernels::detail

// Explicit instantiation for the three storage types: FN(T) expands once each.
#define PB_KERNELS_FOR_EACH_DTYPE(FN) FN(double) FN(float) FN(::pb::bf16)
