// The per-element math of the ops that is the same on every device, in
// `__host__ __device__` functions (PB_HD) shared by kernels/cpu and
// kernels/cuda, so what the GPU computes per element is tested on the CPU
// here; the device code adds only the launch, the indexing and the
// reductions: the embedding sum, LayerNorm's per-element forward and
// backward, softmax and cross-entropy, the online-softmax state of blockwise
// attention (forward and FlashAttention-2 backward), GELU, the residual and
// bias add, the mixture-of-experts combine, AdamW.
// Invariants: only arithmetic in the argument type A (or M) and the
// functions below, no std:: calls a device cannot make; on the host every
// function evaluates exactly as the CPU kernels did before it moved here
// (the bitwise conformance baseline is the witness).
#pragma once

#include <math.h>

#if defined(__CUDACC__)
#define PB_HD __host__ __device__
#else
#define PB_HD
#endif

namespace pb::kernels::math {

// ---- elementary functions in the argument's precision -----------------------
// (float: the single-precision libm/CUDA function, as std::exp(float) is.)
PB_HD inline float sqrt_a(float x) { return sqrtf(x); }
PB_HD inline double sqrt_a(double x) { return sqrt(x); }
PB_HD inline float exp_a(float x) { return expf(x); }
PB_HD inline double exp_a(double x) { return exp(x); }
PB_HD inline float log_a(float x) { return logf(x); }
PB_HD inline double log_a(double x) { return log(x); }
template <class A>
PB_HD inline A max_a(A a, A b) {  // std::max's rule: a unless a < b
  return a < b ? b : a;
}
template <class A>
PB_HD inline A neg_inf() {
  return -A(INFINITY);
}

// ---- sums: embedding (token + position), residual, bias -------------------
template <class A>
PB_HD inline A add(A a, A b) {
  return a + b;
}

// ---- mixture-of-experts combine: a token's output is its admitted choices'
// expert rows weighted by the renormalized router probabilities, summed in
// A; backward, each choice's weight gradient is dout . y, summed the same way.
template <class A>
PB_HD inline A weighted_add(A acc, A w, A y) {
  return acc + w * y;
}

// ---- LayerNorm (Ba, Kiros, Hinton 2016, eq. 4) -------------------------------
// The row's mean and variance are two-pass sums the device reduces; per row:
//   rstd = 1 / sqrt(var + eps);  y = (x - mean) * rstd * w + b.
template <class A>
PB_HD inline A layernorm_rstd(A var, double eps) {
  return A(1) / sqrt_a(var + A(eps));
}
template <class A>
PB_HD inline A layernorm_out(A x, A mean, A rstd, A w, A b) {
  return (x - mean) * rstd * w + b;
}
// Backward, with xhat = (x - mean) * rstd and g = w * dy; the row reductions
// g_mean = mean(g), gx_mean = mean(g * xhat):
//   dx = rstd * (g - g_mean - xhat * gx_mean);  dw += dy * xhat;  db += dy.
template <class A>
PB_HD inline A layernorm_xhat(A x, A mean, A rstd) {
  return (x - mean) * rstd;
}
template <class A>
PB_HD inline A layernorm_dx(A g, A xhat, A g_mean, A gx_mean, A rstd) {
  return rstd * (g - g_mean - xhat * gx_mean);
}

// ---- RMSNorm (Zhang & Sennrich 2019, eq. 4), no bias -----------------------
// rstd = 1 / sqrt(mean(x^2) + eps);  y = x * rstd * w. Backward, with
// xhat = x * rstd, g = w * dy and the row reduction gx_mean = mean(g * xhat):
//   dx = rstd * (g - xhat * gx_mean);  dw += dy * xhat.
template <class A>
PB_HD inline A rmsnorm_out(A x, A rstd, A w) {
  return x * rstd * w;
}
template <class A>
PB_HD inline A rmsnorm_dx(A g, A xhat, A gx_mean, A rstd) {
  return rstd * (g - xhat * gx_mean);
}

// ---- SwiGLU (Shazeer 2020, eq. 6): silu(gate) * up --------------------------
//   sigmoid(g) = 1 / (1 + exp(-g));  silu(g) = g sigmoid(g);
//   silu'(g) = sigmoid(g) (1 + g (1 - sigmoid(g))).
template <class A>
PB_HD inline A sigmoid(A g) {
  return A(1) / (A(1) + exp_a(-g));
}
template <class A>
PB_HD inline A silu(A g) {
  return g * sigmoid(g);
}
template <class A>
PB_HD inline A silu_grad(A g) {
  const A s = sigmoid(g);
  return s * (A(1) + g * (A(1) - s));
}

// ---- rotary embedding, rotate-half pairs (i, i + hs/2) ----------------------
//   (a, b) -> (a cos - b sin, b cos + a sin); the transpose: (a cos + b sin, b cos - a sin).
template <class A>
PB_HD inline A rope_first(A a, A b, A c, A s) {
  return a * c - b * s;
}
template <class A>
PB_HD inline A rope_second(A a, A b, A c, A s) {
  return b * c + a * s;
}

// ---- softmax cross-entropy (per row of V logits, max mx, sum of exp) ------
//   p_i = exp(x_i - mx) / sum;  loss = (mx - x_target) + log(sum)
// (never -log of a rounded probability); dlogit_i += (p_i - [i = target]) dloss.
template <class A>
PB_HD inline A softmax_prob(A x, A mx, A inv_sum) {
  return exp_a(x - mx) * inv_sum;
}
template <class A>
PB_HD inline A crossentropy_loss(A mx, A x_target, A sum) {
  return (mx - x_target) + log_a(sum);
}
template <class A>
PB_HD inline A crossentropy_grad(A p, bool is_target, A dloss) {
  return (p - (is_target ? A(1) : A(0))) * dloss;
}

// ---- online softmax (FlashAttention, Dao et al. 2022, Alg. 1) ---------------
// A query row's running state: unnormalized output o, max m (-inf: empty),
// sum l. A block of scores with max mx moves the max to m_new = max(m, mx);
// the old state is rescaled by exp(m - m_new), 0 for an empty state.
template <class A>
PB_HD inline A attention_scale(int hs) {
  return A(1) / sqrt_a(A(hs));
}
template <class A>
PB_HD inline A online_rescale(A m_old, A m_new) {
  return m_old == neg_inf<A>() ? A(0) : exp_a(m_old - m_new);
}
// Finalize: out = o / l (0 for a row that saw no key), lse = m + log l (-inf).
template <class A>
PB_HD inline A online_inv_sum(A l) {
  return l > A(0) ? A(1) / l : A(0);
}
template <class A>
PB_HD inline A online_lse(A m, A l) {
  return l > A(0) ? m + log_a(l) : neg_inf<A>();
}
// FlashAttention-2 backward (Dao 2023, Alg. 2), one score s = q.k (unscaled):
//   p = exp(s * scale - lse);  ds = p (dp - D) scale, dp = dO.v, D = rowsum(dO * O).
template <class A>
PB_HD inline A attention_prob(A s, A scale, A lse) {
  return exp_a(s * scale - lse);
}
template <class A>
PB_HD inline A attention_dscore(A p, A dp, A D, A scale) {
  return p * (dp - D) * scale;
}
// Keys [0, result) of a block starting at absolute position k_pos0 are visible
// from a query at absolute position qp (causal: key pos <= query pos).
PB_HD inline int visible_keys(int Tk, int qp, int k_pos0, bool causal) {
  if (!causal) return Tk;
  const int n = qp - k_pos0 + 1;
  return n < 0 ? 0 : (n > Tk ? Tk : n);
}

// ---- GELU, tanh approximation (Hendrycks & Gimpel 2016, sec. 2; GPT-2's) ----
//   gelu(x) = x/2 (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3),
//   gelu'(x) = (1 + tanh u)/2 + x/2 sech^2(u) sqrt(2/pi) (1 + 3*0.044715 x^2).
inline constexpr double kGeluCubic = 0.044715;
// sqrt(2/pi) as std::numbers::sqrt2 * std::numbers::inv_sqrtpi rounds it in
// double (C++20's <numbers> is not in nvcc's C++17 here).
inline constexpr double kSqrt2OverPi = 0x1.9884533d43651p-1;

template <class A>
PB_HD inline A gelu_u(A x) {
  return A(kSqrt2OverPi) * (x + A(kGeluCubic) * x * x * x);
}

// tanh: fp64 keeps libm's (the truth); fp32 is a 13/6-degree rational
// interpolant accurate to a couple of ulps on [-9, 9] (the coefficients Eigen
// uses, generic_fast_tanh_float; +-1 in fp32 beyond): branch-free, so CPU
// loops vectorize, and the same on a GPU.
PB_HD inline double tanh_a(double x) { return tanh(x); }
PB_HD inline float tanh_a(float a) {
  // The clamp as comparisons, not fmaxf/fminf: those are libm calls on the
  // host (IEEE maxNum's NaN rule keeps GCC from inlining them), which kept
  // the GELU loops from vectorizing. Equal for every finite input (and -0);
  // a NaN stays NaN here, and GELU of NaN is NaN either way.
  const float x = a > 9.f ? 9.f : (a < -9.f ? -9.f : a);
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

template <class A>
PB_HD inline A gelu(A x) {
  return A(0.5) * x * (A(1) + tanh_a(gelu_u(x)));
}

// d gelu / dx at x.
template <class A>
PB_HD inline A gelu_grad(A x) {
  const A th = tanh_a(gelu_u(x));
  const A sech2 = A(1) - th * th;
  return A(0.5) * (A(1) + th) + A(0.5) * x * sech2 * A(kSqrt2OverPi) * (A(1) + A(3 * kGeluCubic) * x * x);
}

// ---- AdamW (Loshchilov & Hutter 2019, Alg. 2) in PyTorch's order ----------
//   p *= 1 - lr*wd;  m = lerp(m, g, 1-b1);  v = b2 v + (1-b2) g^2;
//   p -= (lr / (1-b1^t)) * m / (sqrt(v) / sqrt(1-b2^t) + eps).
// The per-step scalars, formed once in double and cast to M by the caller.
template <class M>
struct AdamWCoefs {
  M keep;       // 1 - lr*wd (1 without decay)
  M grad_scale; // global-norm clipping
  M w1, b2, w2; // 1 - beta1, beta2, 1 - beta2
  M step_size;  // lr / (1 - beta1^t)
  M bc2_sqrt;   // sqrt(1 - beta2^t)
  M eps;
};


// One element: the gradient g (already in M), its moments and master value.
template <class M>
PB_HD inline M adamw_update(M p, M& m, M& v, M g, const AdamWCoefs<M>& c, bool decay) {
  g *= c.grad_scale;
  if (decay) p *= c.keep;
  m += c.w1 * (g - m);
  v = v * c.b2 + c.w2 * g * g;
  return p - c.step_size * m / (sqrt_a(v) / c.bc2_sqrt + c.eps);
}

}  // namespace pb::kernels::math
