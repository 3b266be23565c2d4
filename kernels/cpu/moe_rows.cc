// The rows of a mixture-of-experts MLP (kernels/cpu/ops.h): admitted tokens
// scattered to their experts' rows, the experts' outputs combined back with
// the router weights, and that combine's backward.
// Invariants: the sums run over a token's choices best first (j order) and
// over a row's columns in order, in A, each output rounded once; the
// per-element math is kernels/common/math.h's, which the CUDA kernels share.
#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/common/math.h"
#include "kernels/cpu/numeric.h"
#include "kernels/cpu/ops.h"

namespace pb::kernels {

using detail::add_into;
using detail::load;
using detail::store;

namespace {
// Row (n, j) of the expert-major buffers, or -1 for a dropped choice.
inline int64_t moe_row(const int32_t* choice, const int32_t* slot, int i, int rows) {
  return slot[i] < 0 ? -1 : int64_t(choice[i]) * rows + slot[i];
}
}  // namespace

template <class T>
void moe_scatter_rows(T* xe, const T* x, const int32_t* choice, const int32_t* slot, int N, int K, int C,
                      int rows) {
  for (int n = 0; n < N; ++n)
    for (int j = 0; j < K; ++j) {
      const int64_t r = moe_row(choice, slot, n * K + j, rows);
      if (r < 0) continue;
      std::memcpy(static_cast<void*>(xe + size_t(r) * C), x + size_t(n) * C, size_t(C) * sizeof(T));
    }
}

template <class T>
void moe_combine(T* out, const T* y, const int32_t* choice, const int32_t* slot, const acc_t<T>* weight, int N,
                 int K, int C, int rows, bool accumulate) {
  using A = acc_t<T>;
  std::vector<A> acc(static_cast<size_t>(C));
  for (int n = 0; n < N; ++n) {
    std::fill(acc.begin(), acc.end(), A(0));
    bool any = false;
    for (int j = 0; j < K; ++j) {
      const int64_t r = moe_row(choice, slot, n * K + j, rows);
      if (r < 0) continue;
      any = true;
      const T* yr = y + size_t(r) * C;
      if (weight) {
        const A w = weight[size_t(n) * K + j];
        for (int c = 0; c < C; ++c) acc[size_t(c)] = math::weighted_add(acc[size_t(c)], w, load(yr[c]));
      } else {
        for (int c = 0; c < C; ++c) acc[size_t(c)] = math::add(acc[size_t(c)], load(yr[c]));
      }
    }
    T* o = out + size_t(n) * C;
    if (!accumulate)
      for (int c = 0; c < C; ++c) o[c] = store<T>(acc[size_t(c)]);
    else if (any)
      for (int c = 0; c < C; ++c) add_into(o[c], acc[size_t(c)]);
  }
}

template <class T>
void moe_combine_backward(T* dy, acc_t<T>* dw, const T* dout, const T* y, const int32_t* choice,
                          const int32_t* slot, const acc_t<T>* weight, int N, int K, int C, int rows) {
  using A = acc_t<T>;
  for (int n = 0; n < N; ++n) {
    const T* d = dout + size_t(n) * C;
    for (int j = 0; j < K; ++j) {
      const size_t i = size_t(n) * K + j;
      const int64_t r = moe_row(choice, slot, int(i), rows);
      dw[i] = A(0);
      if (r < 0) continue;
      const A w = weight[i];
      const T* yr = y + size_t(r) * C;
      T* g = dy + size_t(r) * C;
      A dot = 0;
      for (int c = 0; c < C; ++c) {
        dot = math::weighted_add(dot, load(d[c]), load(yr[c]));
        g[c] = store<T>(w * load(d[c]));
      }
      dw[i] = dot;
    }
  }
}

#define PB_INSTANTIATE(T)                                                                                         \
  template void moe_scatter_rows<T>(T*, const T*, const int32_t*, const int32_t*, int, int, int, int);           \
  template void moe_combine<T>(T*, const T*, const int32_t*, const int32_t*, const acc_t<T>*, int, int, int, int, \
                               bool);                                                                            \
  template void moe_combine_backward<T>(T*, acc_t<T>*, const T*, const T*, const int32_t*, const int32_t*,        \
                                        const acc_t<T>*, int, int, int, int);
PB_KERNELS_FOR_EACH_DTYPE(PB_INSTANTIATE)
#undef PB_INSTANTIATE

}  // namespace pb::kernels
