// Tests of the OpenBLAS-backed linear layer: finite differences (fp64) for
// inp, weight and bias; fp32/bf16 agreement at a BLAS-sized shape; null
// outputs; bf16 accumulation rounded once; determinism for a fixed thread count.
#include <gtest/gtest.h>

#include <stdexcept>

#include "kernels/common/device_ops.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/test_util.h"

namespace pb::kernels {
namespace {

using namespace testing;

struct Problem {
  int N, C, OC;
  std::vector<double> x, w, b, R, dx0, dw0, db0;
  Problem(int n, int c, int oc)
      : N(n), C(c), OC(oc), x(bf16_exact(size_t(n) * c, 1)), w(bf16_exact(size_t(oc) * c, 2)),
        b(bf16_exact(oc, 3)), R(bf16_exact(size_t(n) * oc, 4)), dx0(bf16_exact(size_t(n) * c, 5)),
        dw0(bf16_exact(size_t(oc) * c, 6)), db0(bf16_exact(oc, 7)) {}
};

template <class T>
std::vector<double> forward(const Problem& p) {
  auto x = to<T>(p.x), w = to<T>(p.w), b = to<T>(p.b);
  std::vector<T> out(size_t(p.N) * p.OC);
  std::vector<float> ws(matmul_workspace_floats<T>(p.N, p.C, p.OC));
  matmul_forward(out.data(), x.data(), w.data(), b.data(), p.N, p.C, p.OC, ws.data());
  return to_double(out);
}

struct Grads {
  std::vector<double> dx, dw, db;
};

template <class T>
Grads backward(const Problem& p, bool want_x = true, bool want_w = true, bool want_b = true) {
  auto x = to<T>(p.x), w = to<T>(p.w), dy = to<T>(p.R);
  auto dx = to<T>(p.dx0), dw = to<T>(p.dw0), db = to<T>(p.db0);
  std::vector<float> ws(matmul_workspace_floats<T>(p.N, p.C, p.OC));
  matmul_backward(want_x ? dx.data() : nullptr, want_w ? dw.data() : nullptr,
                  want_b ? db.data() : nullptr, dy.data(), x.data(), w.data(), p.N, p.C, p.OC,
                  ws.data());
  return {to_double(dx), to_double(dw), to_double(db)};
}

TEST(Matmul, BackwardMatchesFiniteDifferences) {
  Problem p(6, 5, 7);
  const Grads g = backward<double>(p);
  auto loss = [&] { return dot(forward<double>(p), p.R); };
  expect_gradient(p.x, minus(g.dx, p.dx0), loss, "dinp");
  expect_gradient(p.w, minus(g.dw, p.dw0), loss, "dweight");
  expect_gradient(p.b, minus(g.db, p.db0), loss, "dbias");
}

TEST(Matmul, Fp32AndBf16AgreeWithFp64) {
  set_blas_threads(2);  // the multi-threaded path too
  Problem p(96, 64, 80);
  const auto y = forward<double>(p);
  EXPECT_LE(rel_err(forward<float>(p), y), kF32Tol);
  EXPECT_LE(rel_err(forward<bf16>(p), y), kBf16Tol);
  const Grads g = backward<double>(p), g32 = backward<float>(p), g16 = backward<bf16>(p);
  for (auto [a, ref] : {std::pair{&g32.dx, &g.dx}, {&g32.dw, &g.dw}, {&g32.db, &g.db}})
    EXPECT_LE(rel_err(*a, *ref), kF32Tol);
  for (auto [a, ref] : {std::pair{&g16.dx, &g.dx}, {&g16.dw, &g.dw}, {&g16.db, &g.db}})
    EXPECT_LE(rel_err(*a, *ref), kBf16Tol);
  set_blas_threads(1);
}

TEST(Matmul, NullOutputsAreSkipped) {
  Problem p(9, 6, 4);
  const Grads full = backward<float>(p);
  const Grads x_only = backward<float>(p, true, false, false);
  const Grads w_only = backward<float>(p, false, true, false);
  const Grads b_only = backward<float>(p, false, false, true);
  EXPECT_EQ(x_only.dx, full.dx);
  EXPECT_EQ(w_only.dw, full.dw);
  EXPECT_EQ(b_only.db, full.db);
  EXPECT_EQ(x_only.dw, p.dw0);
  EXPECT_EQ(x_only.db, p.db0);
  EXPECT_EQ(w_only.dx, p.dx0);
  const Grads full16 = backward<bf16>(p), x16 = backward<bf16>(p, true, false, false),
              w16 = backward<bf16>(p, false, true, false);
  EXPECT_EQ(x16.dx, full16.dx);
  EXPECT_EQ(w16.dw, full16.dw);
}

// Every gradient element of bf16 1.0 gets four 0.003 terms (K = 4): with one
// rounding it becomes bf16(1.012) = 1.0078125, term by term it would stay 1.0.
TEST(Matmul, Bf16AccumulationRoundedOnce) {
  const int n = 4, c = 4, oc = 4;
  std::vector<bf16> x(n * c, bf16(1.0f)), w(oc * c, bf16(1.0f)), dy(n * oc, bf16(0.003f));
  std::vector<bf16> dx(n * c, bf16(1.0f)), dw(oc * c, bf16(1.0f)), db(oc, bf16(1.0f));
  std::vector<float> ws(matmul_workspace_floats<bf16>(n, c, oc));
  matmul_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), n, c, oc,
                  ws.data());
  const float once = static_cast<float>(bf16(1.0f + 4 * static_cast<float>(bf16(0.003f))));
  ASSERT_GT(once, 1.0f);
  for (bf16 v : dx) EXPECT_EQ(static_cast<float>(v), once);
  for (bf16 v : dw) EXPECT_EQ(static_cast<float>(v), once);
  for (bf16 v : db) EXPECT_EQ(static_cast<float>(v), once);
}

TEST(Matmul, WorkspaceOnlyForBf16) {
  EXPECT_EQ(matmul_workspace_floats<double>(8, 4, 2), 0u);
  EXPECT_EQ(matmul_workspace_floats<float>(8, 4, 2), 0u);
  EXPECT_EQ(matmul_workspace_floats<bf16>(8, 4, 2), size_t(8 * 4 + 2 * 4 + 8 * 2 + 8 * 4));
}

TEST(Matmul, DeterministicForFixedThreadCount) {
  Problem p(128, 96, 64);
  for (int threads : {1, 2}) {
    set_blas_threads(threads);
    EXPECT_EQ(forward<float>(p), forward<float>(p));
    const Grads a = backward<float>(p), b = backward<float>(p);
    EXPECT_EQ(a.dx, b.dx);
    EXPECT_EQ(a.dw, b.dw);
  }
  set_blas_threads(1);
}

// The products with their inner sums in slices (the fp64 floor's second
// reference, kernels/common/device_ops.h cpu_ops_sliced): one slice is the
// plain kernel bit for bit; more slices (down to one column, and more slices
// than columns) are the same product in another order of summation, which
// does round differently; through the seam as directly.
template <class T>
std::vector<double> forward_sliced(const Problem& p, int parts) {
  auto x = to<T>(p.x), w = to<T>(p.w), b = to<T>(p.b);
  std::vector<T> out(size_t(p.N) * p.OC);
  matmul_forward_sliced(out.data(), x.data(), w.data(), b.data(), p.N, p.C, p.OC, parts);
  return to_double(out);
}

template <class T>
Grads backward_sliced(const Problem& p, int parts, const DeviceOps<T>* ops = nullptr) {
  auto x = to<T>(p.x), w = to<T>(p.w), dy = to<T>(p.R);
  auto dx = to<T>(p.dx0), dw = to<T>(p.dw0), db = to<T>(p.db0);
  if (ops)
    ops->matmul_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), p.N, p.C, p.OC, nullptr);
  else
    matmul_backward_sliced(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), p.N, p.C, p.OC, parts);
  return {to_double(dx), to_double(dw), to_double(db)};
}

TEST(Matmul, SlicedInnerSumsAreTheSameProductInAnotherOrder) {
  Problem p(96, 64, 80);  // full-precision values: bf16-exact ones would sum exactly in any order
  p.x = random_vec(p.x.size(), 11);
  p.w = random_vec(p.w.size(), 12);
  p.R = random_vec(p.R.size(), 13);
  const auto y = forward<double>(p);
  const Grads g = backward<double>(p);
  EXPECT_EQ(forward_sliced<double>(p, 1), y);
  EXPECT_EQ(forward_sliced<float>(p, 1), forward<float>(p));
  const Grads one = backward_sliced<double>(p, 1);
  EXPECT_EQ(one.dx, g.dx);
  EXPECT_EQ(one.dw, g.dw);
  EXPECT_EQ(one.db, g.db);
  for (int parts : {2, 3, 64, 200}) {  // 64: one column per slice (forward); 200: empty slices
    const auto ys = forward_sliced<double>(p, parts);
    EXPECT_LE(rel_err(ys, y), 1e-14) << parts;
    const Grads gs = backward_sliced<double>(p, parts);
    EXPECT_LE(rel_err(gs.dx, g.dx), 1e-14) << parts;
    EXPECT_LE(rel_err(gs.dw, g.dw), 1e-14) << parts;
    EXPECT_EQ(gs.db, g.db) << parts;  // the bias sum is not a product's
    EXPECT_LE(rel_err(forward_sliced<float>(p, parts), y), kF32Tol) << parts;
  }
  // Another order: three slices of 64 columns (21, 21, 22) round differently.
  EXPECT_NE(forward_sliced<double>(p, 3), y);
  const Grads g3 = backward_sliced<double>(p, 3);
  EXPECT_NE(g3.dx, g.dx);
  EXPECT_NE(g3.dw, g.dw);

  const auto ops = cpu_ops_sliced<double>(3);
  EXPECT_TRUE(ops->is_host());
  EXPECT_EQ(ops->name(), "cpu (inner sums in 3 slices)");
  const Grads seam = backward_sliced<double>(p, 3, ops.get());
  EXPECT_EQ(seam.dx, g3.dx);
  EXPECT_EQ(seam.dw, g3.dw);
  auto x = to<double>(p.x), w = to<double>(p.w), b = to<double>(p.b);
  std::vector<double> out(size_t(p.N) * p.OC);
  ops->matmul_forward(out.data(), x.data(), w.data(), b.data(), p.N, p.C, p.OC, nullptr);
  EXPECT_EQ(out, forward_sliced<double>(p, 3));
  EXPECT_EQ(cpu_ops_sliced<float>(1)->name(), "cpu");
  EXPECT_THROW(cpu_ops_sliced<double>(0), std::invalid_argument);
}

}  // namespace
}  // namespace pb::kernels
