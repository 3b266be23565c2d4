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

}  // namespace
}  // namespace pb::kernels
