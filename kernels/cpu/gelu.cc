// tanh-approximate GELU (Hendrycks & Gimpel 2016, sec. 2; the form GPT-2 uses):
//   gelu(x) = x/2 (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3),
//   gelu'(x) = (1 + tanh u)/2 + x/2 sech^2(u) sqrt(2/pi) (1 + 3*0.044715 x^2).
// Invariant: evaluated in A; the backward adds dout * gelu'(x) to dinp once.
// tanh in fp32 is a 13/6-degree rational interpolant accurate to a couple of
// ulps on [-9, 9] (the coefficients Eigen uses, generic_fast_tanh_float; it is
// +-1 in fp32 beyond): branch-free, so the loops vectorize — libm's tanhf was a
// third of a C=256 training step. fp64 keeps std::tanh (the truth).
#include <cmath>
#include <numbers>

#include "kernels/cpu/numeric.h"
#include "kernels/cpu/ops.h"

namespace pb::kernels {

using detail::add_into;
using detail::load;
using detail::store;

namespace {
constexpr double kGeluCubic = 0.044715;
constexpr double kSqrt2OverPi = std::numbers::sqrt2 * std::numbers::inv_sqrtpi;  // sqrt(2/pi)
template <class A>
inline A gelu_u(A x) {
  return A(kSqrt2OverPi) * (x + A(kGeluCubic) * x * x * x);
}

inline double tanh_a(double x) { return std::tanh(x); }
inline float tanh_a(float a) {
  const float x = std::fmax(-9.f, std::fmin(9.f, a));
  const float x2 = x * x;
  float p = x2 * -2.76076847742355e-16f + 2.00018790482477e-13f;
  p = p * x2 + -8.60467152213735e-11f;
  p = p * x2 + 5.12229709037114e-08f;
  p = p * x2 + 1.48572235717979e-05f;
  p = p * x2 + 6.37261928875436e-04f;
  p = p * x2 + 4.89352455891786e-03f;
  p = p * x;
  float q = x2 * 1.19825839466702e-06f + 1.18534705686654e-04f;
  q = q * x2 + 2.26843463243900e-03f;
  q = q * x2 + 4.89352518554385e-03f;
  return p / q;
}
}  // namespace

template <class T>
void gelu_forward(T* out, const T* inp, size_t N) {
  using A = acc_t<T>;
  for (size_t i = 0; i < N; ++i) {
    const A x = load(inp[i]);
    out[i] = store<T>(A(0.5) * x * (A(1) + tanh_a(gelu_u(x))));
  }
}

template <class T>
void gelu_backward(T* dinp, const T* inp, const T* dout, size_t N) {
  using A = acc_t<T>;
  const A s = A(kSqrt2OverPi);
  for (size_t i = 0; i < N; ++i) {
    const A x = load(inp[i]);
    const A th = tanh_a(gelu_u(x));
    const A sech2 = A(1) - th * th;
    const A local = A(0.5) * (A(1) + th) +
                    A(0.5) * x * sech2 * s * (A(1) + A(3 * kGeluCubic) * x * x);
    add_into(dinp[i], local * load(dout[i]));
  }
}

#define PB_INSTANTIATE(T)                                           \
  template void gelu_forward<T>(T*, const T*, size_t);              \
  template void gelu_backward<T>(T*, const T*, const T*, size_t);
PB_KERNELS_FOR_EACH_DTYPE(PB_INSTANTIATE)
#undef PB_INSTANTIATE

}  // namespace pb::kernels
