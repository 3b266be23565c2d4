// LayerNorm over the last dim on the device, forward and backward; the
// per-element math is kernels/common/math.h's (the CPU kernel's own).
// Invariants: one 256-thread block per row; mean and variance are two-pass
// block sums in fp32 (no E[x^2]-E[x]^2 cancellation); dweight/dbias are summed
// over all rows in row order by one thread per channel and added once.
#include "kernels/common/math.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/ops.h"

namespace pb::kernels::cuda {

using namespace detail;  // load/store, add_into, indexing, reductions, check

namespace {

constexpr int kThreads = 256;

template <class T>
__global__ void layernorm_forward_kernel(T* out, float* mean, float* rstd, const T* inp, const T* weight,
                                         const T* bias, int C, double eps) {
  __shared__ float scratch[kThreads / 32];
  const size_t row = blockIdx.x;
  const T* x = inp + row * C;
  float s = 0.0f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) s += load(x[c]);
  const float mu = block_sum(s, scratch) / float(C);
  float v = 0.0f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const float d = load(x[c]) - mu;
    v += d * d;
  }
  const float rs = math::layernorm_rstd(block_sum(v, scratch) / float(C), eps);
  T* o = out + row * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x)
    o[c] = store<T>(math::layernorm_out(load(x[c]), mu, rs, load(weight[c]), load(bias[c])));
  if (threadIdx.x == 0) {
    if (mean) mean[row] = mu;
    if (rstd) rstd[row] = rs;
  }
}

template <class T>
__global__ void layernorm_dinp_kernel(T* dinp, const T* dout, const T* inp, const T* weight, const float* mean,
                                      const float* rstd, int C) {
  __shared__ float scratch[kThreads / 32];
  const size_t row = blockIdx.x;
  const T* x = inp + row * C;
  const T* dy = dout + row * C;
  const float mu = mean[row], rs = rstd[row];
  float g_sum = 0.0f, gx_sum = 0.0f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const float g = load(weight[c]) * load(dy[c]);
    g_sum += g;
    gx_sum += g * math::layernorm_xhat(load(x[c]), mu, rs);
  }
  const float g_mean = block_sum(g_sum, scratch) / float(C);
  const float gx_mean = block_sum(gx_sum, scratch) / float(C);
  T* dx = dinp + row * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const float xhat = math::layernorm_xhat(load(x[c]), mu, rs);
    add_into(dx[c], math::layernorm_dx(load(weight[c]) * load(dy[c]), xhat, g_mean, gx_mean, rs));
  }
}

template <class T>
__global__ void layernorm_dparams_kernel(T* dweight, T* dbias, const T* dout, const T* inp, const float* mean,
                                         const float* rstd, int N, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float dw = 0.0f, db = 0.0f;
  for (int n = 0; n < N; ++n) {
    const float dy = load(dout[size_t(n) * C + c]);
    dw += dy * math::layernorm_xhat(load(inp[size_t(n) * C + c]), mean[n], rstd[n]);
    db += dy;
  }
  if (dweight) add_into(dweight[c], dw);
  if (dbias) add_into(dbias[c], db);
}

}  // namespace

template <class T>
void layernorm_forward(T* out, float* mean, float* rstd, const T* inp, const T* weight, const T* bias, int N,
                       int C, double eps, cudaStream_t stream) {
  if (N == 0 || C == 0) return;
  layernorm_forward_kernel<<<N, kThreads, 0, stream>>>(out, mean, rstd, inp, weight, bias, C, eps);
  check(cudaGetLastError(), "layernorm_forward launch");
}

template <class T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                        const float* mean, const float* rstd, int N, int C, cudaStream_t stream) {
  if (N == 0 || C == 0) return;
  if (dinp) {
    layernorm_dinp_kernel<<<N, kThreads, 0, stream>>>(dinp, dout, inp, weight, mean, rstd, C);
    check(cudaGetLastError(), "layernorm_backward dinp launch");
  }
  if (dweight || dbias) {
    layernorm_dparams_kernel<<<(C + 255) / 256, 256, 0, stream>>>(dweight, dbias, dout, inp, mean, rstd, N, C);
    check(cudaGetLastError(), "layernorm_backward dweight/dbias launch");
  }
}

#define PB_INSTANTIATE(T)                                                                                   \
  template void layernorm_forward<T>(T*, float*, float*, const T*, const T*, const T*, int, int, double,     \
                                     cudaStream_t);                                                         \
  template void layernorm_backward<T>(T*, T*, T*, const T*, const T*, const T*, const float*, const float*, \
                                      int, int, cudaStream_t);
PB_CUDA_FOR_EACH_DTYPE(PB_INSTANTIATE)
#undef PB_INSTANTIATE

}  // namespace pb::kernels::cuda
