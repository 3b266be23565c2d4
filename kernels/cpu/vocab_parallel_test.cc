// Tests of a tensor-parallel rank's pieces (vocab_parallel.cc): a shard that
// holds the whole table or vocabulary computes bit for bit what the fused
// kernels compute (encoder_*, crossentropy_*); shards summed (or their
// statistics reduced) give the whole; padding and other shards' rows stay
// untouched; a bias's gradient is its column sums in row order.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/common/math.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/test_util.h"

namespace pb::kernels {
namespace {

using namespace testing;

template <class T>
constexpr double tol_of() {  // normwise, one shard's order against another
  return std::is_same_v<T, double> ? 1e-14 : std::is_same_v<T, bf16> ? 2 * kBf16Tol : kF32Tol;
}
template <class T>
constexpr double near_of() {  // absolute, one rounded add of values in [-1, 1]
  return std::is_same_v<T, bf16> ? 2e-2 : 1e-6;
}

template <class T>
class VocabParallel : public ::testing::Test {};
using Types = ::testing::Types<double, float, bf16>;
TYPED_TEST_SUITE(VocabParallel, Types);

template <class T>
std::vector<T> in(size_t n, uint64_t seed, double lo = -1, double hi = 1) {
  return to<T>(bf16_exact(n, seed, lo, hi));
}

template <class T>
std::vector<uint16_t> bits_of(const std::vector<T>& v) {  // bitwise comparison, any storage type
  std::vector<uint16_t> b(v.size() * sizeof(T) / 2);
  std::memcpy(b.data(), v.data(), b.size() * 2);
  return b;
}

TYPED_TEST(VocabParallel, WholeTableLookupAndPositionsAreTheEncoder) {
  using T = TypeParam;
  const int B = 3, Tn = 5, C = 7, V = 6, N = B * Tn;
  const auto tok = random_ints(size_t(N), V, 1);
  const auto wte = in<T>(size_t(V) * C, 2), wpe = in<T>(size_t(Tn) * C, 3);
  std::vector<T> enc(size_t(N) * C), x(size_t(N) * C);
  encoder_forward(enc.data(), tok.data(), wte.data(), wpe.data(), B, Tn, C);
  std::vector<int32_t> pos(static_cast<size_t>(N));
  for (int n = 0; n < N; ++n) pos[size_t(n)] = n % Tn;
  embedding_lookup(x.data(), tok.data(), wte.data(), N, C, 0, V);
  add_rows(x.data(), wpe.data(), pos.data(), N, C);
  EXPECT_EQ(bits_of(x), bits_of(enc));
  // Backward: the token rows and the position rows, as encoder_backward's.
  const auto dy = in<T>(size_t(N) * C, 4);
  auto dwte = in<T>(size_t(V) * C, 5), dwpe = in<T>(size_t(Tn) * C, 6);
  auto ewte = dwte, ewpe = dwpe;
  encoder_backward(ewte.data(), ewpe.data(), dy.data(), tok.data(), B, Tn, C);
  add_rows_backward(dwte.data(), dy.data(), tok.data(), N, C, 0, V);
  add_rows_backward(dwpe.data(), dy.data(), pos.data(), N, C, 0, Tn);
  EXPECT_EQ(bits_of(dwte), bits_of(ewte));
  EXPECT_EQ(bits_of(dwpe), bits_of(ewpe));
}

TYPED_TEST(VocabParallel, ShardsOfTheTableSumToTheWholeAndTouchOnlyTheirRows) {
  using T = TypeParam;
  const int N = 11, C = 4, V = 10, shard = 4;  // shards [0,4) [4,8) [8,10)+2 padding rows
  const auto tok = random_ints(size_t(N), V, 7);
  const auto wte = in<T>(size_t(V) * C, 8);
  std::vector<T> whole(size_t(N) * C);
  embedding_lookup(whole.data(), tok.data(), wte.data(), N, C, 0, V);
  std::vector<double> sum(whole.size(), 0.0);
  const auto dy = in<T>(size_t(N) * C, 9);
  auto dwhole = in<T>(size_t(V) * C, 10);
  const auto d0 = dwhole;
  add_rows_backward(dwhole.data(), dy.data(), tok.data(), N, C, 0, V);
  for (int first = 0; first < V; first += shard) {
    const int rows = std::min(shard, V - first);
    std::vector<T> part(size_t(N) * C);
    embedding_lookup(part.data(), tok.data(), wte.data() + size_t(first) * C, N, C, first, rows);
    for (size_t i = 0; i < part.size(); ++i) sum[i] += double(part[i]);
    // The shard's gradient rows (plus two padding rows it must leave alone).
    std::vector<T> dpart(d0.begin() + ptrdiff_t(first) * C, d0.begin() + ptrdiff_t(first + rows) * C);
    dpart.resize(size_t(shard + 2) * C, T(0.5));
    add_rows_backward(dpart.data(), dy.data(), tok.data(), N, C, first, rows);
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < C; ++c)
        EXPECT_EQ(double(dpart[size_t(r) * C + c]), double(dwhole[size_t(first + r) * C + c]));
    for (size_t i = size_t(rows) * C; i < dpart.size(); ++i) EXPECT_EQ(double(dpart[i]), 0.5);
  }
  EXPECT_EQ(sum, to_double(whole));
}

TYPED_TEST(VocabParallel, ABiasIsRowZeroForEveryRowAndItsGradientTheColumnSums) {
  using T = TypeParam;
  const int N = 9, C = 5;
  const auto b = in<T>(size_t(C), 11), x0 = in<T>(size_t(N) * C, 12), dy = in<T>(size_t(N) * C, 13);
  auto x = x0, xi = x0;
  const std::vector<int32_t> zeros(static_cast<size_t>(N), 0);
  add_rows(x.data(), b.data(), nullptr, N, C);
  add_rows(xi.data(), b.data(), zeros.data(), N, C);
  EXPECT_EQ(bits_of(x), bits_of(xi));
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < C; ++c)
      EXPECT_NEAR(double(x[size_t(n) * C + c]), double(x0[size_t(n) * C + c]) + double(b[size_t(c)]), near_of<T>());
  auto db = in<T>(size_t(C), 14), dbi = db;
  const auto db0 = db;
  add_rows_backward(db.data(), dy.data(), nullptr, N, C, 0, 1);
  add_rows_backward(dbi.data(), dy.data(), zeros.data(), N, C, 0, 1);
  EXPECT_EQ(bits_of(db), bits_of(dbi));
  std::vector<double> want(static_cast<size_t>(C)), got = to_double(db);
  for (int c = 0; c < C; ++c) {
    want[size_t(c)] = double(db0[size_t(c)]);
    for (int n = 0; n < N; ++n) want[size_t(c)] += double(dy[size_t(n) * C + c]);
  }
  EXPECT_LE(rel_err(got, want), tol_of<T>());
}

TYPED_TEST(VocabParallel, OneShardOfTheWholeVocabularyIsTheFusedCrossEntropy) {
  using T = TypeParam;
  using A = acc_t<T>;
  const int N = 6, V = 13;
  const auto logits = in<T>(size_t(N) * V, 15, -4, 4);
  const auto tgt = random_ints(size_t(N), V, 16);
  std::vector<T> probs(logits.size());
  std::vector<A> losses(static_cast<size_t>(N));
  crossentropy_forward(losses.data(), probs.data(), logits.data(), tgt.data(), N, V);
  auto d = in<T>(logits.size(), 17), dv = d;
  crossentropy_backward(d.data(), probs.data(), tgt.data(), 0.25, N, V);
  std::vector<A> mx(static_cast<size_t>(N)), sum(static_cast<size_t>(N)), xt(static_cast<size_t>(N)),
      l(static_cast<size_t>(N));
  auto p = logits;  // in place, as the runner does
  vocab_logit_max(mx.data(), p.data(), N, V, V);
  vocab_sum_exp(sum.data(), xt.data(), p.data(), mx.data(), tgt.data(), 0, N, V, V);
  vocab_softmax_loss(l.data(), p.data(), p.data(), mx.data(), sum.data(), xt.data(), N, V, V);
  vocab_crossentropy_backward(dv.data(), p.data(), tgt.data(), 0, 0.25, N, V, V);
  EXPECT_EQ(bits_of(p), bits_of(probs));
  EXPECT_EQ(l, losses);
  EXPECT_EQ(bits_of(dv), bits_of(d));
}

TYPED_TEST(VocabParallel, ShardsWithReducedStatisticsGiveTheWholeSoftmaxAndLeavePaddingAlone) {
  using T = TypeParam;
  using A = acc_t<T>;
  const int N = 5, V = 11, Vr = 4;  // 3 shards of 4 rows, the last holding 3 real rows + 1 padding
  const auto logits = in<T>(size_t(N) * V, 18, -4, 4);
  const auto tgt = random_ints(size_t(N), V, 19);
  std::vector<T> probs(logits.size());
  std::vector<A> losses(static_cast<size_t>(N));
  crossentropy_forward(losses.data(), probs.data(), logits.data(), tgt.data(), N, V);
  const int shards = (V + Vr - 1) / Vr;
  std::vector<std::vector<T>> part(static_cast<size_t>(shards));
  std::vector<A> mx(static_cast<size_t>(N), math::neg_inf<A>()), sum(static_cast<size_t>(N), 0),
      xt(static_cast<size_t>(N), 0);
  for (int s = 0; s < shards; ++s) {  // each shard's logits (padding columns hold garbage)
    auto& x = part[size_t(s)];
    x.assign(size_t(N) * Vr, T(9.0));
    for (int n = 0; n < N; ++n)
      for (int v = 0; v < Vr && s * Vr + v < V; ++v) x[size_t(n) * Vr + v] = logits[size_t(n) * V + s * Vr + v];
    std::vector<A> m(static_cast<size_t>(N));
    vocab_logit_max(m.data(), x.data(), N, Vr, std::min(Vr, V - s * Vr));
    for (int n = 0; n < N; ++n) mx[size_t(n)] = std::max(mx[size_t(n)], m[size_t(n)]);  // all-reduce max
  }
  for (int s = 0; s < shards; ++s) {
    std::vector<A> sm(static_cast<size_t>(N)), t(static_cast<size_t>(N));
    vocab_sum_exp(sm.data(), t.data(), part[size_t(s)].data(), mx.data(), tgt.data(), s * Vr, N, Vr,
                  std::min(Vr, V - s * Vr));
    for (int n = 0; n < N; ++n) sum[size_t(n)] += sm[size_t(n)], xt[size_t(n)] += t[size_t(n)];  // all-reduce sum
  }
  const double tol = tol_of<T>();
  for (int s = 0; s < shards; ++s) {
    const int valid = std::min(Vr, V - s * Vr);
    auto& x = part[size_t(s)];
    std::vector<A> l(static_cast<size_t>(N));
    vocab_softmax_loss(l.data(), x.data(), x.data(), mx.data(), sum.data(), xt.data(), N, Vr, valid);
    std::vector<double> got, want;
    for (int n = 0; n < N; ++n)
      for (int v = 0; v < Vr; ++v) {
        got.push_back(double(x[size_t(n) * Vr + v]));
        want.push_back(v < valid ? double(probs[size_t(n) * V + s * Vr + v]) : 0.0);
      }
    EXPECT_LE(rel_err(got, want), tol) << "shard " << s;
    EXPECT_LE(rel_err(to_double(l), to_double(losses)), tol) << "shard " << s;
    std::vector<T> d(x.size(), T(0.5));
    vocab_crossentropy_backward(d.data(), x.data(), tgt.data(), s * Vr, 1.0, N, Vr, valid);
    for (int n = 0; n < N; ++n) {
      for (int v = 0; v < Vr; ++v) {
        const double dv = double(d[size_t(n) * Vr + v]);
        if (v >= valid) {
          EXPECT_EQ(dv, 0.5);  // padding: outside the softmax
        } else {
          const bool is_t = tgt[size_t(n)] == s * Vr + v;
          EXPECT_NEAR(dv, 0.5 + double(x[size_t(n) * Vr + v]) - (is_t ? 1.0 : 0.0), near_of<T>());
        }
      }
    }
  }
}

}  // namespace
}  // namespace pb::kernels
