// Linear layer out = inp @ weight^T + bias and its backward, on OpenBLAS
// (row-major cblas_dgemm / cblas_sgemm). bf16 is converted to fp32 in the
// caller's workspace, multiplied with sgemm, and rounded once.
// Invariants: for bf16 every backward contribution is computed by sgemm with
// beta = 0 into workspace and then added by add_into(), so the destination is
// rounded exactly once; fp32/fp64 accumulate with beta = 1. Results depend only
// on the BLAS thread count (OpenBLAS partitions statically).
#include <algorithm>
#include <cblas.h>
#include <type_traits>
#include <vector>

#include "kernels/cpu/blas.h"
#include "kernels/cpu/numeric.h"
#include "kernels/cpu/ops.h"

namespace pb::kernels {

using detail::add_into;
using detail::gemm;
using detail::load;
using detail::store;

void set_blas_threads(int n) { openblas_set_num_threads(std::max(1, n)); }

namespace {

float* to_float(float* dst, const bf16* src, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = static_cast<float>(src[i]);
  return dst;
}

// dbias (OC) += column sums of dout (N,OC), summed in A over rows in order.
template <class T>
void bias_backward(T* dbias, const T* dout, int N, int OC) {
  std::vector<acc_t<T>> acc(size_t(OC), acc_t<T>(0));
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < OC; ++o) acc[o] += load(dout[size_t(n) * OC + o]);
  for (int o = 0; o < OC; ++o) add_into(dbias[o], acc[o]);
}

}  // namespace

// bf16 layout of ws: [inp (N*C) | weight (OC*C) | dout or out (N*OC) | result
// (max(N*C, OC*C))]; the forward uses the first three.
template <class T>
size_t matmul_workspace_floats(int N, int C, int OC) {
  if constexpr (!std::is_same_v<T, bf16>) return 0;
  const size_t nc = size_t(N) * C, oc = size_t(OC) * C, no = size_t(N) * OC;
  return nc + oc + no + std::max(nc, oc);
}

template <class T>
void matmul_forward(T* out, const T* inp, const T* weight, const T* bias, int N, int C, int OC,
                    float* ws) {
  if constexpr (std::is_same_v<T, bf16>) {
    const float* x = to_float(ws, inp, size_t(N) * C);
    const float* w = to_float(ws + size_t(N) * C, weight, size_t(OC) * C);
    float* y = ws + size_t(N) * C + size_t(OC) * C;
    gemm(false, true, N, OC, C, x, C, w, C, 0.0f, y, OC);
    for (int n = 0; n < N; ++n)
      for (int o = 0; o < OC; ++o) {
        const size_t i = size_t(n) * OC + o;
        out[i] = bf16(y[i] + (bias ? static_cast<float>(bias[o]) : 0.0f));
      }
  } else {
    matmul_forward_sliced(out, inp, weight, bias, N, C, OC, 1);  // one slice: the whole inner sum
  }
}

template <class T>
void matmul_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                     int N, int C, int OC, float* ws) {
  if constexpr (std::is_same_v<T, bf16>) {
    if (dbias) bias_backward(dbias, dout, N, OC);
    const size_t nc = size_t(N) * C, oc = size_t(OC) * C;
    float* x = ws;
    float* w = ws + nc;
    const float* dy = to_float(ws + nc + oc, dout, size_t(N) * OC);
    float* r = ws + nc + oc + size_t(N) * OC;
    if (dinp) {
      gemm(false, false, N, C, OC, dy, OC, to_float(w, weight, oc), C, 0.0f, r, C);
      for (size_t i = 0; i < nc; ++i) add_into(dinp[i], r[i]);
    }
    if (dweight) {
      gemm(true, false, OC, C, N, dy, OC, to_float(x, inp, nc), C, 0.0f, r, C);
      for (size_t i = 0; i < oc; ++i) add_into(dweight[i], r[i]);
    }
  } else {
    matmul_backward_sliced(dinp, dweight, dbias, dout, inp, weight, N, C, OC, 1);  // one slice: the whole sums
  }
}

// Bias first, then each slice with beta = 1: one pass over out, no separate
// add. One slice is matmul_forward's fp32/fp64 path.
template <class T>
void matmul_forward_sliced(T* out, const T* inp, const T* weight, const T* bias, int N, int C, int OC, int parts) {
  static_assert(!std::is_same_v<T, bf16>, "sliced inner sums: fp32 and fp64 only");
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < OC; ++o) out[size_t(n) * OC + o] = bias ? bias[o] : T(0);
  for (int p = 0; p < parts; ++p) {  // columns [c0, c1) of inp and weight
    const int c0 = int(int64_t(C) * p / parts), c1 = int(int64_t(C) * (p + 1) / parts);
    if (c1 > c0) gemm(false, true, N, OC, c1 - c0, inp + c0, C, weight + c0, C, T(1), out, OC);
  }
}

// The bias first, then per slice dinp and dweight; one slice is
// matmul_backward's fp32/fp64 path.
template <class T>
void matmul_backward_sliced(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, int N, int C,
                            int OC, int parts) {
  static_assert(!std::is_same_v<T, bf16>, "sliced inner sums: fp32 and fp64 only");
  if (dbias) bias_backward(dbias, dout, N, OC);
  for (int p = 0; p < parts; ++p) {
    const int o0 = int(int64_t(OC) * p / parts), o1 = int(int64_t(OC) * (p + 1) / parts);  // dinp: over OC
    if (dinp && o1 > o0) gemm(false, false, N, C, o1 - o0, dout + o0, OC, weight + size_t(o0) * C, C, T(1), dinp, C);
    const int n0 = int(int64_t(N) * p / parts), n1 = int(int64_t(N) * (p + 1) / parts);  // dweight: over rows
    if (dweight && n1 > n0)
      gemm(true, false, OC, C, n1 - n0, dout + size_t(n0) * OC, OC, inp + size_t(n0) * C, C, T(1), dweight, C);
  }
}

template void matmul_forward_sliced<double>(double*, const double*, const double*, const double*, int, int, int, int);
template void matmul_forward_sliced<float>(float*, const float*, const float*, const float*, int, int, int, int);
template void matmul_backward_sliced<double>(double*, double*, double*, const double*, const double*, const double*,
                                             int, int, int, int);
template void matmul_backward_sliced<float>(float*, float*, float*, const float*, const float*, const float*, int,
                                            int, int, int);

#define PB_INSTANTIATE(T)                                                                         \
  template size_t matmul_workspace_floats<T>(int, int, int);                                      \
  template void matmul_forward<T>(T*, const T*, const T*, const T*, int, int, int, float*);       \
  template void matmul_backward<T>(T*, T*, T*, const T*, const T*, const T*, int, int, int,       \
                                   float*);
PB_KERNELS_FOR_EACH_DTYPE(PB_INSTANTIATE)
#undef PB_INSTANTIATE

}  // namespace pb::kernels
