#include "impl/tensor_parallel/cost.h"

#include "harness/status.h"

namespace pb::tp {

int64_t layer_activation_bytes(const ActivationShape& x, Recompute r) {
  require(x.tp >= 1 && x.cp >= 1 && x.s % x.cp == 0, "--cp: must divide the sequence length");
  const int64_t e = x.elem_bytes, d = x.dropout ? 1 : 0, t = x.tp, st = x.stats_bytes;
  const int64_t sl = x.s / x.cp, sbh = sl * x.b * x.h, sb = sl * x.b;
  auto rep = [&](int64_t v) { return x.sp ? v / t : v; };  // replicated unless SP
  if (r == Recompute::full) return rep(e * sbh);
  const int64_t replicated = rep(sbh * (4 * e + 2 * d)) + rep(4 * st * sb);
  const int64_t split = sbh * 12 * e / t;
  const int64_t scores = r == Recompute::selective ? 0 : x.a * sl * x.s * x.b * (e + d * (e + 1)) / t;
  return replicated + split + scores;
}

ActivationShape layer_shape(const TpShape& x) {
  ActivationShape a;
  a.b = x.Bm;
  a.s = x.Tn;
  a.h = x.model.C;
  a.a = x.model.NH;
  a.tp = x.tp;
  a.sp = x.sp;
  a.elem_bytes = x.elem_bytes;
  a.stats_bytes = x.acc_bytes;
  return a;
}

int64_t activation_bytes(const TpShape& x) {
  const int64_t N = int64_t(x.Bm) * x.Tn, C = x.model.C, t = x.tp, e = x.elem_bytes, ab = x.acc_bytes;
  const int64_t Nl = x.sp ? N / t : N, Vr = (int64_t(x.model.V) + t - 1) / t;
  const int64_t tokens = 2 * 4 * N;
  const int64_t embedding = e * Nl * C;
  const int64_t layers = int64_t(x.model.L) * layer_activation_bytes(layer_shape(x), x.recompute);
  const int64_t head = e * Nl * C + 2 * ab * Nl + e * N * Vr + ab * N;
  return tokens + embedding + layers + head;
}

std::vector<int64_t> unit_params(const ModelConfig& m, int tp) {
  const int64_t C = m.C, t = tp;
  std::vector<int64_t> u;
  u.push_back((int64_t(m.V) + t - 1) / t * C + int64_t(m.maxT) * C);
  for (int l = 0; l < m.L; ++l) u.push_back(12 * C * C / t + 7 * C / t + 6 * C);
  u.push_back(2 * C);
  return u;
}

int64_t replicated_params(const ModelConfig& m) {
  return int64_t(m.L) * 6 * m.C + int64_t(m.maxT) * m.C + 2 * int64_t(m.C);
}

TpComm comm_per_microbatch(const TpShape& x) {
  TpComm c;
  if (x.tp == 1) return c;
  const int64_t N = int64_t(x.Bm) * x.Tn, NCe = N * x.model.C * x.elem_bytes, L = x.model.L;
  const int64_t rerun = x.recompute == Recompute::full ? 1 : 0;  // layer forwards rerun in backward
  const int64_t ce = 3 * N * x.acc_bytes;                        // max, then sum-exp + target logit
  if (!x.sp) {
    c.all_reduce = NCe * (1 + 2 * L) + ce + NCe * (2 * L * rerun + 2 * L + 1);
    c.forward = NCe * (1 + 2 * L) + ce;
  } else {
    c.reduce_scatter = NCe * (1 + 2 * L + 2 * L * rerun + 2 * L + 1);
    c.all_gather = NCe * (2 * L + 1 + 2 * L * rerun + 4 * L + 1 + 1);
    c.all_reduce = ce;
    c.forward = NCe * (1 + 2 * L + 2 * L + 1) + ce;
  }
  c.backward = c.all_reduce + c.all_gather + c.reduce_scatter - c.forward;
  return c;
}

}  // namespace pb::tp
