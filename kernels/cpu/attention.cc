// Naive causal multi-head attention (Vaswani et al. 2017, eq. 1) keeping the
// full (T,T) probability matrix per head: the simple, obviously-correct form
// the blockwise kernels and ring attention are checked against.
// Invariants: softmax subtracts the row max; the forward output uses the
// probabilities in A (att stores them rounded to T); the backward sums all
// contributions to one batch's dqkv in A and adds them once.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/numeric.h"
#include "kernels/cpu/ops.h"

namespace pb::kernels {

using detail::add_into;
using detail::load;
using detail::store;

template <class T>
void attention_forward(T* out, T* att, const T* qkv, int B, int Tn, int C, int NH) {
  using A = acc_t<T>;
  const int hs = C / NH, C3 = 3 * C;
  const A scale = A(1) / std::sqrt(A(hs));
  std::vector<A> p(static_cast<size_t>(Tn)), o(static_cast<size_t>(hs));
  for (int b = 0; b < B; ++b) {
    const T* base = qkv + size_t(b) * Tn * C3;
    for (int t = 0; t < Tn; ++t) {
      for (int h = 0; h < NH; ++h) {
        const T* q = base + size_t(t) * C3 + h * hs;
        A mx = -std::numeric_limits<A>::infinity();
        for (int t2 = 0; t2 <= t; ++t2) {
          const T* k = base + size_t(t2) * C3 + C + h * hs;
          A s = 0;
          for (int i = 0; i < hs; ++i) s += load(q[i]) * load(k[i]);
          p[t2] = s * scale;
          mx = std::max(mx, p[t2]);
        }
        A sum = 0;
        for (int t2 = 0; t2 <= t; ++t2) {
          p[t2] = std::exp(p[t2] - mx);
          sum += p[t2];
        }
        T* arow = att + ((size_t(b) * NH + h) * Tn + t) * Tn;
        std::fill(o.begin(), o.end(), A(0));
        for (int t2 = 0; t2 < Tn; ++t2) {
          if (t2 > t) {
            arow[t2] = store<T>(A(0));
            continue;
          }
          const A w = p[t2] / sum;
          arow[t2] = store<T>(w);
          const T* v = base + size_t(t2) * C3 + 2 * C + h * hs;
          for (int i = 0; i < hs; ++i) o[i] += w * load(v[i]);
        }
        T* orow = out + (size_t(b) * Tn + t) * C + h * hs;
        for (int i = 0; i < hs; ++i) orow[i] = store<T>(o[i]);
      }
    }
  }
}

// Per (b, t, h) with P = att row, dP_j = dout . v_j:
//   dv_j += P_j dout;  dS_j = P_j (dP_j - sum_k P_k dP_k);
//   dq += scale sum_j dS_j k_j;  dk_j += scale dS_j q.
template <class T>
void attention_backward(T* dqkv, T* datt, const T* dout, const T* qkv, const T* att, int B, int Tn,
                        int C, int NH) {
  using A = acc_t<T>;
  const int hs = C / NH, C3 = 3 * C;
  const A scale = A(1) / std::sqrt(A(hs));
  std::vector<A> g(size_t(Tn) * C3), dp(static_cast<size_t>(Tn));
  for (int b = 0; b < B; ++b) {
    const T* base = qkv + size_t(b) * Tn * C3;
    std::fill(g.begin(), g.end(), A(0));
    for (int t = 0; t < Tn; ++t) {
      for (int h = 0; h < NH; ++h) {
        const T* arow = att + ((size_t(b) * NH + h) * Tn + t) * Tn;
        const T* dy = dout + (size_t(b) * Tn + t) * C + h * hs;
        const T* q = base + size_t(t) * C3 + h * hs;
        A pdp = 0;
        for (int t2 = 0; t2 <= t; ++t2) {
          const T* v = base + size_t(t2) * C3 + 2 * C + h * hs;
          A* dv = g.data() + size_t(t2) * C3 + 2 * C + h * hs;
          const A w = load(arow[t2]);
          A d = 0;
          for (int i = 0; i < hs; ++i) {
            d += load(dy[i]) * load(v[i]);
            dv[i] += w * load(dy[i]);
          }
          dp[t2] = d;
          pdp += w * d;
        }
        if (datt) {
          T* drow = datt + ((size_t(b) * NH + h) * Tn + t) * Tn;
          for (int t2 = 0; t2 < Tn; ++t2) drow[t2] = store<T>(t2 <= t ? dp[t2] : A(0));
        }
        A* dq = g.data() + size_t(t) * C3 + h * hs;
        for (int t2 = 0; t2 <= t; ++t2) {
          const A ds = load(arow[t2]) * (dp[t2] - pdp) * scale;
          const T* k = base + size_t(t2) * C3 + C + h * hs;
          A* dk = g.data() + size_t(t2) * C3 + C + h * hs;
          for (int i = 0; i < hs; ++i) {
            dq[i] += ds * load(k[i]);
            dk[i] += ds * load(q[i]);
          }
        }
      }
    }
    T* dst = dqkv + size_t(b) * Tn * C3;
    for (size_t i = 0; i < g.size(); ++i) add_into(dst[i], g[i]);
  }
}

#define PB_INSTANTIATE(T)                                                                         \
  template void attention_forward<T>(T*, T*, const T*, int, int, int, int);                       \
  template void attention_backward<T>(T*, T*, const T*, const T*, const T*, int, int, int, int);
PB_KERNELS_FOR_EACH_DTYPE(PB_INSTANTIATE)
#undef PB_INSTANTIATE

}  // namespace pb::kernels
