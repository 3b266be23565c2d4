// Every CUDA kernel against the CPU kernel of the same op on the same inputs,
// at fp32 and bf16 (ggml's test-backend-ops is the model): forward outputs,
// accumulated backward outputs, null outputs skipped. Needs a device: without
// one the device tests are skipped with the reason (the argument checks that
// need no device run anyway).
// Tolerances, normwise (max |gpu - cpu| / max |cpu|): fp32, kF32Tol (both
// compute in fp32 in different orders: cuBLAS tiling, FMA contraction, block
// reductions; the bound the CPU tests use against fp64); bf16, 2 kBf16Tol
// (each side rounds its own fp32 value once, plus backward ops re-read a
// rounded forward result). Exact where both sides do one correctly rounded op
// per element (residual, accumulate, scale).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/test_util.h"
#include "kernels/cuda/ops.h"

namespace pb::kernels {
namespace {

using namespace testing;

// The device storage type of a host storage type (same bits for bf16).
template <class T>
using dev_t = std::conditional_t<std::is_same_v<T, bf16>, __nv_bfloat16, T>;
static_assert(sizeof(bf16) == sizeof(__nv_bfloat16));

// A device copy of a host vector, copied back synchronously.
template <class T>
class Dev {
 public:
  explicit Dev(const std::vector<T>& h) : n_(h.size()) {
    EXPECT_EQ(cudaMalloc(&p_, bytes()), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(p_, h.data(), bytes(), cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~Dev() { cudaFree(p_); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  auto* get() {
    if constexpr (std::is_same_v<T, bf16>) return static_cast<__nv_bfloat16*>(p_);
    else return static_cast<T*>(p_);
  }
  std::vector<T> raw() const {
    std::vector<T> h(n_);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(h.data(), p_, bytes(), cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
  std::vector<double> host() const { return to_double(raw()); }

 private:
  size_t bytes() const { return std::max<size_t>(n_, 1) * sizeof(T); }
  size_t n_;
  void* p_ = nullptr;
};

bool have_device(std::string* why) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e == cudaSuccess && count > 0) return true;
  *why = "no CUDA device (cudaGetDeviceCount: " + (e == cudaSuccess ? std::string("0 devices") : cudaGetErrorString(e)) + ")";
  return false;
}

template <class T>
class CudaOps : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!have_device(&why)) GTEST_SKIP() << why;
    ASSERT_EQ(cudaStreamCreate(&stream_), cudaSuccess);
    ASSERT_EQ(cublasCreate(&handle_), CUBLAS_STATUS_SUCCESS);
  }
  void TearDown() override {
    if (handle_) cublasDestroy(handle_);
    if (stream_) cudaStreamDestroy(stream_);
  }
  static double tol() { return std::is_same_v<T, float> ? kF32Tol : 2 * kBf16Tol; }
  // Inputs representable in bf16, so both dtypes see the same values.
  static std::vector<T> in(size_t n, uint64_t seed, double lo = -1, double hi = 1) {
    return to<T>(bf16_exact(n, seed, lo, hi));
  }
  void expect_close(const std::vector<double>& gpu, const std::vector<T>& cpu, const char* what) {
    EXPECT_LE(rel_err(gpu, to_double(cpu)), tol()) << what;
  }
  void expect_close(const std::vector<double>& gpu, const std::vector<float>& cpu, const char* what)
    requires(!std::is_same_v<T, float>)
  {
    EXPECT_LE(rel_err(gpu, to_double(cpu)), tol()) << what;
  }
  cudaStream_t stream_ = nullptr;
  cublasHandle_t handle_ = nullptr;
};

using Types = ::testing::Types<float, bf16>;
TYPED_TEST_SUITE(CudaOps, Types);

TYPED_TEST(CudaOps, Encoder) {
  using T = TypeParam;
  const int B = 3, Tn = 7, C = 20, V = 5;  // few tokens: rows repeat
  const auto inp = random_ints(size_t(B) * Tn, V, 1);
  const auto wte = this->in(size_t(V) * C, 2), wpe = this->in(size_t(Tn) * C, 3), dy = this->in(size_t(B) * Tn * C, 4);
  const auto dwte0 = this->in(size_t(V) * C, 5), dwpe0 = this->in(size_t(Tn) * C, 6);
  std::vector<T> out(size_t(B) * Tn * C), dwte = dwte0, dwpe = dwpe0;
  encoder_forward(out.data(), inp.data(), wte.data(), wpe.data(), B, Tn, C);
  encoder_backward(dwte.data(), dwpe.data(), dy.data(), inp.data(), B, Tn, C);
  Dev<int32_t> ginp(inp);
  Dev<T> gwte(wte), gwpe(wpe), gdy(dy), gout(out), gdwte(dwte0), gdwpe(dwpe0);
  cuda::encoder_forward(gout.get(), ginp.get(), gwte.get(), gwpe.get(), B, Tn, C, this->stream_);
  cuda::encoder_backward(gdwte.get(), gdwpe.get(), gdy.get(), ginp.get(), B, Tn, C, this->stream_);
  EXPECT_EQ(gout.host(), to_double(out));  // one rounded add per element
  this->expect_close(gdwte.host(), dwte, "dwte");
  this->expect_close(gdwpe.host(), dwpe, "dwpe");
}

TYPED_TEST(CudaOps, LayerNorm) {
  using T = TypeParam;
  const int N = 37, C = 300;  // C not a multiple of the block
  const auto x = this->in(size_t(N) * C, 7, -2, 2), w = this->in(C, 8), b = this->in(C, 9), dy = this->in(size_t(N) * C, 10);
  const auto dx0 = this->in(size_t(N) * C, 11), dw0 = this->in(C, 12), db0 = this->in(C, 13);
  std::vector<T> y(size_t(N) * C), dx = dx0, dw = dw0, db = db0;
  std::vector<float> mean(N), rstd(N);
  std::vector<acc_t<T>> cm(N), cr(N);
  layernorm_forward(y.data(), cm.data(), cr.data(), x.data(), w.data(), b.data(), N, C);
  layernorm_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), cm.data(), cr.data(), N, C);
  Dev<T> gx(x), gw(w), gb(b), gdy(dy), gy(y), gdx(dx0), gdw(dw0), gdb(db0);
  Dev<float> gm(mean), gr(rstd);
  cuda::layernorm_forward(gy.get(), gm.get(), gr.get(), gx.get(), gw.get(), gb.get(), N, C, 1e-5, this->stream_);
  cuda::layernorm_backward(gdx.get(), gdw.get(), gdb.get(), gdy.get(), gx.get(), gw.get(), gm.get(), gr.get(), N, C,
                           this->stream_);
  this->expect_close(gy.host(), y, "out");
  EXPECT_LE(rel_err(gm.host(), to_double(cm)), kF32Tol);
  EXPECT_LE(rel_err(gr.host(), to_double(cr)), kF32Tol);
  this->expect_close(gdx.host(), dx, "dinp");
  this->expect_close(gdw.host(), dw, "dweight");
  this->expect_close(gdb.host(), db, "dbias");
}

TYPED_TEST(CudaOps, Matmul) {
  using T = TypeParam;
  const int N = 67, C = 48, OC = 40;
  const auto x = this->in(size_t(N) * C, 14), w = this->in(size_t(OC) * C, 15), bias = this->in(OC, 16),
             dy = this->in(size_t(N) * OC, 17), dx0 = this->in(size_t(N) * C, 18), dw0 = this->in(size_t(OC) * C, 19),
             db0 = this->in(OC, 20);
  std::vector<T> y(size_t(N) * OC), dx = dx0, dw = dw0, db = db0;
  std::vector<float> ws(matmul_workspace_floats<T>(N, C, OC));
  matmul_forward(y.data(), x.data(), w.data(), bias.data(), N, C, OC, ws.data());
  matmul_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), N, C, OC, ws.data());
  Dev<T> gx(x), gw(w), gb(bias), gy(y), gdy(dy), gdx(dx0), gdw(dw0), gdb(db0);
  cuda::matmul_forward(this->handle_, gy.get(), gx.get(), gw.get(), gb.get(), N, C, OC, this->stream_);
  cuda::matmul_backward(this->handle_, gdx.get(), gdw.get(), gdb.get(), gdy.get(), gx.get(), gw.get(), N, C, OC,
                        this->stream_);
  this->expect_close(gy.host(), y, "out");
  this->expect_close(gdx.host(), dx, "dinp");
  this->expect_close(gdw.host(), dw, "dweight");
  this->expect_close(gdb.host(), db, "dbias");
  // A null output is skipped: dweight only leaves dinp untouched.
  Dev<T> gdx2(dx0), gdw2(dw0);
  cuda::matmul_backward(this->handle_, static_cast<dev_t<T>*>(nullptr), gdw2.get(), static_cast<dev_t<T>*>(nullptr),
                        gdy.get(), gx.get(), gw.get(), N, C, OC, this->stream_);
  EXPECT_EQ(gdx2.host(), to_double(dx0));
  EXPECT_EQ(gdw2.host(), gdw.host());
}

TYPED_TEST(CudaOps, Attention) {
  using T = TypeParam;
  const int B = 2, Tn = 9, C = 24, NH = 3;
  const auto qkv = this->in(size_t(B) * Tn * 3 * C, 21), dy = this->in(size_t(B) * Tn * C, 22),
             dqkv0 = this->in(size_t(B) * Tn * 3 * C, 23);
  std::vector<T> out(size_t(B) * Tn * C), att(size_t(B) * NH * Tn * Tn), datt(att.size()), dqkv = dqkv0;
  std::vector<acc_t<T>> ws(attention_workspace_elems<T>(Tn, C, NH));
  attention_forward(out.data(), att.data(), qkv.data(), B, Tn, C, NH, ws.data());
  attention_backward(dqkv.data(), datt.data(), dy.data(), qkv.data(), att.data(), B, Tn, C, NH, ws.data());
  Dev<T> gqkv(qkv), gdy(dy), gout(out), gatt(att), gdatt(datt), gdqkv(dqkv0);
  cuda::attention_forward(gout.get(), gatt.get(), gqkv.get(), B, Tn, C, NH, this->stream_);
  cuda::attention_backward(gdqkv.get(), gdatt.get(), gdy.get(), gqkv.get(), gatt.get(), B, Tn, C, NH, this->stream_);
  this->expect_close(gout.host(), out, "out");
  this->expect_close(gatt.host(), att, "att");
  this->expect_close(gdatt.host(), datt, "datt");
  this->expect_close(gdqkv.host(), dqkv, "dqkv");
}

TYPED_TEST(CudaOps, AttentionBlockwise) {
  using T = TypeParam;
  const int B = 2, Tn = 45, C = 32, NH = 2;  // Tn spans two key tiles
  const auto qkv = this->in(size_t(B) * Tn * 3 * C, 24), dy = this->in(size_t(B) * Tn * C, 25),
             dqkv0 = this->in(size_t(B) * Tn * 3 * C, 26);
  std::vector<T> out(size_t(B) * Tn * C), dqkv = dqkv0;
  std::vector<acc_t<T>> lse(size_t(B) * NH * Tn);
  attention_forward_blockwise(out.data(), lse.data(), qkv.data(), B, Tn, C, NH, 8);
  attention_backward_blockwise(dqkv.data(), dy.data(), out.data(), qkv.data(), lse.data(), B, Tn, C, NH, 8);
  Dev<T> gqkv(qkv), gdy(dy), gout(out), gdqkv(dqkv0);
  Dev<float> glse{std::vector<float>(lse.size())};
  cuda::attention_forward_blockwise(gout.get(), glse.get(), gqkv.get(), B, Tn, C, NH, 8, this->stream_);
  cuda::attention_backward_blockwise(gdqkv.get(), gdy.get(), gout.get(), gqkv.get(), glse.get(), B, Tn, C, NH, 8,
                                     this->stream_);
  this->expect_close(gout.host(), out, "out");
  EXPECT_LE(rel_err(glse.host(), to_double(lse)), kF32Tol);
  this->expect_close(gdqkv.host(), dqkv, "dqkv");
}

// Ring attention's pieces: a query block against two key blocks (the second
// partly masked), merged, finalized, and the backward of one block.
TYPED_TEST(CudaOps, AttentionRowDot) {
  using T = TypeParam;
  const int rows = 21, cols = 16, stride = 40;
  const auto dout = this->in(size_t(rows) * stride, 51), out = this->in(size_t(rows) * stride, 52);
  std::vector<acc_t<T>> D(rows);
  attention_row_dot(D.data(), dout.data(), out.data(), rows, cols, stride);
  Dev<T> gdout(dout), gout(out);
  Dev<float> gD{std::vector<float>(rows)};
  cuda::attention_row_dot(gD.get(), gdout.get(), gout.get(), rows, cols, stride, this->stream_);
  EXPECT_LE(rel_err(gD.host(), to_double(D)), kF32Tol);
}

TYPED_TEST(CudaOps, AttentionBlockPieces) {
  using T = TypeParam;
  const int Tq = 20, Tk = 20, hs = 16, S = 3 * hs;  // q, k, v interleaved in rows of stride S
  const auto qkv = this->in(size_t(Tq + Tk) * S, 27), dy = this->in(size_t(Tq) * hs, 28);
  const T* q = qkv.data() + size_t(Tk) * S;  // queries at positions Tk.., keys at 0.. and Tk..
  std::vector<acc_t<T>> o(size_t(Tq) * hs, 0), m(Tq, -INFINITY), l(Tq, 0), o2 = o, m2 = m, l2 = l;
  attention_block_forward<T>(o.data(), m.data(), l.data(), q, qkv.data() + hs, qkv.data() + 2 * hs, Tq, Tk, hs, S, S,
                             Tk, 0, true);
  attention_block_forward<T>(o2.data(), m2.data(), l2.data(), q, q + hs, q + 2 * hs, Tq, Tk, hs, S, S, Tk, Tk, true);
  attention_block_merge<T>(o.data(), m.data(), l.data(), o2.data(), m2.data(), l2.data(), Tq, hs);
  std::vector<T> out(size_t(Tq) * hs);
  std::vector<acc_t<T>> lse(Tq), D(Tq, 0.25), dq(size_t(Tq) * hs, 0), dk(size_t(Tk) * hs, 0), dv = dk;
  attention_block_finalize<T>(out.data(), lse.data(), o.data(), m.data(), l.data(), Tq, hs, hs);
  attention_block_backward<T>(dq.data(), dk.data(), dv.data(), q, q + hs, q + 2 * hs, dy.data(), lse.data(), D.data(),
                              Tq, Tk, hs, S, S, hs, Tk, Tk, true);

  Dev<T> gqkv(qkv), gdy(dy), gout(out);
  Dev<float> go(std::vector<float>(o.size(), 0)), gm(std::vector<float>(Tq, -INFINITY)), gl(std::vector<float>(Tq, 0)),
      go2(std::vector<float>(o.size(), 0)), gm2(std::vector<float>(Tq, -INFINITY)), gl2(std::vector<float>(Tq, 0)),
      glse{std::vector<float>(Tq)}, gD(std::vector<float>(Tq, 0.25f)), gdq(std::vector<float>(dq.size(), 0)),
      gdk(std::vector<float>(dk.size(), 0)), gdv(std::vector<float>(dv.size(), 0));
  auto* gq = gqkv.get() + size_t(Tk) * S;
  cuda::attention_block_forward(go.get(), gm.get(), gl.get(), gq, gqkv.get() + hs, gqkv.get() + 2 * hs, Tq, Tk, hs, S,
                                S, Tk, 0, true, this->stream_);
  cuda::attention_block_forward(go2.get(), gm2.get(), gl2.get(), gq, gq + hs, gq + 2 * hs, Tq, Tk, hs, S, S, Tk, Tk,
                                true, this->stream_);
  cuda::attention_block_merge(go.get(), gm.get(), gl.get(), go2.get(), gm2.get(), gl2.get(), Tq, hs, this->stream_);
  cuda::attention_block_finalize(gout.get(), glse.get(), go.get(), gm.get(), gl.get(), Tq, hs, hs, this->stream_);
  cuda::attention_block_backward(gdq.get(), gdk.get(), gdv.get(), gq, gq + hs, gq + 2 * hs, gdy.get(), glse.get(),
                                 gD.get(), Tq, Tk, hs, S, S, hs, Tk, Tk, true, this->stream_);
  this->expect_close(gout.host(), out, "out");
  EXPECT_LE(rel_err(glse.host(), to_double(lse)), kF32Tol);
  EXPECT_LE(rel_err(gdq.host(), to_double(dq)), this->tol()) << "dq";
  EXPECT_LE(rel_err(gdk.host(), to_double(dk)), this->tol()) << "dk";
  EXPECT_LE(rel_err(gdv.host(), to_double(dv)), this->tol()) << "dv";
}

constexpr size_t kN = 5000;  // not a multiple of the block size

TYPED_TEST(CudaOps, GeluResidualAccumulateScale) {
  using T = TypeParam;
  const auto x = this->in(kN, 29, -4, 4), dy = this->in(kN, 30), d0 = this->in(kN, 31), b = this->in(kN, 32);
  std::vector<T> y(kN), dx = d0, r(kN), acc = d0;
  gelu_forward(y.data(), x.data(), kN);
  gelu_backward(dx.data(), x.data(), dy.data(), kN);
  residual_forward(r.data(), x.data(), b.data(), kN);
  accumulate(acc.data(), b.data(), kN);
  scale(acc.data(), 0.3, kN);
  Dev<T> gx(x), gy(y), gdy(dy), gdx(d0), gb(b), gr(r), gacc(d0);
  cuda::gelu_forward(gy.get(), gx.get(), kN, this->stream_);
  cuda::gelu_backward(gdx.get(), gx.get(), gdy.get(), kN, this->stream_);
  cuda::residual_forward(gr.get(), gx.get(), gb.get(), kN, this->stream_);
  cuda::accumulate(gacc.get(), gb.get(), kN, this->stream_);
  cuda::scale(gacc.get(), 0.3, kN, this->stream_);
  this->expect_close(gy.host(), y, "gelu");
  this->expect_close(gdx.host(), dx, "gelu dinp");
  EXPECT_EQ(gr.host(), to_double(r));  // one correctly rounded op per element
  EXPECT_EQ(gacc.host(), to_double(acc));
}

TYPED_TEST(CudaOps, CrossEntropy) {
  using T = TypeParam;
  const int N = 13, V = 1000;
  const auto logits = this->in(size_t(N) * V, 33, -6, 6), d0 = this->in(size_t(N) * V, 34);
  const auto targets = random_ints(N, V, 35);
  std::vector<T> probs(logits.size()), d = d0;
  std::vector<acc_t<T>> losses(N);
  crossentropy_forward(losses.data(), probs.data(), logits.data(), targets.data(), N, V);
  crossentropy_backward(d.data(), probs.data(), targets.data(), 1.0 / N, N, V);
  Dev<T> glogits(logits), gprobs(probs), gd(d0);
  Dev<int32_t> gt(targets);
  Dev<float> gloss{std::vector<float>(N)};
  cuda::crossentropy_forward(gloss.get(), gprobs.get(), glogits.get(), gt.get(), N, V, this->stream_);
  cuda::crossentropy_backward(gd.get(), gprobs.get(), gt.get(), 1.0 / N, N, V, this->stream_);
  EXPECT_LE(rel_err(gloss.host(), to_double(losses)), kF32Tol);
  this->expect_close(gprobs.host(), probs, "probs");
  this->expect_close(gd.host(), d, "dlogits");
  // In place (probs aliasing logits), as the CPU allows.
  Dev<T> galias(logits);
  cuda::crossentropy_forward(gloss.get(), galias.get(), galias.get(), gt.get(), N, V, this->stream_);
  this->expect_close(galias.host(), probs, "probs in place");
  // A target outside [0, V) is named, as on the CPU.
  auto bad = targets;
  bad[5] = V;
  Dev<int32_t> gbad(bad);
  try {
    cuda::crossentropy_forward(gloss.get(), gprobs.get(), glogits.get(), gbad.get(), N, V, this->stream_);
    ADD_FAILURE() << "no exception";
  } catch (const std::out_of_range& e) {
    EXPECT_NE(std::string(e.what()).find("target 1000 of row 5"), std::string::npos) << e.what();
  }
  EXPECT_THROW(cuda::crossentropy_backward(gd.get(), gprobs.get(), gbad.get(), 1.0, N, V, this->stream_),
               std::out_of_range);
}

TYPED_TEST(CudaOps, AccumulateRows) {
  using T = TypeParam;
  const size_t rows = 17, cols = 24, ds = 40, ss = 30;  // strided on both sides
  const auto dst0 = this->in(rows * ds, 49), src = this->in(rows * ss, 50);
  std::vector<T> dst = dst0;
  for (size_t r = 0; r < rows; ++r) accumulate(dst.data() + r * ds, src.data() + r * ss, cols);
  Dev<T> gdst(dst0), gsrc(src);
  cuda::accumulate_rows(gdst.get(), ds, gsrc.get(), ss, cols, rows, this->stream_);
  EXPECT_EQ(gdst.host(), to_double(dst));  // one rounded add per element; the gaps untouched
  // From fp32 rows (ring attention's gradients into qkv), and fill.
  std::vector<float> a(rows * ss);
  for (size_t i = 0; i < a.size(); ++i) a[i] = float(src[i]) * 0.75f;
  std::vector<T> dsta = dst0;
  for (size_t r = 0; r < rows; ++r)
    for (size_t c = 0; c < cols; ++c) dsta[r * ds + c] = T(float(dsta[r * ds + c]) + a[r * ss + c]);
  Dev<T> gdsta(dst0);
  Dev<float> ga(a);
  cuda::accumulate_rows(gdsta.get(), ds, ga.get(), ss, cols, rows, this->stream_);
  EXPECT_EQ(gdsta.host(), to_double(dsta));
  cuda::fill(ga.get(), -INFINITY, a.size(), this->stream_);
  for (double v : ga.host()) EXPECT_EQ(v, -INFINITY);
}

TYPED_TEST(CudaOps, RowsOfATable) {
  using T = TypeParam;
  const int N = 29, C = 33, V = 12, first = 4, rows = 5;  // a shard: rows [4, 9) of 12
  const auto idx = random_ints(size_t(N), V, 40);
  const auto table = this->in(size_t(V) * C, 41), x0 = this->in(size_t(N) * C, 42), dy = this->in(size_t(N) * C, 43);
  const auto dt0 = this->in(size_t(V) * C, 44), db0 = this->in(size_t(C), 45);
  std::vector<T> out(size_t(N) * C), x = x0, xb = x0, dt = dt0, db = db0;
  const T* shard = table.data() + size_t(first) * C;
  embedding_lookup(out.data(), idx.data(), shard, N, C, first, rows);
  add_rows(x.data(), table.data(), idx.data(), N, C);
  add_rows(xb.data(), table.data(), nullptr, N, C);
  add_rows_backward(dt.data(), dy.data(), idx.data(), N, C, first, rows);
  add_rows_backward(db.data(), dy.data(), nullptr, N, C, 0, 1);
  Dev<int32_t> gidx(idx);
  Dev<T> gtable(table), gout(out), gx(x0), gxb(x0), gdt(dt0), gdb(db0), gdy(dy);
  cuda::embedding_lookup(gout.get(), gidx.get(), gtable.get() + size_t(first) * C, N, C, first, rows, this->stream_);
  cuda::add_rows(gx.get(), gtable.get(), gidx.get(), N, C, this->stream_);
  cuda::add_rows(gxb.get(), gtable.get(), nullptr, N, C, this->stream_);
  cuda::add_rows_backward(gdt.get(), gdy.get(), gidx.get(), N, C, first, rows, this->stream_);
  cuda::add_rows_backward(gdb.get(), gdy.get(), nullptr, N, C, 0, 1, this->stream_);
  EXPECT_EQ(gout.host(), to_double(out));  // copies and zeros
  EXPECT_EQ(gx.host(), to_double(x));      // one rounded add per element
  EXPECT_EQ(gxb.host(), to_double(xb));
  this->expect_close(gdt.host(), dt, "dtable (the rows outside the shard untouched)");
  this->expect_close(gdb.host(), db, "dbias");
}

TYPED_TEST(CudaOps, MixtureOfExpertsRows) {
  using T = TypeParam;
  const int N = 37, K = 2, E = 5, C = 70, rows = 12;  // capacity 12 of 74 choices: some dropped
  std::vector<int32_t> choice(size_t(N) * K), slot(choice.size()), count(size_t(E), 0);
  const auto r = random_ints(choice.size(), E - 1, 50);
  for (int n = 0; n < N; ++n) {  // two distinct experts per token
    choice[size_t(n) * K] = r[size_t(n) * K];
    choice[size_t(n) * K + 1] = (r[size_t(n) * K] + 1 + r[size_t(n) * K + 1]) % E;
  }
  for (int j = 0; j < K; ++j)  // first choices first, in token order
    for (int n = 0; n < N; ++n) {
      int32_t& c = count[size_t(choice[size_t(n) * K + j])];
      slot[size_t(n) * K + j] = c < rows ? c++ : -1;
    }
  const auto x = this->in(size_t(N) * C, 51), y = this->in(size_t(E) * rows * C, 52);
  const auto dout = this->in(size_t(N) * C, 53), out0 = this->in(size_t(N) * C, 54);
  const auto fill = this->in(size_t(E) * rows * C, 55);
  std::vector<float> w(choice.size());
  for (size_t i = 0; i < w.size(); ++i) w[i] = float(r[i] + 1) / float(E + 1);
  std::vector<T> xe = fill, out(out0.size()), acc = out0, dy = fill;
  std::vector<float> dw(choice.size());
  moe_scatter_rows(xe.data(), x.data(), choice.data(), slot.data(), N, K, C, rows);
  moe_combine(out.data(), y.data(), choice.data(), slot.data(), w.data(), N, K, C, rows, false);
  moe_combine(acc.data(), y.data(), choice.data(), slot.data(), static_cast<const float*>(nullptr), N, K, C, rows,
              true);
  moe_combine_backward(dy.data(), dw.data(), dout.data(), y.data(), choice.data(), slot.data(), w.data(), N, K, C,
                       rows);
  Dev<int32_t> gchoice(choice), gslot(slot);
  Dev<float> gw(w), gdw(dw);
  Dev<T> gx(x), gy(y), gdout(dout), gxe(fill), gout(out0), gacc(out0), gdy(fill);
  cuda::moe_scatter_rows(gxe.get(), gx.get(), gchoice.get(), gslot.get(), N, K, C, rows, this->stream_);
  cuda::moe_combine(gout.get(), gy.get(), gchoice.get(), gslot.get(), gw.get(), N, K, C, rows, false, this->stream_);
  cuda::moe_combine(gacc.get(), gy.get(), gchoice.get(), gslot.get(), nullptr, N, K, C, rows, true, this->stream_);
  cuda::moe_combine_backward(gdy.get(), gdw.get(), gdout.get(), gy.get(), gchoice.get(), gslot.get(), gw.get(), N,
                             K, C, rows, this->stream_);
  EXPECT_EQ(gxe.host(), to_double(xe));  // copies; the dropped choices' rows untouched
  this->expect_close(gout.host(), out, "combine (weighted, stored)");
  this->expect_close(gacc.host(), acc, "combine (unweighted, accumulated)");
  EXPECT_EQ(gdy.host(), to_double(dy));  // one rounded product per element
  std::vector<double> dwd(dw.begin(), dw.end());
  EXPECT_LT(rel_err(gdw.host(), dwd), kF32Tol) << "dw";
}

TYPED_TEST(CudaOps, VocabShardCrossEntropy) {
  using T = TypeParam;
  const int N = 11, Vr = 700, valid = 650;  // a shard of rows [1400, 2100): 50 padding rows
  const int64_t first = 1400;
  const auto logits = this->in(size_t(N) * Vr, 46, -6, 6), d0 = this->in(size_t(N) * Vr, 47);
  auto targets = random_ints(size_t(N), 2 * Vr, 48);
  for (int n = 0; n < N; n += 2) targets[size_t(n)] += int32_t(first);  // half of them on this shard
  std::vector<acc_t<T>> mx(N), sum(N), xt(N), losses(N);
  std::vector<T> probs(logits.size()), d = d0;
  vocab_logit_max(mx.data(), logits.data(), N, Vr, valid);
  vocab_sum_exp(sum.data(), xt.data(), logits.data(), mx.data(), targets.data(), first, N, Vr, valid);
  vocab_softmax_loss(losses.data(), probs.data(), logits.data(), mx.data(), sum.data(), xt.data(), N, Vr, valid);
  vocab_crossentropy_backward(d.data(), probs.data(), targets.data(), first, 0.5, N, Vr, valid);
  Dev<T> glogits(logits), gprobs(probs), gd(d0);
  Dev<int32_t> gt(targets);
  const std::vector<float> zeros(N);
  Dev<float> gmx(zeros), gsum(zeros), gxt(zeros), gloss(zeros);
  cuda::vocab_logit_max(gmx.get(), glogits.get(), N, Vr, valid, this->stream_);
  cuda::vocab_sum_exp(gsum.get(), gxt.get(), glogits.get(), gmx.get(), gt.get(), first, N, Vr, valid, this->stream_);
  // Probabilities in place of the logits, as the tensor-parallel head writes them.
  cuda::vocab_softmax_loss(gloss.get(), glogits.get(), glogits.get(), gmx.get(), gsum.get(), gxt.get(), N, Vr, valid,
                           this->stream_);
  cuda::vocab_crossentropy_backward(gd.get(), glogits.get(), gt.get(), first, 0.5, N, Vr, valid, this->stream_);
  EXPECT_EQ(gmx.host(), to_double(mx));  // a max is exact
  EXPECT_EQ(gxt.host(), to_double(xt));  // a read
  EXPECT_LE(rel_err(gsum.host(), to_double(sum)), kF32Tol);
  EXPECT_LE(rel_err(gloss.host(), to_double(losses)), kF32Tol);
  this->expect_close(glogits.host(), probs, "probs (0 in the padding)");
  this->expect_close(gd.host(), d, "dlogits (the padding untouched)");
}

TYPED_TEST(CudaOps, AdamWAndSumSquares) {
  using T = TypeParam;
  const auto g = this->in(kN, 36, -0.01, 0.01);
  const auto p0 = to<float>(bf16_exact(kN, 37, -0.1, 0.1));
  std::vector<float> master = p0, m(kN), v(kN);
  std::vector<T> param(kN);
  Dev<T> gg(g), gparam(param);
  Dev<float> gmaster(p0), gm(m), gv(v);
  AdamWHyper h;
  h.lr = 1e-3;
  h.grad_scale = 0.5;
  for (long s = 1; s <= 3; ++s) {
    h.step = s;
    adamw_step<T, float>(master.data(), param.data(), g.data(), m.data(), v.data(), kN, h, true);
    cuda::adamw_step(gmaster.get(), gparam.get(), gg.get(), gm.get(), gv.get(), kN, h.lr, h.beta1, h.beta2, h.eps,
                     h.weight_decay, s, h.grad_scale, true, this->stream_);
  }
  EXPECT_LE(rel_err(gmaster.host(), to_double(master)), kF32Tol);
  EXPECT_LE(rel_err(gm.host(), to_double(m)), kF32Tol);
  EXPECT_LE(rel_err(gv.host(), to_double(v)), kF32Tol);
  this->expect_close(gparam.host(), param, "param_out");
  const double cpu = sum_squares(g.data(), kN), gpu = cuda::sum_squares(gg.get(), kN, this->stream_);
  EXPECT_NEAR(gpu, cpu, 1e-12 * cpu);
}

// Argument checks that throw before any CUDA call: they run without a device.
TEST(CudaOpsArguments, HeadSizeAboveTheLimitIsRefused) {
  const int hs = cuda::kMaxHeadSize + 1;
  try {
    cuda::attention_block_forward<float>(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 4, 4, hs, hs, hs, 0,
                                         0, true, nullptr);
    ADD_FAILURE() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("head size 257 outside [1, 256]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(cuda::attention_forward<float>(nullptr, nullptr, nullptr, 1, 4, 2 * hs, 2, nullptr),
               std::invalid_argument);
  EXPECT_THROW(cuda::attention_forward_blockwise<float>(nullptr, nullptr, nullptr, 1, 4, 0, 1, 8, nullptr),
               std::invalid_argument);
}

TEST(CudaOpsArguments, AdamWStepIsOneBased) {
  EXPECT_THROW(cuda::adamw_step<float>(nullptr, nullptr, nullptr, nullptr, nullptr, 4, 1e-3, 0.9, 0.95, 1e-8, 0.1, 0,
                                       1.0, true, nullptr),
               std::invalid_argument);
}

}  // namespace
}  // namespace pb::kernels
