// Internal: one row-major GEMM entry point over OpenBLAS for the kernels that
// multiply (matmul, attention), overloaded on float / double.
// Invariant: C = op(A) op(B) + beta C with alpha = 1; results depend only on
// the BLAS thread count set by set_blas_threads().
#pragma once
#include <cblas.h>

namespace pb::kernels::detail {

// C (M,N) = op(A) (M,K) . op(B) (K,N) + beta * C; ta/tb transpose A/B.
inline void gemm(bool ta, bool tb, int M, int N, int K, const double* a, int lda, const double* b,
                 int ldb, double beta, double* c, int ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N,
              K, 1.0, a, lda, b, ldb, beta, c, ldc);
}
inline void gemm(bool ta, bool tb, int M, int N, int K, const float* a, int lda, const float* b,
                 int ldb, float beta, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N,
              K, 1.0f, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace pb::kernels::detail
