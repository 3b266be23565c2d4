// Token + learned position embedding (GPT-2), forward and backward.
// Invariant: the backward adds every destination row exactly once. Rows of
// dwte hit by several tokens are summed in A first (positions visited in
// (b, t) order after a stable sort by token: add_rows_backward,
// vocab_parallel.cc), so the result is deterministic and bf16 destinations
// are rounded once, as ops.h requires.
#include <algorithm>
#include <climits>
#include <vector>

#include "kernels/common/math.h"
#include "kernels/cpu/numeric.h"
#include "kernels/cpu/ops.h"

namespace pb::kernels {

using detail::add_into;
using detail::load;
using detail::store;

template <class T>
void encoder_forward(T* out, const int32_t* inp, const T* wte, const T* wpe, int B, int Tn, int C) {
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < Tn; ++t) {
      T* o = out + (size_t(b) * Tn + t) * C;
      const T* te = wte + size_t(inp[size_t(b) * Tn + t]) * C;
      const T* pe = wpe + size_t(t) * C;
      for (int c = 0; c < C; ++c) o[c] = store<T>(math::add(load(te[c]), load(pe[c])));
    }
  }
}

template <class T>
void encoder_backward(T* dwte, T* dwpe, const T* dout, const int32_t* inp, int B, int Tn, int C) {
  using A = acc_t<T>;
  std::vector<A> acc(static_cast<size_t>(C));
  if (dwpe) {
    for (int t = 0; t < Tn; ++t) {
      std::fill(acc.begin(), acc.end(), A(0));
      for (int b = 0; b < B; ++b) {
        const T* d = dout + (size_t(b) * Tn + t) * C;
        for (int c = 0; c < C; ++c) acc[c] += load(d[c]);
      }
      T* dst = dwpe + size_t(t) * C;
      for (int c = 0; c < C; ++c) add_into(dst[c], acc[c]);
    }
  }
  // dwte: the rows of the tokens, each summed over its positions in (b, t) order.
  if (dwte) add_rows_backward(dwte, dout, inp, B * Tn, C, 0, INT_MAX);
}

#define PB_INSTANTIATE(T)                                                                         \
  template void encoder_forward<T>(T*, const int32_t*, const T*, const T*, int, int, int);        \
  template void encoder_backward<T>(T*, T*, const T*, const int32_t*, int, int, int);
PB_KERNELS_FOR_EACH_DTYPE(PB_INSTANTIATE)
#undef PB_INSTANTIATE

}  // namespace pb::kernels
