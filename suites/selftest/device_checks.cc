#include "suites/selftest/device_checks.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "harness/status.h"
#include "kernels/common/device_ops.h"
#include "kernels/cpu/ops.h"
#include "suites/selftest/kernel_checks.h"

namespace pb::selftest {
namespace {

using kernels::DeviceOps;

constexpr double kF32Tol = 128 * 1.1920928955078125e-07;  // 128 eps32
constexpr double kBf16Tol = 2 * 0.0078125;                // two eps_bf16

// Values in [lo, hi] (uniform in [lo, hi), then rounded to bf16 so the fp32
// and bf16 runs see the same inputs).
std::vector<double> draw(size_t n, uint64_t seed, double lo, double hi) {
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = double(bf16(lo + (hi - lo) * (double(input_hash(seed, i) >> 11) / double(1ull << 53))));
  return v;
}

// Integers in [0, hi).
std::vector<int32_t> ints(size_t n, int32_t hi, uint64_t seed) {
  std::vector<int32_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = int32_t(input_hash(seed, i) % uint64_t(hi));
  return v;
}

// max |a - b| / max |b| over the elements; equal values (infinities too) match.
double normwise(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return INFINITY;
  double e = 0, s = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isfinite(b[i])) s = std::max(s, std::abs(b[i]));
    if (a[i] == b[i]) continue;
    const double d = std::abs(a[i] - b[i]);
    e = std::max(e, std::isnan(d) ? INFINITY : d);
  }
  return s > 0 ? e / s : e;
}

// Where an op runs: the CPU's ops on host vectors, or the device's ops on
// its memory.
template <class T>
struct Side {
  const DeviceOps<T>& ops;
  bool device;
  const DeviceOps<T>* operator->() const { return &ops; }
};

// One op's buffer on both sides: the CPU's host vector and the device's copy
// of the same initial contents (device memory, touched only through the ops).
template <class T, class E>
class Twin {
 public:
  Twin(const DeviceOps<T>& ops, DeviceMemory& mem, std::vector<E> init)
      : ops_(&ops), mem_(&mem), h_(std::move(init)) {
    d_ = static_cast<E*>(mem_->allocate(std::max<size_t>(h_.size(), 1) * sizeof(E)));
    if (!h_.empty()) ops_->to_device(d_, h_.data(), bytes());
  }
  ~Twin() {
    if (d_) mem_->deallocate(d_);
  }
  Twin(Twin&& o) noexcept : ops_(o.ops_), mem_(o.mem_), h_(std::move(o.h_)), d_(std::exchange(o.d_, nullptr)) {}
  Twin(const Twin&) = delete;
  Twin& operator=(const Twin&) = delete;
  Twin& operator=(Twin&&) = delete;
  E* operator[](const Side<T>& s) { return s.device ? d_ : h_.data(); }
  std::vector<double> cpu_values() const { return widen(h_); }
  std::vector<double> dev_values() const {
    std::vector<E> got(h_.size());
    if (!got.empty()) ops_->to_host(got.data(), d_, bytes());
    return widen(got);
  }

 private:
  static std::vector<double> widen(const std::vector<E>& v) {
    std::vector<double> out(v.size());
    for (size_t i = 0; i < v.size(); ++i) out[i] = cast<double>(v[i]);
    return out;
  }
  size_t bytes() const { return h_.size() * sizeof(E); }
  const DeviceOps<T>* ops_;
  DeviceMemory* mem_;
  std::vector<E> h_;
  E* d_ = nullptr;
};

// The ops at storage type T: every case runs each op on both sides (the CPU
// first) and records one check per output.
template <class T>
class Bench {
 public:
  using A = typename DeviceOps<T>::A;
  using M = typename DeviceOps<T>::M;
  Bench(const DeviceOps<T>& dev, DeviceMemory& mem, std::vector<DeviceCheck>& out)
      : dev_(dev), mem_(mem), out_(out), sides_{Side<T>{kernels::cpu_ops<T>(), false}, Side<T>{dev, true}} {}

  void run() {
    memory(4099);
    for (auto [B, Tn, C, V] : {std::array{3, 7, 20, 5}, std::array{2, 64, 768, 50}}) encoder(B, Tn, C, V);
    for (auto [N, C] : {std::pair{37, 300}, std::pair{6, 1600}}) layernorm(N, C);
    for (auto [N, C, OC] : {std::array{67, 48, 40}, std::array{128, 256, 768}}) {
      matmul(N, C, OC, true);
      matmul(N, C, OC, false);
    }
    attention(2, 9, 24, 3, false);
    attention(1, 300, 128, 2, true);
    for (auto [Tq, hs] : {std::pair{20, 16}, std::pair{150, 64}, std::pair{40, 192}}) {
      attention_blocks(Tq, hs, true);
      attention_blocks(Tq, hs, false);
    }
    for (auto [rows, cols, stride] : {std::array{21, 16, 40}, std::array{300, 64, 192}}) row_dot(rows, cols, stride);
    for (size_t n : {size_t(5000), size_t(65537)}) elementwise(n);
    for (auto [rows, cols, ds, ss] : {std::array{17, 24, 40, 30}, std::array{300, 64, 192, 64}})
      rows_moves(size_t(rows), size_t(cols), size_t(ds), size_t(ss));
    crossentropy(64, 7, true);
    crossentropy(13, 1000, false);
    crossentropy(4, 50257, true);
    for (auto [N, C, V, first, rows] : {std::array{29, 33, 12, 4, 5}, std::array{128, 768, 1000, 500, 500}})
      table_rows(N, C, V, first, rows);
    vocab_shard(16, 9, 8, true);
    vocab_shard(11, 700, 650, false);
    vocab_shard(8, 12565, 12564, true);
    for (auto [N, K, E, C, rows] : {std::array{37, 2, 5, 70, 12}, std::array{128, 2, 8, 256, 40}})
      moe_rows(N, K, E, C, rows);
    for (size_t n : {size_t(5000), size_t(300001)}) optimizer(n);
  }

 private:
  template <class E>
  Twin<T, E> twin(std::vector<E> v) {
    return Twin<T, E>(dev_, mem_, std::move(v));
  }
  // Storage-type values in [lo, hi).
  Twin<T, T> in(size_t n, uint64_t seed, double lo = -1, double hi = 1) {
    const std::vector<double> d = draw(n, seed, lo, hi);
    std::vector<T> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = cast<T>(d[i]);
    return twin(std::move(v));
  }
  template <class E>
  Twin<T, E> of(size_t n, uint64_t seed, double lo = -1, double hi = 1) {
    const std::vector<double> d = draw(n, seed, lo, hi);
    return twin(std::vector<E>(d.begin(), d.end()));
  }
  template <class E>
  Twin<T, E> filled(size_t n, E value) {
    return twin(std::vector<E>(n, value));
  }
  template <class E>
  void expect(const std::string& op, const Twin<T, E>& t, Match m) {
    record(op, normwise(t.dev_values(), t.cpu_values()), m);
  }
  void record(const std::string& op, double error, Match m) {
    DeviceCheck c;
    c.op = op;
    c.shape = shape_;
    c.dtype = dtype_of<T>();
    c.match = m;
    c.error = error;
    c.tolerance = device_tolerance(m, c.dtype);
    c.pass = error <= c.tolerance;
    out_.push_back(std::move(c));
  }
  void label(std::string s) { shape_ = std::move(s); }
  static std::string num(long x) { return std::to_string(x); }

  void memory(size_t n) {
    label(num(long(n * sizeof(T))) + " B");
    auto src = in(n, 1), dst = in(n, 2), z = in(n, 3);
    for (const auto& s : sides_) {
      s->copy(dst[s], src[s], n * sizeof(T));
      s->zero(z[s] + 1, (n - 2) * sizeof(T));
    }
    expect("copy", dst, Match::exact);
    expect("zero", z, Match::exact);
  }

  void encoder(int B, int Tn, int C, int V) {
    label("B=" + num(B) + " T=" + num(Tn) + " C=" + num(C) + " V=" + num(V));
    const size_t N = size_t(B) * Tn;
    auto inp = twin(ints(N, V, 4));
    auto wte = in(size_t(V) * C, 5), wpe = in(size_t(Tn) * C, 6), dy = in(N * C, 7);
    auto out = in(N * C, 8), dwte = in(size_t(V) * C, 9), dwpe = in(size_t(Tn) * C, 10);
    for (const auto& s : sides_) {
      s->encoder_forward(out[s], inp[s], wte[s], wpe[s], B, Tn, C);
      s->encoder_backward(dwte[s], dwpe[s], dy[s], inp[s], B, Tn, C);
    }
    expect("encoder_forward", out, Match::exact);
    expect("encoder_backward.dwte", dwte, Match::storage);
    expect("encoder_backward.dwpe", dwpe, Match::storage);
  }

  void layernorm(int N, int C) {
    label("N=" + num(N) + " C=" + num(C));
    const size_t NC = size_t(N) * C;
    auto x = in(NC, 11, -2, 2), w = in(size_t(C), 12, 0.5, 1.5), b = in(size_t(C), 13), dy = in(NC, 14);
    auto y = in(NC, 15), dx = in(NC, 16), dw = in(size_t(C), 17), db = in(size_t(C), 18);
    auto mean = filled<A>(size_t(N), 0), rstd = filled<A>(size_t(N), 0);
    for (const auto& s : sides_) {
      s->layernorm_forward(y[s], mean[s], rstd[s], x[s], w[s], b[s], N, C);
      s->layernorm_backward(dx[s], dw[s], db[s], dy[s], x[s], w[s], mean[s], rstd[s], N, C);
    }
    expect("layernorm_forward.out", y, Match::storage);
    expect("layernorm_forward.mean", mean, Match::stat);
    expect("layernorm_forward.rstd", rstd, Match::stat);
    expect("layernorm_backward.dinp", dx, Match::storage);
    expect("layernorm_backward.dweight", dw, Match::storage);
    expect("layernorm_backward.dbias", db, Match::storage);
  }

  // with_bias: the linear layers; without: the LM head (no bias), and the
  // backward's dinp alone (zero-bubble's B) then dweight alone (its W).
  // The CPU's ops are given their GEMM staging; a device keeps its own.
  void matmul(int N, int C, int OC, bool with_bias) {
    label("N=" + num(N) + " C=" + num(C) + " OC=" + num(OC) + (with_bias ? "" : " no bias, dinp then dweight"));
    auto x = in(size_t(N) * C, 19), w = in(size_t(OC) * C, 20, -0.2, 0.2), bias = in(size_t(OC), 21);
    auto dy = in(size_t(N) * OC, 22), y = in(size_t(N) * OC, 23);
    auto dx = in(size_t(N) * C, 24), dw = in(size_t(OC) * C, 25), db = in(size_t(OC), 26);
    std::vector<float> ws(kernels::matmul_workspace_floats<T>(N, C, OC));
    for (const auto& s : sides_) {
      float* f = s.device ? nullptr : ws.data();
      s->matmul_forward(y[s], x[s], w[s], with_bias ? bias[s] : nullptr, N, C, OC, f);
      if (with_bias) {
        s->matmul_backward(dx[s], dw[s], db[s], dy[s], x[s], w[s], N, C, OC, f);
      } else {
        s->matmul_backward(dx[s], nullptr, nullptr, dy[s], x[s], w[s], N, C, OC, f);
        s->matmul_backward(nullptr, dw[s], nullptr, dy[s], x[s], w[s], N, C, OC, f);
      }
    }
    expect("matmul_forward", y, Match::storage);
    expect("matmul_backward.dinp", dx, Match::storage);
    expect("matmul_backward.dweight", dw, Match::storage);
    if (with_bias) expect("matmul_backward.dbias", db, Match::storage);
    else expect("matmul_backward.dbias (null: untouched)", db, Match::exact);
  }

  // zero_grad: dqkv starts at zero, so the op's own contribution (the dq
  // part is small) is what the error measures; else it accumulates onto values.
  void attention(int B, int Tn, int C, int NH, bool zero_grad) {
    label("B=" + num(B) + " T=" + num(Tn) + " C=" + num(C) + " NH=" + num(NH) + " (hs " + num(C / NH) + ")");
    const size_t BT = size_t(B) * Tn, att_n = size_t(B) * NH * Tn * Tn;
    auto qkv = in(BT * 3 * C, 27), dy = in(BT * C, 28), out = in(BT * C, 29);
    auto dqkv = zero_grad ? filled<T>(BT * 3 * C, cast<T>(0.0)) : in(BT * 3 * C, 30);
    auto att = in(att_n, 31), datt = in(att_n, 32);
    std::vector<A> ws(kernels::attention_workspace_elems<T>(Tn, C, NH));  // the CPU's; a device keeps its own
    for (const auto& s : sides_) {
      A* w = s.device ? nullptr : ws.data();
      s->attention_forward(out[s], att[s], qkv[s], B, Tn, C, NH, w);
      s->attention_backward(dqkv[s], datt[s], dy[s], qkv[s], att[s], B, Tn, C, NH, w);
    }
    expect("attention_forward.out", out, Match::storage);
    expect("attention_forward.att", att, Match::storage);
    expect("attention_backward.datt", datt, Match::storage);
    expect("attention_backward.dqkv", dqkv, Match::storage);
  }

  // Ring attention's pieces on one (batch, head): queries at positions
  // Tq..2Tq against the keys at 0..Tq and at Tq..2Tq (causal: the second
  // block masked above its diagonal), merged, finalized, then the backward
  // of the second block; q, k, v interleaved in rows of stride 3 hs.
  void attention_blocks(int Tq, int hs, bool causal) {
    label("Tq=Tk=" + num(Tq) + " hs=" + num(hs) + (causal ? " causal" : " full"));
    const int S = 3 * hs, Tk = Tq;
    auto qkv = in(size_t(2 * Tq) * S, 33), dy = in(size_t(Tq) * hs, 34), out = in(size_t(Tq) * hs, 35);
    const size_t q0 = size_t(Tq) * S;  // the second half of the rows: queries and the second key block
    auto o = filled<A>(size_t(Tq) * hs, 0), m = filled<A>(size_t(Tq), -INFINITY), l = filled<A>(size_t(Tq), 0);
    auto o2 = filled<A>(size_t(Tq) * hs, 0), m2 = filled<A>(size_t(Tq), -INFINITY), l2 = filled<A>(size_t(Tq), 0);
    auto lse = filled<A>(size_t(Tq), 0), D = of<A>(size_t(Tq), 36, 0, 0.5);
    auto dq = of<A>(size_t(Tq) * hs, 37), dk = of<A>(size_t(Tk) * hs, 38), dv = of<A>(size_t(Tk) * hs, 39);
    for (const auto& s : sides_) {
      T* x = qkv[s];
      T* q = x + q0;
      s->attention_block_forward(o[s], m[s], l[s], q, x + hs, x + 2 * hs, Tq, Tk, hs, S, S, Tq, 0, causal);
      s->attention_block_forward(o2[s], m2[s], l2[s], q, q + hs, q + 2 * hs, Tq, Tk, hs, S, S, Tq, Tq, causal);
    }
    expect("attention_block_forward.o", o2, Match::stat);
    expect("attention_block_forward.m", m2, Match::stat);
    expect("attention_block_forward.l", l2, Match::stat);
    for (const auto& s : sides_) {
      T* q = qkv[s] + q0;
      s->attention_block_merge(o[s], m[s], l[s], o2[s], m2[s], l2[s], Tq, hs);
      s->attention_block_finalize(out[s], lse[s], o[s], m[s], l[s], Tq, hs, hs);
      s->attention_block_backward(dq[s], dk[s], dv[s], q, q + hs, q + 2 * hs, dy[s], lse[s], D[s], Tq, Tk, hs, S, S,
                                  hs, Tq, Tq, causal);
    }
    expect("attention_block_merge.o", o, Match::stat);
    expect("attention_block_finalize.out", out, Match::storage);
    expect("attention_block_finalize.lse", lse, Match::stat);
    expect("attention_block_backward.dq", dq, Match::stat);  // fp32, from the same inputs
    expect("attention_block_backward.dk", dk, Match::stat);
    expect("attention_block_backward.dv", dv, Match::stat);
  }

  void row_dot(int rows, int cols, int stride) {
    label("rows=" + num(rows) + " cols=" + num(cols) + " stride=" + num(stride));
    auto dout = in(size_t(rows) * stride, 40), o = in(size_t(rows) * stride, 41);
    auto D = filled<A>(size_t(rows), 0);
    for (const auto& s : sides_) s->attention_row_dot(D[s], dout[s], o[s], rows, cols, stride);
    expect("attention_row_dot", D, Match::stat);
  }

  void elementwise(size_t n) {
    label("n=" + num(long(n)));
    auto x = in(n, 42, -4, 4), dy = in(n, 43), b = in(n, 44), y = in(n, 45), dx = in(n, 46), r = in(n, 47),
         acc = in(n, 48);
    auto fa = of<A>(n, 49), aa = of<A>(n, 50), ab = of<A>(n, 51);
    for (const auto& s : sides_) {
      s->gelu_forward(y[s], x[s], n);
      s->gelu_backward(dx[s], x[s], dy[s], n);
      s->residual_forward(r[s], x[s], b[s], n);
      s->accumulate(acc[s], b[s], n);
      s->fill_acc(fa[s] + 1, -INFINITY, n - 2);
      s->accumulate_acc(aa[s], ab[s], n);
    }
    expect("gelu_forward", y, Match::storage);
    expect("gelu_backward", dx, Match::storage);
    expect("residual_forward", r, Match::exact);
    expect("accumulate", acc, Match::exact);
    expect("fill_acc", fa, Match::exact);
    expect("accumulate_acc", aa, Match::exact);
  }

  // Ulysses' strided row moves: both sides strided, the gaps untouched.
  void rows_moves(size_t rows, size_t cols, size_t ds, size_t ss) {
    label("rows=" + num(long(rows)) + " cols=" + num(long(cols)) + " strides " + num(long(ds)) + "/" +
          num(long(ss)));
    auto src = in(rows * ss, 52), cp = in(rows * ds, 53), ac = in(rows * ds, 54), aa = in(rows * ds, 55);
    auto srca = of<A>(rows * ss, 56);
    for (const auto& s : sides_) {
      s->copy_rows(cp[s], ds, src[s], ss, cols, rows);
      s->accumulate_rows(ac[s], ds, src[s], ss, cols, rows);
      s->accumulate_rows_acc(aa[s], ds, srca[s], ss, cols, rows);
    }
    expect("copy_rows", cp, Match::exact);
    expect("accumulate_rows", ac, Match::exact);
    expect("accumulate_rows_acc", aa, Match::exact);
  }

  // zero_grad: dlogits starts at zero (the softmax term is small next to
  // values of order 1); else the backward accumulates onto values.
  void crossentropy(int N, int V, bool zero_grad) {
    label("N=" + num(N) + " V=" + num(V) + (zero_grad ? "" : " accumulating"));
    const size_t NV = size_t(N) * V;
    auto logits = in(NV, 57, -6, 6), alias = in(NV, 57, -6, 6), probs = in(NV, 58);
    auto d = zero_grad ? filled<T>(NV, cast<T>(0.0)) : in(NV, 59);
    auto targets = twin(ints(size_t(N), V, 60));
    auto losses = filled<A>(size_t(N), 0), losses2 = filled<A>(size_t(N), 0);
    for (const auto& s : sides_) {
      s->crossentropy_forward(losses[s], probs[s], logits[s], targets[s], N, V);
      s->crossentropy_backward(d[s], probs[s], targets[s], 1.0 / N, N, V);
      s->crossentropy_forward(losses2[s], alias[s], alias[s], targets[s], N, V);  // in place
    }
    expect("crossentropy_forward.losses", losses, Match::stat);
    expect("crossentropy_forward.probs", probs, Match::storage);
    expect("crossentropy_forward.probs in place", alias, Match::storage);
    expect("crossentropy_backward", d, Match::storage);
  }

  // A tensor-parallel rank's table rows: its shard [first, first + rows) of
  // a V-row table, position rows and a bias added, their gradients.
  void table_rows(int N, int C, int V, int first, int rows) {
    label("N=" + num(N) + " C=" + num(C) + " V=" + num(V) + " shard [" + num(first) + ", " + num(first + rows) + ")");
    const size_t NC = size_t(N) * C, off = size_t(first) * C;
    auto idx = twin(ints(size_t(N), V, 61));
    auto table = in(size_t(V) * C, 62), dy = in(NC, 63), out = in(NC, 64), x = in(NC, 65), xb = in(NC, 66);
    auto dt = in(size_t(V) * C, 67), db = in(size_t(C), 68);
    for (const auto& s : sides_) {
      s->embedding_lookup(out[s], idx[s], table[s] + off, N, C, first, rows);
      s->add_rows(x[s], table[s], idx[s], N, C);
      s->add_rows(xb[s], table[s], nullptr, N, C);
      s->add_rows_backward(dt[s] + off, dy[s], idx[s], N, C, first, rows);
      s->add_rows_backward(db[s], dy[s], nullptr, N, C, 0, 1);
    }
    expect("embedding_lookup", out, Match::exact);
    expect("add_rows", x, Match::exact);
    expect("add_rows (bias)", xb, Match::exact);
    expect("add_rows_backward", dt, Match::storage);
    expect("add_rows_backward (bias)", db, Match::storage);
  }

  // A vocabulary shard of rows [first, first + Vr), its last Vr - valid
  // columns padding; half the targets on the shard. Probabilities in place
  // of the logits, as the tensor-parallel head writes them.
  void vocab_shard(int N, int Vr, int valid, bool zero_grad) {
    const int64_t first = 3 * int64_t(Vr);
    label("N=" + num(N) + " Vr=" + num(Vr) + " valid=" + num(valid) + (zero_grad ? "" : " accumulating"));
    const size_t NV = size_t(N) * Vr;
    std::vector<int32_t> t = ints(size_t(N), 2 * valid, 69);  // below `first`: another shard's
    for (int n = 0; n < N; n += 2) t[size_t(n)] = int32_t(first) + t[size_t(n)] % valid;
    auto targets = twin(std::move(t));
    auto logits = in(NV, 70, -6, 6);
    auto d = zero_grad ? filled<T>(NV, cast<T>(0.0)) : in(NV, 71);
    auto mx = filled<A>(size_t(N), 0), sum = filled<A>(size_t(N), 0), xt = filled<A>(size_t(N), 0),
         losses = filled<A>(size_t(N), 0);
    for (const auto& s : sides_) {
      s->vocab_logit_max(mx[s], logits[s], N, Vr, valid);
      s->vocab_sum_exp(sum[s], xt[s], logits[s], mx[s], targets[s], first, N, Vr, valid);
    }
    expect("vocab_logit_max", mx, Match::exact);
    expect("vocab_sum_exp.sum", sum, Match::stat);
    expect("vocab_sum_exp.target_logit", xt, Match::exact);
    for (const auto& s : sides_) {
      s->vocab_softmax_loss(losses[s], logits[s], logits[s], mx[s], sum[s], xt[s], N, Vr, valid);
      s->vocab_crossentropy_backward(d[s], logits[s], targets[s], first, 0.5, N, Vr, valid);
    }
    expect("vocab_softmax_loss.losses", losses, Match::stat);
    expect("vocab_softmax_loss.probs", logits, Match::storage);
    expect("vocab_crossentropy_backward", d, Match::storage);
  }

  // Two distinct experts per token, first choices admitted first in token
  // order up to `rows` per expert (some dropped).
  void moe_rows(int N, int K, int E, int C, int rows) {
    label("N=" + num(N) + " K=" + num(K) + " E=" + num(E) + " C=" + num(C) + " capacity " + num(rows));
    const std::vector<int32_t> r = ints(size_t(N) * K, E - 1, 72);
    std::vector<int32_t> choice(size_t(N) * K), slot(choice.size()), count(size_t(E), 0);
    for (int n = 0; n < N; ++n)
      for (int j = 0; j < K; ++j)
        choice[size_t(n) * K + j] = (j == 0 ? r[size_t(n) * K] : choice[size_t(n) * K] + 1 + r[size_t(n) * K + j]) % E;
    for (int j = 0; j < K; ++j)
      for (int n = 0; n < N; ++n) {
        int32_t& c = count[size_t(choice[size_t(n) * K + j])];
        slot[size_t(n) * K + j] = c < rows ? c++ : -1;
      }
    auto ch = twin(std::move(choice)), sl = twin(std::move(slot));
    const size_t ER = size_t(E) * rows * C, NC = size_t(N) * C;
    auto x = in(NC, 73), y = in(ER, 74), dout = in(NC, 75), xe = in(ER, 76), out = in(NC, 77), acc = in(NC, 78),
         dy = in(ER, 79);
    auto w = of<A>(size_t(N) * K, 80, 0, 1), dw = filled<A>(size_t(N) * K, 0);
    for (const auto& s : sides_) {
      s->moe_scatter_rows(xe[s], x[s], ch[s], sl[s], N, K, C, rows);
      s->moe_combine(out[s], y[s], ch[s], sl[s], w[s], N, K, C, rows, false);
      s->moe_combine(acc[s], y[s], ch[s], sl[s], nullptr, N, K, C, rows, true);
      s->moe_combine_backward(dy[s], dw[s], dout[s], y[s], ch[s], sl[s], w[s], N, K, C, rows);
    }
    expect("moe_scatter_rows", xe, Match::exact);
    expect("moe_combine (weighted)", out, Match::storage);
    expect("moe_combine (accumulated)", acc, Match::storage);
    expect("moe_combine_backward.dy", dy, Match::exact);
    expect("moe_combine_backward.dw", dw, Match::stat);
  }

  // Three AdamW steps (the second without decay), the clipping norm's sum
  // of squares and the loss's sum.
  void optimizer(size_t n) {
    label("n=" + num(long(n)));
    auto g = in(n, 81, -0.01, 0.01), param = in(n, 82);
    auto master = of<M>(n, 83, -0.1, 0.1), m = filled<M>(n, 0), v = filled<M>(n, 0);
    auto losses = of<A>(n, 84, 0, 4);
    kernels::AdamWHyper h;
    h.lr = 1e-3;
    h.grad_scale = 0.5;
    double sq[2] = {0, 0}, sum[2] = {0, 0};
    for (const auto& s : sides_) {
      for (long k = 1; k <= 3; ++k) {
        h.step = k;
        s->adamw_step(master[s], param[s], g[s], m[s], v[s], n, h, k != 2);
      }
      sq[s.device] = s->sum_squares(g[s], n);
      sum[s.device] = s->sum(losses[s], n);
    }
    expect("adamw_step.master", master, Match::stat);
    expect("adamw_step.m", m, Match::stat);
    expect("adamw_step.v", v, Match::stat);
    expect("adamw_step.params", param, Match::storage);
    record("sum_squares", std::abs(sq[1] - sq[0]) / std::max(std::abs(sq[0]), 1e-300), Match::total);
    record("sum", std::abs(sum[1] - sum[0]) / std::max(std::abs(sum[0]), 1e-300), Match::total);
  }

  const DeviceOps<T>& dev_;
  DeviceMemory& mem_;
  std::vector<DeviceCheck>& out_;
  const std::array<Side<T>, 2> sides_;
  std::string shape_;
};

}  // namespace

double device_tolerance(Match m, DType storage) {
  switch (m) {
    case Match::exact: return 0;
    case Match::stat: return kF32Tol;
    case Match::storage: return storage == DType::bf16 ? kBf16Tol : kF32Tol;
    case Match::total: return 1e-12;
  }
  return 0;
}

std::vector<DeviceCheck> check_device_ops(const TrainDevice& device) {
  require(device.memory != nullptr, "selftest: device " + device.name + " has no memory");
  std::vector<DeviceCheck> out;
  Bench<float>(*device_ops<float>(device), *device.memory, out).run();
  Bench<bf16>(*device_ops<bf16>(device), *device.memory, out).run();
  return out;
}

std::string device_check_table(const std::vector<DeviceCheck>& checks) {
  struct Row {
    std::string op;
    double worst[2] = {0, 0}, tol[2] = {0, 0};
    bool pass = true;
  };
  std::vector<Row> rows;
  for (const DeviceCheck& c : checks) {
    auto it = std::find_if(rows.begin(), rows.end(), [&](const Row& r) { return r.op == c.op; });
    if (it == rows.end()) it = rows.insert(rows.end(), Row{c.op});
    const int k = c.dtype == DType::bf16;
    it->worst[k] = std::max(it->worst[k], c.error);
    it->tol[k] = c.tolerance;
    it->pass &= c.pass;
  }
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line, "  %-38s %11s %11s %19s  %s\n", "op (output)", "fp32 worst", "bf16 worst",
                "tolerance fp32/bf16", "result");
  out += line;
  for (const Row& r : rows) {
    std::snprintf(line, sizeof line, "  %-38s %11.3g %11.3g %9.3g/%-9.3g  %s\n", r.op.c_str(), r.worst[0], r.worst[1],
                  r.tol[0], r.tol[1], r.pass ? "ok" : "FAIL");
    out += line;
  }
  for (const DeviceCheck& c : checks)
    if (!c.pass) {
      std::snprintf(line, sizeof line, "  FAIL %s at %s, %s: error %.3g > %.3g\n", c.op.c_str(),
                    std::string(dtype_name(c.dtype)).c_str(), c.shape.c_str(), c.error, c.tolerance);
      out += line;
    }
  return out;
}

}  // namespace pb::selftest
