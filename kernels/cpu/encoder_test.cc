// Tests of the token + position embedding: finite differences (fp64), dtype
// agreement, null outputs, and bf16 destinations rounded once per row.
#include <gtest/gtest.h>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/test_util.h"

namespace pb::kernels {
namespace {

using namespace testing;

constexpr int B = 2, Tn = 5, C = 4, V = 7;

struct Inputs {
  std::vector<int32_t> tok = {3, 1, 3, 0, 6, 3, 3, 2, 1, 5};  // repeats exercise the scatter
  std::vector<double> wte = bf16_exact(size_t(V) * C, 1), wpe = bf16_exact(size_t(Tn) * C, 2),
                      R = bf16_exact(size_t(B) * Tn * C, 3), dwte0 = bf16_exact(size_t(V) * C, 4),
                      dwpe0 = bf16_exact(size_t(Tn) * C, 5);
};

template <class T>
std::vector<double> forward(const Inputs& in) {
  auto wte = to<T>(in.wte), wpe = to<T>(in.wpe);
  std::vector<T> out(size_t(B) * Tn * C);
  encoder_forward(out.data(), in.tok.data(), wte.data(), wpe.data(), B, Tn, C);
  return to_double(out);
}

// Returns dwte and dwpe after one backward from dwte0/dwpe0 with dout = R.
template <class T>
std::pair<std::vector<double>, std::vector<double>> backward(const Inputs& in, bool want_te = true,
                                                             bool want_pe = true) {
  auto dwte = to<T>(in.dwte0), dwpe = to<T>(in.dwpe0), dout = to<T>(in.R);
  encoder_backward(want_te ? dwte.data() : nullptr, want_pe ? dwpe.data() : nullptr, dout.data(),
                   in.tok.data(), B, Tn, C);
  return {to_double(dwte), to_double(dwpe)};
}

TEST(Encoder, BackwardMatchesFiniteDifferences) {
  Inputs in;
  auto [dwte, dwpe] = backward<double>(in);
  auto loss = [&] { return dot(forward<double>(in), in.R); };
  expect_gradient(in.wte, minus(dwte, in.dwte0), loss, "dwte");
  expect_gradient(in.wpe, minus(dwpe, in.dwpe0), loss, "dwpe");
}

TEST(Encoder, Fp32AndBf16AgreeWithFp64) {
  Inputs in;
  const auto y = forward<double>(in);
  EXPECT_LE(rel_err(forward<float>(in), y), kF32Tol);
  EXPECT_LE(rel_err(forward<bf16>(in), y), kBf16Tol);
  const auto g = backward<double>(in), g32 = backward<float>(in), g16 = backward<bf16>(in);
  EXPECT_LE(rel_err(g32.first, g.first), kF32Tol);
  EXPECT_LE(rel_err(g32.second, g.second), kF32Tol);
  EXPECT_LE(rel_err(g16.first, g.first), kBf16Tol);
  EXPECT_LE(rel_err(g16.second, g.second), kBf16Tol);
}

TEST(Encoder, NullOutputsAreSkipped) {
  Inputs in;
  const auto full = backward<bf16>(in);
  const auto te_only = backward<bf16>(in, true, false), pe_only = backward<bf16>(in, false, true);
  EXPECT_EQ(te_only.first, full.first);
  EXPECT_EQ(te_only.second, in.dwpe0);  // untouched
  EXPECT_EQ(pe_only.second, full.second);
  EXPECT_EQ(pe_only.first, in.dwte0);
}

// Four positions of one token each add 0.003 to a bf16 1.0 (ulp 2^-7): added
// one by one every sum rounds back to 1.0; summed first, 1.012 -> 1.0078125.
TEST(Encoder, Bf16DestinationRoundedOncePerRow) {
  const int b = 1, t = 4, c = 1;
  std::vector<int32_t> tok(t, 0);
  std::vector<bf16> dwte{bf16(1.0f)}, dwpe(t, bf16(0.0f)), dout(t, bf16(0.003f));
  encoder_backward(dwte.data(), dwpe.data(), dout.data(), tok.data(), b, t, c);
  const float contrib = 4 * static_cast<float>(bf16(0.003f));
  EXPECT_EQ(static_cast<float>(dwte[0]), static_cast<float>(bf16(1.0f + contrib)));
  EXPECT_GT(static_cast<float>(dwte[0]), 1.0f);
}

}  // namespace
}  // namespace pb::kernels
