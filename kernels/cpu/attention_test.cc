// Tests of the naive causal attention: finite differences of dqkv (fp64), the
// softmax rows and causal mask of att, and fp32/bf16 agreement with fp64.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/test_util.h"

namespace pb::kernels {
namespace {

using namespace testing;

constexpr int B = 2, Tn = 5, C = 8, NH = 2;

struct Inputs {
  std::vector<double> qkv = bf16_exact(size_t(B) * Tn * 3 * C, 1, -1.5, 1.5),
                      R = bf16_exact(size_t(B) * Tn * C, 2),
                      dqkv0 = bf16_exact(size_t(B) * Tn * 3 * C, 3);
};

// The caller's workspace, filled with NaN: nothing may be read before written.
template <class T>
std::vector<acc_t<T>> poisoned_workspace() {
  return std::vector<acc_t<T>>(attention_workspace_elems<T>(Tn, C, NH), std::numeric_limits<acc_t<T>>::quiet_NaN());
}

template <class T>
std::vector<double> forward(const Inputs& in, std::vector<T>* att_out = nullptr) {
  auto qkv = to<T>(in.qkv);
  std::vector<T> out(size_t(B) * Tn * C), att(size_t(B) * NH * Tn * Tn);
  auto ws = poisoned_workspace<T>();
  attention_forward(out.data(), att.data(), qkv.data(), B, Tn, C, NH, ws.data());
  if (att_out) *att_out = att;
  return to_double(out);
}

template <class T>
std::vector<double> backward(const Inputs& in) {
  std::vector<T> att;
  forward<T>(in, &att);
  auto qkv = to<T>(in.qkv), dout = to<T>(in.R), dqkv = to<T>(in.dqkv0);
  std::vector<T> datt(att.size());
  auto ws = poisoned_workspace<T>();
  attention_backward(dqkv.data(), datt.data(), dout.data(), qkv.data(), att.data(), B, Tn, C, NH, ws.data());
  return to_double(dqkv);
}

TEST(Attention, BackwardMatchesFiniteDifferences) {
  Inputs in;
  const auto dqkv = backward<double>(in);
  auto loss = [&] { return dot(forward<double>(in), in.R); };
  expect_gradient(in.qkv, minus(dqkv, in.dqkv0), loss, "dqkv", /*checks=*/240);
}

TEST(Attention, RowsAreCausalSoftmaxes) {
  Inputs in;
  std::vector<double> att;
  const auto out = forward<double>(in, &att);
  for (int bh = 0; bh < B * NH; ++bh)
    for (int t = 0; t < Tn; ++t) {
      double sum = 0;
      for (int t2 = 0; t2 < Tn; ++t2) {
        const double a = att[(size_t(bh) * Tn + t) * Tn + t2];
        if (t2 > t) {
          EXPECT_EQ(a, 0.0);
        }
        EXPECT_GE(a, 0.0);
        sum += a;
      }
      EXPECT_NEAR(sum, 1.0, 1e-14);
    }
  // The first position sees only itself: its output is its own value vector.
  const int hs = C / NH;
  for (int b = 0; b < B; ++b)
    for (int c = 0; c < C; ++c)
      EXPECT_NEAR(out[size_t(b) * Tn * C + c], in.qkv[size_t(b) * Tn * 3 * C + 2 * C + c], 1e-15)
          << "b " << b << " c " << c << " hs " << hs;
}

TEST(Attention, Fp32AndBf16AgreeWithFp64) {
  Inputs in;
  const auto y = forward<double>(in);
  EXPECT_LE(rel_err(forward<float>(in), y), kF32Tol);
  EXPECT_LE(rel_err(forward<bf16>(in), y), kBf16Tol);
  const auto g = backward<double>(in);
  EXPECT_LE(rel_err(backward<float>(in), g), kF32Tol);
  EXPECT_LE(rel_err(backward<bf16>(in), g), kBf16Tol);
}

// Grouped-query attention: KVH key/value heads shared by NH / KVH query heads
// each. The textbook form is multi-head attention with each key/value head
// repeated for its group (transformers' repeat_kv); its gradient is the sum of
// the repeated copies' gradients.
constexpr int kNH = 4;
std::vector<double> repeat_kv(const std::vector<double>& qkv, int KVH) {
  const int hs = C / kNH, kvC = KVH * hs, W = C + 2 * kvC, g = kNH / KVH;
  std::vector<double> full(size_t(B) * Tn * 3 * C);
  for (int r = 0; r < B * Tn; ++r)
    for (int h = 0; h < kNH; ++h)
      for (int c = 0; c < hs; ++c) {
        full[size_t(r) * 3 * C + h * hs + c] = qkv[size_t(r) * W + h * hs + c];
        full[size_t(r) * 3 * C + C + h * hs + c] = qkv[size_t(r) * W + C + (h / g) * hs + c];
        full[size_t(r) * 3 * C + 2 * C + h * hs + c] = qkv[size_t(r) * W + C + kvC + (h / g) * hs + c];
      }
  return full;
}

TEST(Attention, GroupedQueryIsMultiHeadWithRepeatedKeysAndValues) {
  for (int KVH : {1, 2, 4}) {
    const int hs = C / kNH, kvC = KVH * hs, W = C + 2 * kvC, g = kNH / KVH;
    auto qkv = bf16_exact(size_t(B) * Tn * W, 11, -1.5, 1.5);
    const auto dout = bf16_exact(size_t(B) * Tn * C, 12);
    std::vector<double> out(size_t(B) * Tn * C), att(size_t(B) * kNH * Tn * Tn), dqkv(qkv.size(), 0.0);
    std::vector<double> ws(attention_workspace_elems_gqa<double>(Tn, C, kNH, KVH));
    attention_forward_gqa(out.data(), att.data(), qkv.data(), B, Tn, C, kNH, KVH, ws.data());
    attention_backward_gqa(dqkv.data(), static_cast<double*>(nullptr), dout.data(), qkv.data(), att.data(), B, Tn, C,
                           kNH, KVH, ws.data());
    auto full = repeat_kv(qkv, KVH);
    std::vector<double> out2(out.size()), att2(att.size()), dfull(full.size(), 0.0);
    std::vector<double> ws2(attention_workspace_elems<double>(Tn, C, kNH));
    attention_forward(out2.data(), att2.data(), full.data(), B, Tn, C, kNH, ws2.data());
    attention_backward(dfull.data(), static_cast<double*>(nullptr), dout.data(), full.data(), att2.data(), B, Tn, C,
                       kNH, ws2.data());
    EXPECT_LE(rel_err(out, out2), 1e-15) << "KVH " << KVH;
    std::vector<double> summed(dqkv.size(), 0.0);
    for (int r = 0; r < B * Tn; ++r)
      for (int h = 0; h < kNH; ++h)
        for (int c = 0; c < hs; ++c) {
          summed[size_t(r) * W + h * hs + c] = dfull[size_t(r) * 3 * C + h * hs + c];
          summed[size_t(r) * W + C + (h / g) * hs + c] += dfull[size_t(r) * 3 * C + C + h * hs + c];
          summed[size_t(r) * W + C + kvC + (h / g) * hs + c] += dfull[size_t(r) * 3 * C + 2 * C + h * hs + c];
        }
    EXPECT_LE(rel_err(dqkv, summed), 1e-14) << "KVH " << KVH;
    // And against finite differences directly.
    auto loss = [&] {
      std::vector<double> o(out.size()), a(att.size());
      attention_forward_gqa(o.data(), a.data(), qkv.data(), B, Tn, C, kNH, KVH, ws.data());
      return dot(o, dout);
    };
    expect_gradient(qkv, dqkv, loss, "dqkv gqa", /*checks=*/160);
  }
}

TEST(Attention, GroupedQueryAtFp32AndBf16AgreesWithFp64) {
  const int KVH = 2, hs = C / kNH, W = C + 2 * KVH * hs;
  const auto qkv = bf16_exact(size_t(B) * Tn * W, 13, -1.5, 1.5);
  const auto dout = bf16_exact(size_t(B) * Tn * C, 14);
  auto run = [&](auto t) {
    using T = decltype(t);
    auto q = to<T>(qkv), dy = to<T>(dout);
    std::vector<T> out(size_t(B) * Tn * C), att(size_t(B) * kNH * Tn * Tn), dq(q.size(), cast<T>(0.0));
    std::vector<acc_t<T>> ws(attention_workspace_elems_gqa<T>(Tn, C, kNH, KVH));
    attention_forward_gqa(out.data(), att.data(), q.data(), B, Tn, C, kNH, KVH, ws.data());
    attention_backward_gqa(dq.data(), static_cast<T*>(nullptr), dy.data(), q.data(), att.data(), B, Tn, C, kNH, KVH,
                           ws.data());
    return std::make_pair(to_double(out), to_double(dq));
  };
  const auto r64 = run(double{}), r32 = run(float{}), r16 = run(bf16{});
  EXPECT_LE(rel_err(r32.first, r64.first), kF32Tol);
  EXPECT_LE(rel_err(r32.second, r64.second), kF32Tol);
  EXPECT_LE(rel_err(r16.first, r64.first), kBf16Tol);
  EXPECT_LE(rel_err(r16.second, r64.second), kBf16Tol);
}

}  // namespace
}  // namespace pb::kernels
