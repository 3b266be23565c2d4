// Rows of a table (a vocabulary shard's lookup, position rows, biases) and a
// vocabulary shard's softmax cross-entropy: the CPU side of ops.h's pieces of
// a tensor-parallel rank.
// Invariants: every backward adds each destination row once (summed in A in
// index order first, as encoder_backward does); the cross-entropy's per-element
// math is kernels/common/math.h's, in the fused kernel's order (crossentropy.cc),
// so one shard holding the whole vocabulary computes what that kernel does.
#include <algorithm>
#include <limits>
#include <numeric>
#include <vector>

#include "kernels/common/math.h"
#include "kernels/cpu/numeric.h"
#include "kernels/cpu/ops.h"

namespace pb::kernels {

using detail::add_into;
using detail::load;
using detail::store;

template <class T>
void embedding_lookup(T* out, const int32_t* idx, const T* table, int N, int C, int64_t first, int rows) {
  for (int n = 0; n < N; ++n) {
    T* o = out + size_t(n) * C;
    const int64_t r = int64_t(idx[n]) - first;
    if (r >= 0 && r < rows)
      std::copy(table + size_t(r) * C, table + size_t(r + 1) * C, o);
    else
      std::fill(o, o + C, store<T>(acc_t<T>(0)));
  }
}

template <class T>
void add_rows(T* x, const T* table, const int32_t* idx, int N, int C) {
  for (int n = 0; n < N; ++n) {
    T* r = x + size_t(n) * C;
    const T* t = table + (idx ? size_t(idx[n]) * C : 0);
    for (int c = 0; c < C; ++c) r[c] = store<T>(math::add(load(r[c]), load(t[c])));
  }
}

template <class T>
void add_rows_backward(T* dtable, const T* dout, const int32_t* idx, int N, int C, int64_t first, int rows) {
  using A = acc_t<T>;
  std::vector<A> acc(static_cast<size_t>(C));
  auto add_run = [&](T* dst) {
    for (int c = 0; c < C; ++c) add_into(dst[c], acc[size_t(c)]);
  };
  if (!idx) {  // a bias: column sums in row order
    if (N == 0) return;
    std::fill(acc.begin(), acc.end(), A(0));
    for (int n = 0; n < N; ++n)
      for (int c = 0; c < C; ++c) acc[size_t(c)] += load(dout[size_t(n) * C + c]);
    return add_run(dtable);
  }
  std::vector<int> order(static_cast<size_t>(N));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [idx](int a, int b) { return idx[a] < idx[b]; });
  for (size_t i = 0; i < order.size();) {
    const int32_t r = idx[order[i]];
    std::fill(acc.begin(), acc.end(), A(0));
    for (; i < order.size() && idx[order[i]] == r; ++i) {
      const T* d = dout + size_t(order[i]) * C;
      for (int c = 0; c < C; ++c) acc[size_t(c)] += load(d[c]);
    }
    const int64_t row = int64_t(r) - first;
    if (row >= 0 && row < rows) add_run(dtable + size_t(row) * C);
  }
}

template <class T>
void vocab_logit_max(acc_t<T>* mx, const T* logits, int N, int Vr, int valid) {
  using A = acc_t<T>;
  for (int n = 0; n < N; ++n) {
    const T* x = logits + size_t(n) * Vr;
    A m = math::neg_inf<A>();
    for (int v = 0; v < valid; ++v) m = math::max_a(m, load(x[v]));
    mx[n] = m;
  }
}

template <class T>
void vocab_sum_exp(acc_t<T>* sum, acc_t<T>* target_logit, const T* logits, const acc_t<T>* mx,
                   const int32_t* targets, int64_t first, int N, int Vr, int valid) {
  using A = acc_t<T>;
  for (int n = 0; n < N; ++n) {
    const T* x = logits + size_t(n) * Vr;
    A s = 0;
    for (int v = 0; v < valid; ++v) s += math::exp_a(load(x[v]) - mx[n]);
    sum[n] = s;
    const int64_t t = int64_t(targets[n]) - first;
    target_logit[n] = t >= 0 && t < valid ? load(x[t]) : A(0);
  }
}

template <class T>
void vocab_softmax_loss(acc_t<T>* losses, T* probs, const T* logits, const acc_t<T>* mx, const acc_t<T>* sum,
                        const acc_t<T>* target_logit, int N, int Vr, int valid) {
  using A = acc_t<T>;
  for (int n = 0; n < N; ++n) {
    const T* x = logits + size_t(n) * Vr;
    T* p = probs + size_t(n) * Vr;
    const A inv = A(1) / sum[n];
    for (int v = 0; v < valid; ++v) p[v] = store<T>(math::softmax_prob(load(x[v]), mx[n], inv));
    for (int v = valid; v < Vr; ++v) p[v] = store<T>(A(0));
    losses[n] = math::crossentropy_loss(mx[n], target_logit[n], sum[n]);
  }
}

template <class T>
void vocab_crossentropy_backward(T* dlogits, const T* probs, const int32_t* targets, int64_t first, double dloss,
                                 int N, int Vr, int valid) {
  using A = acc_t<T>;
  const A g = static_cast<A>(dloss);
  for (int n = 0; n < N; ++n) {
    const T* p = probs + size_t(n) * Vr;
    T* d = dlogits + size_t(n) * Vr;
    const int64_t t = int64_t(targets[n]) - first;
    for (int v = 0; v < valid; ++v) add_into(d[v], math::crossentropy_grad(load(p[v]), v == t, g));
  }
}

#define PB_INSTANTIATE(T)                                                                                       \
  template void embedding_lookup<T>(T*, const int32_t*, const T*, int, int, int64_t, int);                      \
  template void add_rows<T>(T*, const T*, const int32_t*, int, int);                                           \
  template void add_rows_backward<T>(T*, const T*, const int32_t*, int, int, int64_t, int);                    \
  template void vocab_logit_max<T>(acc_t<T>*, const T*, int, int, int);                                        \
  template void vocab_sum_exp<T>(acc_t<T>*, acc_t<T>*, const T*, const acc_t<T>*, const int32_t*, int64_t, int, \
                                 int, int);                                                                    \
  template void vocab_softmax_loss<T>(acc_t<T>*, T*, const T*, const acc_t<T>*, const acc_t<T>*,               \
                                      const acc_t<T>*, int, int, int);                                         \
  template void vocab_crossentropy_backward<T>(T*, const T*, const int32_t*, int64_t, double, int, int, int);
PB_KERNELS_FOR_EACH_DTYPE(PB_INSTANTIATE)
#undef PB_INSTANTIATE

}  // namespace pb::kernels
