#include "suites/selftest/kernel_checks.h"

#include <cmath>
#include <cstdint>
#include <functional>

#include "kernels/cpu/ops.h"
#include "suites/conformance/compare.h"

namespace pb::selftest {
namespace {

// Shapes: B sequences of Tn tokens, C channels, NH heads, V vocabulary.
constexpr int B = 2, Tn = 8, C = 32, NH = 4, V = 48, N = B * Tn;

// Values in [-scale, scale) from input_hash(seed, i).
std::vector<double> values(size_t n, uint64_t seed, double scale) {
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * (double(input_hash(seed, i) >> 11) / double(1ull << 53) * 2 - 1);
  return v;
}

template <class T>
std::vector<T> as(const std::vector<double>& v) {
  std::vector<T> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = T(v[i]);
  return out;
}

template <class T>
std::vector<double> widen(const std::vector<T>& v) {
  std::vector<double> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = double(v[i]);
  return out;
}


// Inputs of every op, drawn once in double; each precision runs on them
// rounded to its storage type, and so does fp64 (the same rounded values).
struct Inputs {
  std::vector<double> x, w, bias, wte, wpe, qkv, dout, dqkvout, ln_w, ln_b, logits, master, grad;
  std::vector<int32_t> tokens, targets;
  Inputs()
      : x(values(N * C, 1, 1.0)),
        w(values(4 * C * C, 2, 0.2)),
        bias(values(4 * C, 3, 0.1)),
        wte(values(V * C, 4, 0.5)),
        wpe(values(Tn * C, 5, 0.5)),
        qkv(values(N * 3 * C, 6, 1.0)),
        dout(values(N * 4 * C, 7, 1.0)),
        dqkvout(values(N * C, 8, 1.0)),
        ln_w(values(C, 9, 0.5)),
        ln_b(values(C, 10, 0.5)),
        logits(values(N * V, 11, 3.0)),
        master(values(4 * C * C, 12, 0.1)),
        grad(values(4 * C * C, 13, 0.01)) {
    for (auto* v : {&ln_w}) for (auto& e : *v) e += 1.0;  // LayerNorm weights near 1
    for (int i = 0; i < N; ++i) {
      tokens.push_back(int32_t((i * 7 + 3) % 6));  // repeated: the embedding backward sums rows
      targets.push_back(int32_t((i * 5 + 1) % V));
    }
  }
};

// One op at storage type T: named outputs as doubles. The inputs are rounded
// to U (the precision under test) first, whatever T is.
template <class T, class U>
std::vector<std::pair<std::string, std::vector<double>>> run_ops(const Inputs& in) {
  using A = acc_t<T>;
  auto r = [](const std::vector<double>& v) { return as<T>(widen(as<U>(v))); };
  std::vector<std::pair<std::string, std::vector<double>>> out;
  // encoder
  {
    std::vector<T> o(N * C), dwte(V * C), dwpe(Tn * C);
    const auto wte = r(in.wte), wpe = r(in.wpe), d = r(std::vector<double>(in.dout.begin(), in.dout.begin() + N * C));
    kernels::encoder_forward(o.data(), in.tokens.data(), wte.data(), wpe.data(), B, Tn, C);
    kernels::encoder_backward(dwte.data(), dwpe.data(), d.data(), in.tokens.data(), B, Tn, C);
    out.push_back({"encoder_forward", widen(o)});
    out.push_back({"encoder_backward.dwte", widen(dwte)});
    out.push_back({"encoder_backward.dwpe", widen(dwpe)});
  }
  // layernorm
  {
    std::vector<T> o(N * C), dx(N * C), dw(C), db(C);
    std::vector<A> mean(N), rstd(N);
    const auto x = r(in.x), w = r(in.ln_w), b = r(in.ln_b);
    const auto d = r(std::vector<double>(in.dout.begin(), in.dout.begin() + N * C));
    kernels::layernorm_forward(o.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
    kernels::layernorm_backward(dx.data(), dw.data(), db.data(), d.data(), x.data(), w.data(), mean.data(),
                                rstd.data(), N, C);
    out.push_back({"layernorm_forward", widen(o)});
    out.push_back({"layernorm_backward.dinp", widen(dx)});
    out.push_back({"layernorm_backward.dweight", widen(dw)});
    out.push_back({"layernorm_backward.dbias", widen(db)});
  }
  // matmul: (N, C) x (4C, C)^T + bias
  {
    const int OC = 4 * C;
    std::vector<T> o(size_t(N) * OC), dx(N * C), dw(size_t(OC) * C), db(OC);
    std::vector<float> ws(kernels::matmul_workspace_floats<T>(N, C, OC) + 1);
    const auto x = r(in.x), w = r(in.w), b = r(in.bias), d = r(in.dout);
    kernels::matmul_forward(o.data(), x.data(), w.data(), b.data(), N, C, OC, ws.data());
    kernels::matmul_backward(dx.data(), dw.data(), db.data(), d.data(), x.data(), w.data(), N, C, OC, ws.data());
    out.push_back({"matmul_forward", widen(o)});
    out.push_back({"matmul_backward.dinp", widen(dx)});
    out.push_back({"matmul_backward.dweight", widen(dw)});
    out.push_back({"matmul_backward.dbias", widen(db)});
  }
  // attention (causal)
  {
    std::vector<T> o(N * C), att(size_t(B) * NH * Tn * Tn), dqkv(N * 3 * C), datt(att.size());
    std::vector<A> ws(kernels::attention_workspace_elems<T>(Tn, C, NH) + 1);
    const auto qkv = r(in.qkv), d = r(in.dqkvout);
    kernels::attention_forward(o.data(), att.data(), qkv.data(), B, Tn, C, NH, ws.data());
    kernels::attention_backward(dqkv.data(), datt.data(), d.data(), qkv.data(), att.data(), B, Tn, C, NH, ws.data());
    out.push_back({"attention_forward", widen(o)});
    out.push_back({"attention_backward.dqkv", widen(dqkv)});
  }
  // gelu
  {
    const size_t n = size_t(N) * 4 * C;
    std::vector<T> o(n), dx(n);
    const auto x = r(in.dout), d = r(std::vector<double>(in.w.begin(), in.w.end()));
    std::vector<T> dd(n);
    for (size_t i = 0; i < n; ++i) dd[i] = d[i % d.size()];
    kernels::gelu_forward(o.data(), x.data(), n);
    kernels::gelu_backward(dx.data(), x.data(), dd.data(), n);
    out.push_back({"gelu_forward", widen(o)});
    out.push_back({"gelu_backward", widen(dx)});
  }
  // cross entropy
  {
    std::vector<A> losses(N);
    std::vector<T> probs(size_t(N) * V), dlogits(probs.size());
    const auto logits = r(in.logits);
    kernels::crossentropy_forward(losses.data(), probs.data(), logits.data(), in.targets.data(), N, V);
    kernels::crossentropy_backward(dlogits.data(), probs.data(), in.targets.data(), 1.0 / N, N, V);
    out.push_back({"crossentropy_forward.losses", widen(losses)});
    out.push_back({"crossentropy_backward", widen(dlogits)});
  }
  // AdamW, three steps with decay (master at the optimizer's precision)
  {
    using M = std::conditional_t<std::is_same_v<T, double>, double, float>;
    const size_t n = in.master.size();
    std::vector<M> master = as<M>(widen(as<U>(in.master))), m(n), v(n);
    std::vector<T> p(n);
    const auto g = r(in.grad);
    kernels::AdamWHyper h;
    h.lr = 1e-3;
    for (long s = 1; s <= 3; ++s) {
      h.step = s;
      kernels::adamw_step(master.data(), p.data(), g.data(), m.data(), v.data(), n, h, true);
    }
    out.push_back({"adamw_step.params", widen(p)});
  }
  return out;
}

template <class U>
void compare(DType dt, const Inputs& in, std::vector<KernelCheck>& checks) {
  const auto got = run_ops<U, U>(in);
  const auto truth = run_ops<double, U>(in);
  for (size_t i = 0; i < got.size(); ++i) {
    KernelCheck c;
    c.op = got[i].first;
    c.dtype = dt;
    c.error = rel_l2(got[i].second, truth[i].second);
    c.tolerance = kernel_tolerance(dt);
    c.pass = c.error <= c.tolerance;
    checks.push_back(c);
  }
}

}  // namespace

uint64_t input_hash(uint64_t seed, size_t i) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + i * 0xD1B54A32D192ED03ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

double kernel_tolerance(DType t) { return t == DType::bf16 ? 2 * dtype_eps(t) : 64 * dtype_eps(t); }

std::vector<KernelCheck> check_cpu_kernels() {
  const Inputs in;
  std::vector<KernelCheck> checks;
  compare<float>(DType::f32, in, checks);
  compare<bf16>(DType::bf16, in, checks);
  return checks;
}

}  // namespace pb::selftest
