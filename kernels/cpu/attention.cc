// Causal multi-head attention (Vaswani et al. 2017, eq. 1) that materializes
// the (T,T) probabilities per head: the reference form the blockwise kernels
// and ring attention are checked against. Q K^T, P V and the backward products
// run on BLAS over row blocks of queries; a block of rows [r0, r1) only touches
// keys [0, r1), so causality costs ~half the flops of a full product.
// Invariants: softmax subtracts the row max; the forward output uses the
// probabilities in A (att stores them rounded to T); every product is computed
// in A (fp32 copies for bf16) and one batch's dqkv is summed in A and added
// once. Deterministic for a fixed BLAS thread count.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "kernels/common/math.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/numeric.h"
#include "kernels/cpu/ops.h"

namespace pb::kernels {

using detail::add_into;
using detail::gemm;
using detail::load;
using detail::store;

namespace {

constexpr int kRowBlock = 128;

// A (rows, cols) matrix of A elements with row stride ld.
template <class A>
struct View {
  const A* p;
  int ld;
};

// The A-typed view of rows x cols elements at src (row stride ld): src itself
// for float/double, an fp32 copy in buf (rows x cols elements) for bf16.
template <class T>
View<acc_t<T>> view(const T* src, int rows, int cols, int ld, acc_t<T>* buf) {
  if constexpr (std::is_same_v<T, bf16>) {
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c) buf[size_t(r) * cols + c] = load(src[size_t(r) * ld + c]);
    return {buf, cols};
  } else {
    (void)buf;
    return {src, ld};
  }
}

// Workspace of one (batch, head) pass. Forward: S (T,T), O (T,hs) and, for
// bf16, fp32 copies of q, k, v (T,hs each). Backward: one batch's dqkv sum
// (T,3C), dS (T,T) and, for bf16, copies of q, k, v, dO (T,hs each) and P (T,T).
// T3C: one batch's qkv rows, Tn x (C + 2 KVH hs) (3C without grouped heads).
struct Sizes {
  size_t T2, th, T3C;
  bool copies;
};
template <class T>
Sizes sizes(int Tn, int C, int NH, int KVH) {
  const size_t hs = size_t(C / NH);
  return {size_t(Tn) * Tn, size_t(Tn) * hs, size_t(Tn) * (size_t(C) + 2 * size_t(KVH) * hs), std::is_same_v<T, bf16>};
}

// Row t of S (scores, length >= r1) becomes causal softmax probabilities over
// keys [0, t]; keys (t, r1) are zeroed.
template <class A>
void softmax_row(A* s, int t, int r1, A scale) {
  A mx = -std::numeric_limits<A>::infinity();
  for (int j = 0; j <= t; ++j) mx = math::max_a(mx, s[j] * scale);
  A sum = 0;
  for (int j = 0; j <= t; ++j) {
    s[j] = math::exp_a(s[j] * scale - mx);
    sum += s[j];
  }
  const A inv = A(1) / sum;
  for (int j = 0; j <= t; ++j) s[j] *= inv;
  for (int j = t + 1; j < r1; ++j) s[j] = A(0);
}

}  // namespace

template <class T>
size_t attention_workspace_elems(int Tn, int C, int NH) {
  return attention_workspace_elems_gqa<T>(Tn, C, NH, NH);
}

template <class T>
void attention_forward(T* out, T* att, const T* qkv, int B, int Tn, int C, int NH, acc_t<T>* ws) {
  attention_forward_gqa(out, att, qkv, B, Tn, C, NH, NH, ws);
}

template <class T>
void attention_backward(T* dqkv, T* datt, const T* dout, const T* qkv, const T* att, int B, int Tn,
                        int C, int NH, acc_t<T>* ws) {
  attention_backward_gqa(dqkv, datt, dout, qkv, att, B, Tn, C, NH, NH, ws);
}

template <class T>
size_t attention_workspace_elems_gqa(int Tn, int C, int NH, int KVH) {
  const Sizes z = sizes<T>(Tn, C, NH, KVH);
  const size_t fwd = z.T2 + z.th + (z.copies ? 3 * z.th : 0);
  const size_t bwd = z.T3C + z.T2 + (z.copies ? 4 * z.th + z.T2 : 0);
  return std::max(fwd, bwd);
}

// Query head h reads key/value head h / (NH / KVH) (grouped-query attention,
// Ainslie et al. 2023; KVH = NH: multi-head, the same arithmetic as before).
template <class T>
void attention_forward_gqa(T* out, T* att, const T* qkv, int B, int Tn, int C, int NH, int KVH, acc_t<T>* ws) {
  using A = acc_t<T>;
  const int hs = C / NH, kvC = KVH * hs, C3 = C + 2 * kvC, group = NH / KVH;
  const A scale = math::attention_scale<A>(hs);
  const Sizes z = sizes<T>(Tn, C, NH, KVH);
  A* const S = ws;
  A* const O = S + z.T2;
  A* const qb = O + z.th;
  A* const kb = qb + z.th;
  A* const vb = kb + z.th;
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h) {
      const T* base = qkv + size_t(b) * Tn * C3 + h * hs;
      const T* kvbase = qkv + size_t(b) * Tn * C3 + C + (h / group) * hs;
      const auto q = view(base, Tn, hs, C3, qb), k = view(kvbase, Tn, hs, C3, kb),
                 v = view(kvbase + kvC, Tn, hs, C3, vb);
      T* a = att + (size_t(b) * NH + h) * Tn * Tn;
      for (int r0 = 0; r0 < Tn; r0 += kRowBlock) {
        const int r1 = std::min(Tn, r0 + kRowBlock), rb = r1 - r0;
        A* s = S + size_t(r0) * Tn;
        gemm(false, true, rb, r1, hs, q.p + size_t(r0) * q.ld, q.ld, k.p, k.ld, A(0), s, Tn);
        for (int t = r0; t < r1; ++t) {
          A* row = S + size_t(t) * Tn;
          softmax_row(row, t, r1, scale);
          T* arow = a + size_t(t) * Tn;
          for (int j = 0; j < Tn; ++j) arow[j] = store<T>(j <= t ? row[j] : A(0));
        }
        gemm(false, false, rb, hs, r1, s, Tn, v.p, v.ld, A(0), O + size_t(r0) * hs, hs);
      }
      T* o = out + size_t(b) * Tn * C + h * hs;
      for (int t = 0; t < Tn; ++t)
        for (int c = 0; c < hs; ++c) o[size_t(t) * C + c] = store<T>(O[size_t(t) * hs + c]);
    }
}

// Per head, with P = att, dO = dout: dV = P^T dO; dP = dO V^T;
// dS = P o (dP - rowsum(P o dP)) * scale; dQ = dS K; dK = dS^T Q.
// A key/value head's gradient sums its group's query heads in head order (in A).
template <class T>
void attention_backward_gqa(T* dqkv, T* datt, const T* dout, const T* qkv, const T* att, int B, int Tn,
                            int C, int NH, int KVH, acc_t<T>* ws) {
  using A = acc_t<T>;
  const int hs = C / NH, kvC = KVH * hs, C3 = C + 2 * kvC, group = NH / KVH;
  const A scale = math::attention_scale<A>(hs);
  const Sizes z = sizes<T>(Tn, C, NH, KVH);
  A* const g = ws;
  A* const dS = g + z.T3C;
  A* const qb = dS + z.T2;
  A* const kb = qb + z.th;
  A* const vb = kb + z.th;
  A* const ob = vb + z.th;
  A* const pb = ob + z.th;
  for (int b = 0; b < B; ++b) {
    std::fill(g, g + z.T3C, A(0));
    for (int h = 0; h < NH; ++h) {
      const T* base = qkv + size_t(b) * Tn * C3 + h * hs;
      const T* kvbase = qkv + size_t(b) * Tn * C3 + C + (h / group) * hs;
      const auto q = view(base, Tn, hs, C3, qb), k = view(kvbase, Tn, hs, C3, kb),
                 v = view(kvbase + kvC, Tn, hs, C3, vb),
                 dO = view(dout + size_t(b) * Tn * C + h * hs, Tn, hs, C, ob),
                 P = view(att + (size_t(b) * NH + h) * Tn * Tn, Tn, Tn, Tn, pb);
      A* gq = g + h * hs;
      A* gk = g + C + (h / group) * hs;
      A* gv = gk + kvC;
      for (int r0 = 0; r0 < Tn; r0 += kRowBlock) {
        const int r1 = std::min(Tn, r0 + kRowBlock), rb = r1 - r0;
        const A* p = P.p + size_t(r0) * P.ld;
        A* ds = dS + size_t(r0) * Tn;
        gemm(true, false, r1, hs, rb, p, P.ld, dO.p + size_t(r0) * dO.ld, dO.ld, A(1), gv, C3);
        gemm(false, true, rb, r1, hs, dO.p + size_t(r0) * dO.ld, dO.ld, v.p, v.ld, A(0), ds, Tn);
        for (int t = r0; t < r1; ++t) {
          const A* prow = P.p + size_t(t) * P.ld;
          A* row = dS + size_t(t) * Tn;
          if (datt) {
            T* drow = datt + ((size_t(b) * NH + h) * Tn + t) * Tn;
            for (int j = 0; j < Tn; ++j) drow[j] = store<T>(j <= t ? row[j] : A(0));
          }
          A pdp = 0;
          for (int j = 0; j <= t; ++j) pdp += prow[j] * row[j];
          for (int j = 0; j <= t; ++j) row[j] = prow[j] * (row[j] - pdp) * scale;
          for (int j = t + 1; j < r1; ++j) row[j] = A(0);
        }
        gemm(false, false, rb, hs, r1, ds, Tn, k.p, k.ld, A(1), gq + size_t(r0) * C3, C3);
        gemm(true, false, r1, hs, rb, ds, Tn, q.p + size_t(r0) * q.ld, q.ld, A(1), gk, C3);
      }
    }
    T* dst = dqkv + size_t(b) * Tn * C3;
    for (size_t i = 0; i < z.T3C; ++i) add_into(dst[i], g[i]);
  }
}

#define PB_INSTANTIATE(T)                                                                        \
  template size_t attention_workspace_elems<T>(int, int, int);                                   \
  template size_t attention_workspace_elems_gqa<T>(int, int, int, int);                          \
  template void attention_forward_gqa<T>(T*, T*, const T*, int, int, int, int, int, acc_t<T>*);  \
  template void attention_backward_gqa<T>(T*, T*, const T*, const T*, const T*, int, int, int, int, \
                                          int, acc_t<T>*);                                       \
  template void attention_forward<T>(T*, T*, const T*, int, int, int, int, acc_t<T>*);           \
  template void attention_backward<T>(T*, T*, const T*, const T*, const T*, int, int, int, int,  \
                                      acc_t<T>*);
PB_KERNELS_FOR_EACH_DTYPE(PB_INSTANTIATE)
#undef PB_INSTANTIATE

}  // namespace pb::kernels
