// Measured single-thread fp32 GEMM throughput: the default MFU peak, the
// yardstick of the step benchmark's "60% of sgemm" target, and the rate at a
// model's own GEMM shapes (the planner's measured GEMM efficiency).
#pragma once

namespace pb::kernels {

// GFLOP/s (2 n^3 flops per call) of cblas_sgemm on n x n row-major matrices
// with one BLAS thread, timed (calling thread's CPU time) over at least
// min_seconds after one untimed warm-up call. Temporarily sets the
// process-wide OpenBLAS thread count to 1 and restores it; do not call while
// another thread runs BLAS.
// Throws std::invalid_argument unless n > 0 and min_seconds >= 0.
double measure_sgemm_gflops(int n, double min_seconds);

// The same for C (m x n) = op(A) op(B) with inner dimension k, row-major, A
// transposed when trans_a (stored k x m), B when trans_b (stored n x k): the
// rate BLAS reaches at a model's own GEMM shapes. 2 m n k flops per call.
// Throws std::invalid_argument unless m, n, k > 0 and min_seconds >= 0.
double measure_sgemm_gflops(int m, int n, int k, bool trans_a, bool trans_b, double min_seconds);

}  // namespace pb::kernels
