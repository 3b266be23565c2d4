// The CUDA kernels against the CPU kernels (fp32) on the same inputs. Needs a
// device: without one every test is skipped with the reason.
// Tolerance: both sides compute in fp32 but in different orders (cuBLAS
// tiling, FMA contraction), so they agree to the fp32
// bound the CPU tests use against fp64 (kF32Tol, normwise).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/test_util.h"
#include "kernels/cuda/ops.h"

namespace pb::kernels {
namespace {

using namespace testing;

// A device vector of floats, copied in and out synchronously.
class DeviceVec {
 public:
  explicit DeviceVec(const std::vector<float>& h) : n_(h.size()) {
    EXPECT_EQ(cudaMalloc(&p_, n_ * sizeof(float)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(p_, h.data(), n_ * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~DeviceVec() { cudaFree(p_); }
  DeviceVec(const DeviceVec&) = delete;
  DeviceVec& operator=(const DeviceVec&) = delete;
  float* get() { return static_cast<float*>(p_); }
  std::vector<double> host() const {
    std::vector<float> h(n_);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(h.data(), p_, n_ * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
    return to_double(h);
  }

 private:
  size_t n_;
  void* p_ = nullptr;
};

class CudaKernels : public ::testing::Test {
 protected:
  void SetUp() override {
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0)
      GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount: "
                   << (e == cudaSuccess ? std::string("0 devices") : cudaGetErrorString(e)) << ")";
    ASSERT_EQ(cudaStreamCreate(&stream_), cudaSuccess);
    ASSERT_EQ(cublasCreate(&handle_), CUBLAS_STATUS_SUCCESS);
  }
  void TearDown() override {
    if (handle_) cublasDestroy(handle_);
    if (stream_) cudaStreamDestroy(stream_);
  }
  cudaStream_t stream_ = nullptr;
  cublasHandle_t handle_ = nullptr;
};

constexpr size_t kN = 5000;  // not a multiple of the block size

TEST_F(CudaKernels, GeluMatchesCpu) {
  const auto x = to<float>(random_vec(kN, 1, -4, 4)), dy = to<float>(random_vec(kN, 2)),
             d0 = to<float>(random_vec(kN, 3));
  std::vector<float> y(kN), dx = d0;
  gelu_forward(y.data(), x.data(), kN);
  gelu_backward(dx.data(), x.data(), dy.data(), kN);
  DeviceVec gx(x), gy(y), gdy(dy), gdx(d0);
  cuda::gelu_forward(gy.get(), gx.get(), kN, stream_);
  cuda::gelu_backward(gdx.get(), gx.get(), gdy.get(), kN, stream_);
  EXPECT_LE(rel_err(gy.host(), to_double(y)), kF32Tol);
  EXPECT_LE(rel_err(gdx.host(), to_double(dx)), kF32Tol);
}

TEST_F(CudaKernels, AdamWMatchesCpu) {
  // Three steps with decay and a clip factor; the element update is the
  // shared kernels/common/math.h function on both sides.
  const auto g = to<float>(random_vec(kN, 6, -0.01, 0.01)), p0 = to<float>(random_vec(kN, 7, -0.1, 0.1));
  std::vector<float> master = p0, m(kN), v(kN);
  DeviceVec gg(g), gmaster(p0), gm(m), gv(v);
  AdamWHyper h;
  h.lr = 1e-3;
  h.grad_scale = 0.5;
  for (long s = 1; s <= 3; ++s) {
    h.step = s;
    adamw_step<float, float>(master.data(), nullptr, g.data(), m.data(), v.data(), kN, h, true);
    cuda::adamw_step(gmaster.get(), nullptr, gg.get(), gm.get(), gv.get(), kN, h.lr, h.beta1, h.beta2, h.eps,
                     h.weight_decay, s, h.grad_scale, true, stream_);
  }
  EXPECT_LE(rel_err(gmaster.host(), to_double(master)), kF32Tol);
  EXPECT_LE(rel_err(gm.host(), to_double(m)), kF32Tol);
  EXPECT_LE(rel_err(gv.host(), to_double(v)), kF32Tol);
}

TEST_F(CudaKernels, ResidualAccumulateScaleMatchCpu) {
  const auto a = to<float>(random_vec(kN, 4)), b = to<float>(random_vec(kN, 5));
  std::vector<float> out(kN), acc = a;
  residual_forward(out.data(), a.data(), b.data(), kN);
  accumulate(acc.data(), b.data(), kN);
  scale(acc.data(), 0.3, kN);
  DeviceVec ga(a), gb(b), gout(out), gacc(a);
  cuda::residual_forward(gout.get(), ga.get(), gb.get(), kN, stream_);
  cuda::accumulate(gacc.get(), gb.get(), kN, stream_);
  cuda::scale(gacc.get(), 0.3, kN, stream_);
  EXPECT_EQ(gout.host(), to_double(out));  // one correctly rounded op per element
  EXPECT_EQ(gacc.host(), to_double(acc));
}

TEST_F(CudaKernels, MatmulMatchesCpu) {
  const int N = 67, C = 48, OC = 40;
  const auto x = to<float>(random_vec(size_t(N) * C, 6)), w = to<float>(random_vec(size_t(OC) * C, 7)),
             bias = to<float>(random_vec(OC, 8)), dy = to<float>(random_vec(size_t(N) * OC, 9)),
             dx0 = to<float>(random_vec(size_t(N) * C, 10)),
             dw0 = to<float>(random_vec(size_t(OC) * C, 11)), db0 = to<float>(random_vec(OC, 12));
  std::vector<float> y(size_t(N) * OC), dx = dx0, dw = dw0, db = db0;
  matmul_forward(y.data(), x.data(), w.data(), bias.data(), N, C, OC, nullptr);
  matmul_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), N, C, OC, nullptr);
  DeviceVec gx(x), gw(w), gb(bias), gy(y), gdy(dy), gdx(dx0), gdw(dw0), gdb(db0);
  cuda::matmul_forward(handle_, gy.get(), gx.get(), gw.get(), gb.get(), N, C, OC, stream_);
  cuda::matmul_backward(handle_, gdx.get(), gdw.get(), gdb.get(), gdy.get(), gx.get(), gw.get(), N,
                        C, OC, stream_);
  EXPECT_LE(rel_err(gy.host(), to_double(y)), kF32Tol);
  EXPECT_LE(rel_err(gdx.host(), to_double(dx)), kF32Tol);
  EXPECT_LE(rel_err(gdw.host(), to_double(dw)), kF32Tol);
  EXPECT_LE(rel_err(gdb.host(), to_double(db)), kF32Tol);
  // A null output is skipped: dweight only leaves dinp untouched.
  DeviceVec gdx2(dx0), gdw2(dw0);
  cuda::matmul_backward(handle_, nullptr, gdw2.get(), nullptr, gdy.get(), gx.get(), gw.get(), N, C,
                        OC, stream_);
  EXPECT_EQ(gdx2.host(), to_double(dx0));
  EXPECT_EQ(gdw2.host(), gdw.host());
}

}  // namespace
}  // namespace pb::kernels
