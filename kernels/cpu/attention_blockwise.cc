// Blockwise (online-softmax) attention: FlashAttention's forward recurrence
// (Dao et al. 2022, Alg. 1; running max m, sum l, unnormalized o) and the
// FlashAttention-2 backward (Dao 2023, Alg. 2, with lse and D = rowsum(dO*O)).
// Ring attention reuses the block pieces across ranks; the whole-sequence
// functions below tile one (batch, head) at a time.
// Invariants: masking is by absolute position (key pos > query pos masked when
// causal); a row with no visible key in a block leaves its state untouched, and
// a state with m = -inf merges as zero weight, so blocks can be visited and
// merged in any grouping.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/common/math.h"
#include "kernels/cpu/numeric.h"
#include "kernels/cpu/ops.h"

namespace pb::kernels {

using detail::add_into;
using detail::load;
using detail::store;

template <class T>
void attention_block_forward(acc_t<T>* o, acc_t<T>* m, acc_t<T>* l, const T* q, const T* k,
                             const T* v, int Tq, int Tk, int hs, int q_stride, int kv_stride,
                             int q_pos0, int k_pos0, bool causal) {
  using A = acc_t<T>;
  const A scale = math::attention_scale<A>(hs);
  std::vector<A> s(size_t(std::max(Tk, 0)));
  for (int i = 0; i < Tq; ++i) {
    const int nk = math::visible_keys(Tk, q_pos0 + i, k_pos0, causal);
    if (nk == 0) continue;
    const T* qi = q + size_t(i) * q_stride;
    A mx = -std::numeric_limits<A>::infinity();
    for (int j = 0; j < nk; ++j) {
      const T* kj = k + size_t(j) * kv_stride;
      A d = 0;
      for (int c = 0; c < hs; ++c) d += load(qi[c]) * load(kj[c]);
      s[j] = d * scale;
      mx = math::max_a(mx, s[j]);
    }
    const A m_new = math::max_a(m[i], mx);
    const A alpha = math::online_rescale(m[i], m_new);
    A* oi = o + size_t(i) * hs;
    for (int c = 0; c < hs; ++c) oi[c] *= alpha;
    A sum = 0;
    for (int j = 0; j < nk; ++j) {
      const A p = math::exp_a(s[j] - m_new);
      sum += p;
      const T* vj = v + size_t(j) * kv_stride;
      for (int c = 0; c < hs; ++c) oi[c] += p * load(vj[c]);
    }
    l[i] = alpha * l[i] + sum;
    m[i] = m_new;
  }
}

template <class T>
void attention_block_finalize(T* out, acc_t<T>* lse, const acc_t<T>* o, const acc_t<T>* m,
                              const acc_t<T>* l, int Tq, int hs, int out_stride) {
  using A = acc_t<T>;
  for (int i = 0; i < Tq; ++i) {
    // A row that saw no key (l = 0) attends to nothing: zero output, lse -inf.
    const A inv = math::online_inv_sum(l[i]);
    for (int c = 0; c < hs; ++c) out[size_t(i) * out_stride + c] = store<T>(o[size_t(i) * hs + c] * inv);
    if (lse) lse[i] = math::online_lse(m[i], l[i]);
  }
}

template <class T>
void attention_block_merge(acc_t<T>* o, acc_t<T>* m, acc_t<T>* l, const acc_t<T>* o2,
                           const acc_t<T>* m2, const acc_t<T>* l2, int Tq, int hs) {
  using A = acc_t<T>;
  for (int i = 0; i < Tq; ++i) {
    const A m_new = math::max_a(m[i], m2[i]);
    if (m_new == math::neg_inf<A>()) continue;  // both empty
    const A a1 = math::online_rescale(m[i], m_new), a2 = math::online_rescale(m2[i], m_new);
    for (int c = 0; c < hs; ++c) {
      const size_t x = size_t(i) * hs + c;
      o[x] = a1 * o[x] + a2 * o2[x];
    }
    l[i] = a1 * l[i] + a2 * l2[i];
    m[i] = m_new;
  }
}

// P_ij = exp(s_ij - lse_i); dv_j += P_ij dO_i; dP_ij = dO_i . v_j;
// dS_ij = P_ij (dP_ij - D_i); dq_i += scale dS_ij k_j; dk_j += scale dS_ij q_i.
template <class T>
void attention_block_backward(acc_t<T>* dq, acc_t<T>* dk, acc_t<T>* dv, const T* q, const T* k,
                              const T* v, const T* dout, const acc_t<T>* lse,
                              const acc_t<T>* Drow, int Tq, int Tk, int hs, int q_stride,
                              int kv_stride, int dout_stride, int q_pos0, int k_pos0, bool causal) {
  using A = acc_t<T>;
  const A scale = math::attention_scale<A>(hs);
  for (int i = 0; i < Tq; ++i) {
    const int nk = math::visible_keys(Tk, q_pos0 + i, k_pos0, causal);
    const T* qi = q + size_t(i) * q_stride;
    const T* doi = dout + size_t(i) * dout_stride;
    A* dqi = dq + size_t(i) * hs;
    for (int j = 0; j < nk; ++j) {
      const T* kj = k + size_t(j) * kv_stride;
      const T* vj = v + size_t(j) * kv_stride;
      A s = 0, dp = 0;
      for (int c = 0; c < hs; ++c) {
        s += load(qi[c]) * load(kj[c]);
        dp += load(doi[c]) * load(vj[c]);
      }
      const A p = math::attention_prob(s, scale, lse[i]);
      const A ds = math::attention_dscore(p, dp, Drow[i], scale);
      A* dkj = dk + size_t(j) * hs;
      A* dvj = dv + size_t(j) * hs;
      for (int c = 0; c < hs; ++c) {
        dvj[c] += p * load(doi[c]);
        dqi[c] += ds * load(kj[c]);
        dkj[c] += ds * load(qi[c]);
      }
    }
  }
}

template <class T>
void attention_forward_blockwise(T* out, acc_t<T>* lse, const T* qkv, int B, int Tn, int C, int NH,
                                 int bs) {
  using A = acc_t<T>;
  const int hs = C / NH, C3 = 3 * C;
  bs = std::max(1, bs);
  std::vector<A> o(size_t(bs) * hs), m(static_cast<size_t>(bs)), l(static_cast<size_t>(bs));
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h) {
      const T* base = qkv + size_t(b) * Tn * C3 + h * hs;
      for (int q0 = 0; q0 < Tn; q0 += bs) {
        const int tq = std::min(bs, Tn - q0);
        std::fill(o.begin(), o.end(), A(0));
        std::fill(m.begin(), m.end(), -std::numeric_limits<A>::infinity());
        std::fill(l.begin(), l.end(), A(0));
        for (int k0 = 0; k0 < q0 + tq; k0 += bs) {  // causal: later key blocks are all masked
          const int tk = std::min(bs, Tn - k0);
          attention_block_forward<T>(o.data(), m.data(), l.data(), base + size_t(q0) * C3,
                                     base + size_t(k0) * C3 + C, base + size_t(k0) * C3 + 2 * C,
                                     tq, tk, hs, C3, C3, q0, k0, /*causal=*/true);
        }
        attention_block_finalize<T>(out + (size_t(b) * Tn + q0) * C + h * hs,
                                    lse + (size_t(b) * NH + h) * Tn + q0, o.data(), m.data(),
                                    l.data(), tq, hs, C);
      }
    }
}

template <class T>
void attention_row_dot(acc_t<T>* D, const T* dout, const T* out, int rows, int cols, int stride) {
  using A = acc_t<T>;
  for (int t = 0; t < rows; ++t) {
    A d = 0;
    for (int c = 0; c < cols; ++c) d += load(dout[size_t(t) * stride + c]) * load(out[size_t(t) * stride + c]);
    D[t] = d;
  }
}

template <class T>
void attention_backward_blockwise(T* dqkv, const T* dout, const T* out, const T* qkv,
                                  const acc_t<T>* lse, int B, int Tn, int C, int NH, int bs) {
  using A = acc_t<T>;
  const int hs = C / NH, C3 = 3 * C;
  bs = std::max(1, bs);
  std::vector<A> dq(size_t(Tn) * hs), dk(size_t(Tn) * hs), dv(size_t(Tn) * hs), D(static_cast<size_t>(Tn));
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h) {
      const T* base = qkv + size_t(b) * Tn * C3 + h * hs;
      const size_t ob = size_t(b) * Tn * C + h * hs;
      attention_row_dot(D.data(), dout + ob, out + ob, Tn, hs, C);
      std::fill(dq.begin(), dq.end(), A(0));
      std::fill(dk.begin(), dk.end(), A(0));
      std::fill(dv.begin(), dv.end(), A(0));
      const A* lrow = lse + (size_t(b) * NH + h) * Tn;
      for (int q0 = 0; q0 < Tn; q0 += bs) {
        const int tq = std::min(bs, Tn - q0);
        for (int k0 = 0; k0 < q0 + tq; k0 += bs) {
          const int tk = std::min(bs, Tn - k0);
          attention_block_backward<T>(dq.data() + size_t(q0) * hs, dk.data() + size_t(k0) * hs,
                                      dv.data() + size_t(k0) * hs, base + size_t(q0) * C3,
                                      base + size_t(k0) * C3 + C, base + size_t(k0) * C3 + 2 * C,
                                      dout + ob + size_t(q0) * C, lrow + q0, D.data() + q0, tq, tk,
                                      hs, C3, C3, C, q0, k0, /*causal=*/true);
        }
      }
      T* dst = dqkv + size_t(b) * Tn * C3 + h * hs;
      for (int t = 0; t < Tn; ++t)
        for (int c = 0; c < hs; ++c) {
          const size_t x = size_t(t) * hs + c;
          add_into(dst[size_t(t) * C3 + c], dq[x]);
          add_into(dst[size_t(t) * C3 + C + c], dk[x]);
          add_into(dst[size_t(t) * C3 + 2 * C + c], dv[x]);
        }
    }
}

#define PB_INSTANTIATE(T)                                                                          \
  template void attention_block_forward<T>(acc_t<T>*, acc_t<T>*, acc_t<T>*, const T*, const T*,   \
                                           const T*, int, int, int, int, int, int, int, bool);     \
  template void attention_block_finalize<T>(T*, acc_t<T>*, const acc_t<T>*, const acc_t<T>*,      \
                                            const acc_t<T>*, int, int, int);                       \
  template void attention_block_merge<T>(acc_t<T>*, acc_t<T>*, acc_t<T>*, const acc_t<T>*,        \
                                         const acc_t<T>*, const acc_t<T>*, int, int);              \
  template void attention_block_backward<T>(acc_t<T>*, acc_t<T>*, acc_t<T>*, const T*, const T*,  \
                                            const T*, const T*, const acc_t<T>*, const acc_t<T>*, \
                                            int, int, int, int, int, int, int, int, bool);         \
  template void attention_forward_blockwise<T>(T*, acc_t<T>*, const T*, int, int, int, int, int); \
  template void attention_row_dot<T>(acc_t<T>*, const T*, const T*, int, int, int);               \
  template void attention_backward_blockwise<T>(T*, const T*, const T*, const T*,                 \
                                                const acc_t<T>*, int, int, int, int, int);
PB_KERNELS_FOR_EACH_DTYPE(PB_INSTANTIATE)
#undef PB_INSTANTIATE

}  // namespace pb::kernels
