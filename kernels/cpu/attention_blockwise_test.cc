// Tests of the online-softmax attention pieces: one block against a dense
// long-double softmax (Tq != Tk, position offsets, causal and not), the block
// backward against finite differences, merge of two half blocks == one block,
// fully masked rows, and the whole-sequence blockwise kernels against the
// naive attention kernels for several block sizes.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <type_traits>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/test_util.h"

namespace pb::kernels {
namespace {

using namespace testing;

// One head: q (Tq, stride S), k and v (Tk, stride S); hs < S exercises strides.
struct Head {
  int Tq, Tk, hs = 4, S = 6, q_pos0, k_pos0;
  bool causal;
  std::vector<double> q, k, v, R;
  Head(int tq, int tk, int qp, int kp, bool c)
      : Tq(tq), Tk(tk), q_pos0(qp), k_pos0(kp), causal(c), q(bf16_exact(size_t(tq) * S, 1, -2, 2)),
        k(bf16_exact(size_t(tk) * S, 2, -2, 2)), v(bf16_exact(size_t(tk) * S, 3)),
        R(bf16_exact(size_t(tq) * hs, 4)) {}
  bool visible(int i, int j) const { return !causal || k_pos0 + j <= q_pos0 + i; }
};

// Dense softmax(q k^T / sqrt(hs)) v in long double: the independent reference.
std::vector<double> dense(const Head& h) {
  std::vector<double> out(size_t(h.Tq) * h.hs, 0.0);
  for (int i = 0; i < h.Tq; ++i) {
    std::vector<long double> s(h.Tk);
    long double mx = -INFINITY, sum = 0;
    for (int j = 0; j < h.Tk; ++j) {
      long double d = 0;
      for (int c = 0; c < h.hs; ++c) d += (long double)h.q[i * h.S + c] * h.k[j * h.S + c];
      s[j] = d / std::sqrt((long double)h.hs);
      if (h.visible(i, j)) mx = std::max(mx, s[j]);
    }
    for (int j = 0; j < h.Tk; ++j) sum += h.visible(i, j) ? std::exp(s[j] - mx) : 0;
    for (int j = 0; j < h.Tk; ++j)
      if (h.visible(i, j))
        for (int c = 0; c < h.hs; ++c)
          out[i * h.hs + c] += double(std::exp(s[j] - mx) / sum * h.v[j * h.S + c]);
  }
  return out;
}

struct State {
  std::vector<double> o, m, l;
  explicit State(int tq, int hs)
      : o(size_t(tq) * hs, 0.0), m(tq, -std::numeric_limits<double>::infinity()), l(tq, 0.0) {}
};

// Runs keys [j0, j1) of h into st.
void run_block(const Head& h, State& st, int j0, int j1) {
  attention_block_forward<double>(st.o.data(), st.m.data(), st.l.data(), h.q.data(),
                                  h.k.data() + size_t(j0) * h.S, h.v.data() + size_t(j0) * h.S,
                                  h.Tq, j1 - j0, h.hs, h.S, h.S, h.q_pos0, h.k_pos0 + j0, h.causal);
}

std::vector<double> finalize(const Head& h, const State& st, std::vector<double>* lse = nullptr) {
  std::vector<double> out(size_t(h.Tq) * h.hs), l(h.Tq);
  attention_block_finalize<double>(out.data(), l.data(), st.o.data(), st.m.data(), st.l.data(),
                                   h.Tq, h.hs, h.hs);
  if (lse) *lse = l;
  return out;
}

std::vector<double> block_out(const Head& h, std::vector<double>* lse = nullptr) {
  State st(h.Tq, h.hs);
  run_block(h, st, 0, h.Tk);
  return finalize(h, st, lse);
}

const Head kCases[] = {Head(3, 7, 5, 2, true), Head(5, 4, 0, 0, true), Head(4, 6, 3, 3, false),
                       Head(6, 3, 10, 1, true)};

TEST(AttentionBlock, ForwardMatchesDenseSoftmax) {
  for (const Head& h : kCases)
    EXPECT_LE(rel_err(block_out(h), dense(h)), 1e-14) << "Tq " << h.Tq << " causal " << h.causal;
}

TEST(AttentionBlock, BackwardMatchesFiniteDifferences) {
  for (Head h : kCases) {
    std::vector<double> lse;
    const auto out = block_out(h, &lse);
    std::vector<double> D(h.Tq, 0.0);
    for (int i = 0; i < h.Tq; ++i)
      for (int c = 0; c < h.hs; ++c) D[i] += h.R[i * h.hs + c] * out[i * h.hs + c];
    std::vector<double> dq(size_t(h.Tq) * h.hs, 0.0), dk(size_t(h.Tk) * h.hs, 0.0), dv(dk);
    attention_block_backward<double>(dq.data(), dk.data(), dv.data(), h.q.data(), h.k.data(),
                                     h.v.data(), h.R.data(), lse.data(), D.data(), h.Tq, h.Tk,
                                     h.hs, h.S, h.S, h.hs, h.q_pos0, h.k_pos0, h.causal);
    // Gradients live in (T, hs); the inputs in (T, S): compare on the hs columns.
    auto spread = [&](const std::vector<double>& g, int rows) {
      std::vector<double> r(size_t(rows) * h.S, 0.0);
      for (int i = 0; i < rows; ++i)
        for (int c = 0; c < h.hs; ++c) r[i * h.S + c] = g[i * h.hs + c];
      return r;
    };
    auto loss = [&] { return dot(block_out(h), h.R); };
    const std::string what = "case Tq=" + std::to_string(h.Tq) + " causal=" + std::to_string(h.causal);
    expect_gradient(h.q, spread(dq, h.Tq), loss, "dq " + what);
    expect_gradient(h.k, spread(dk, h.Tk), loss, "dk " + what);
    expect_gradient(h.v, spread(dv, h.Tk), loss, "dv " + what);
  }
}

TEST(AttentionBlock, MergeOfTwoHalvesEqualsOneBlock) {
  for (const Head& h : kCases) {
    const int half = h.Tk / 2;
    State a(h.Tq, h.hs), b(h.Tq, h.hs);
    run_block(h, a, 0, half);
    run_block(h, b, half, h.Tk);
    attention_block_merge<double>(a.o.data(), a.m.data(), a.l.data(), b.o.data(), b.m.data(),
                                  b.l.data(), h.Tq, h.hs);
    std::vector<double> lse_merged, lse_full;
    const auto merged = finalize(h, a, &lse_merged), full = block_out(h, &lse_full);
    EXPECT_LE(rel_err(merged, full), 1e-14) << "Tq " << h.Tq;
    EXPECT_LE(rel_err(lse_merged, lse_full), 1e-14) << "Tq " << h.Tq;
  }
}

// Keys after every query (causal): the rows stay empty, finalize gives zero
// output and lse -inf, and merging an empty state changes nothing.
TEST(AttentionBlock, FullyMaskedRowsStayEmpty) {
  Head h(2, 3, 0, 5, true);
  State st(h.Tq, h.hs);
  run_block(h, st, 0, h.Tk);
  std::vector<double> lse;
  const auto out = finalize(h, st, &lse);
  for (double x : out) EXPECT_EQ(x, 0.0);
  for (double x : lse) EXPECT_EQ(x, -std::numeric_limits<double>::infinity());
  Head g(2, 3, 4, 0, true);
  State full(g.Tq, g.hs), empty(g.Tq, g.hs);
  run_block(g, full, 0, g.Tk);
  const auto before = finalize(g, full);
  attention_block_merge<double>(full.o.data(), full.m.data(), full.l.data(), empty.o.data(),
                                empty.m.data(), empty.l.data(), g.Tq, g.hs);
  EXPECT_EQ(finalize(g, full), before);
}

// ---- whole sequence: blockwise == naive -------------------------------------
constexpr int B = 2, Tn = 11, C = 12, NH = 3;

struct Seq {
  std::vector<double> qkv = bf16_exact(size_t(B) * Tn * 3 * C, 5, -1.5, 1.5),
                      R = bf16_exact(size_t(B) * Tn * C, 6),
                      dqkv0 = bf16_exact(size_t(B) * Tn * 3 * C, 7);
};

template <class T>
std::vector<double> blockwise(const Seq& s, int bs, std::vector<double>* dqkv_out = nullptr) {
  auto qkv = to<T>(s.qkv), dout = to<T>(s.R), dqkv = to<T>(s.dqkv0);
  std::vector<T> out(size_t(B) * Tn * C);
  std::vector<acc_t<T>> lse(size_t(B) * NH * Tn);
  attention_forward_blockwise(out.data(), lse.data(), qkv.data(), B, Tn, C, NH, bs);
  if (dqkv_out) {
    attention_backward_blockwise(dqkv.data(), dout.data(), out.data(), qkv.data(), lse.data(), B,
                                 Tn, C, NH, bs);
    *dqkv_out = to_double(dqkv);
  }
  return to_double(out);
}

TEST(AttentionBlockwise, EqualsNaiveForEveryBlockSize) {
  Seq s;
  std::vector<double> out(size_t(B) * Tn * C), att(size_t(B) * NH * Tn * Tn), datt(att.size());
  std::vector<double> ws(attention_workspace_elems<double>(Tn, C, NH));
  attention_forward(out.data(), att.data(), s.qkv.data(), B, Tn, C, NH, ws.data());
  auto dqkv = s.dqkv0;
  attention_backward(dqkv.data(), datt.data(), s.R.data(), s.qkv.data(), att.data(), B, Tn, C, NH, ws.data());
  for (int bs : {1, 3, 4, Tn, 64}) {
    std::vector<double> g;
    EXPECT_LE(rel_err(blockwise<double>(s, bs, &g), out), 1e-13) << "bs " << bs;
    EXPECT_LE(rel_err(g, dqkv), 1e-13) << "bs " << bs;
  }
}

// T = 300 spans three of the naive kernel's 128-row BLAS blocks (the last one
// partial), so its block-boundary bookkeeping is compared too; fp64 and bf16.
template <class T>
void expect_long_sequence_matches() {
  const int b = 1, t = 300, c = 16, nh = 2;
  const auto qkv = bf16_exact(size_t(b) * t * 3 * c, 8, -1.5, 1.5), R = bf16_exact(size_t(b) * t * c, 9),
             d0 = bf16_exact(size_t(b) * t * 3 * c, 10);
  auto q = to<T>(qkv), dout = to<T>(R);
  std::vector<T> out(size_t(b) * t * c), att(size_t(b) * nh * t * t), datt(att.size()), out2(out.size());
  std::vector<acc_t<T>> lse(size_t(b) * nh * t);
  auto g1 = to<T>(d0), g2 = to<T>(d0);
  std::vector<acc_t<T>> ws(attention_workspace_elems<T>(t, c, nh));
  attention_forward(out.data(), att.data(), q.data(), b, t, c, nh, ws.data());
  attention_backward(g1.data(), datt.data(), dout.data(), q.data(), att.data(), b, t, c, nh, ws.data());
  attention_forward_blockwise(out2.data(), lse.data(), q.data(), b, t, c, nh, 64);
  attention_backward_blockwise(g2.data(), dout.data(), out2.data(), q.data(), lse.data(), b, t, c, nh, 64);
  // fp64: both exact up to summation order. bf16: both round once from fp32,
  // the naive backward also re-reads att rounded to bf16 (see kBf16Tol).
  const double tol = std::is_same_v<T, double> ? 1e-13 : kBf16Tol;
  EXPECT_LE(rel_err(to_double(out2), to_double(out)), tol);
  EXPECT_LE(rel_err(minus(to_double(g2), d0), minus(to_double(g1), d0)), 2 * tol);
}

TEST(AttentionBlockwise, LongSequenceEqualsNaive) {
  expect_long_sequence_matches<double>();
  expect_long_sequence_matches<bf16>();
}

TEST(AttentionBlockwise, BackwardMatchesFiniteDifferences) {
  Seq s;
  std::vector<double> g;
  blockwise<double>(s, 4, &g);
  auto loss = [&] { return dot(blockwise<double>(s, 4), s.R); };
  expect_gradient(s.qkv, minus(g, s.dqkv0), loss, "dqkv", /*checks=*/200);
}

TEST(AttentionBlockwise, Fp32AndBf16AgreeWithFp64) {
  Seq s;
  std::vector<double> g, g32, g16;
  const auto y = blockwise<double>(s, 4, &g);
  EXPECT_LE(rel_err(blockwise<float>(s, 4, &g32), y), kF32Tol);
  EXPECT_LE(rel_err(blockwise<bf16>(s, 4, &g16), y), kBf16Tol);
  EXPECT_LE(rel_err(g32, g), kF32Tol);
  EXPECT_LE(rel_err(g16, g), kBf16Tol);
}

}  // namespace
}  // namespace pb::kernels
