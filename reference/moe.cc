#include "reference/moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <vector>

#include "harness/status.h"
#include "kernels/cpu/numeric.h"
#include "kernels/cpu/ops.h"

namespace pb {

namespace k = kernels;
using k::detail::load;
using k::detail::store;

// An expert's hidden width on a rank of tp (H: the activation's; Hin: the
// first projection's output, 2H for the llama family's gate|up).
int moe_hidden(const ModelConfig& m, int tp) { return (m.llama() ? m.ffn : 4 * m.C) / tp; }
int moe_hidden_in(const ModelConfig& m, int tp) { return (m.llama() ? 2 : 1) * moe_hidden(m, tp); }

int64_t moe_capacity(const MoeConfig& c, int64_t tokens) {
  const double cap = std::ceil(c.capacity_factor * double(tokens) * c.top_k / c.experts);
  return std::min<int64_t>(tokens, int64_t(cap));
}

int64_t moe_buffer_rows(const MoeConfig& c, int64_t N, int64_t scope_tokens) {
  return std::min<int64_t>(moe_capacity(c, scope_tokens > 0 ? scope_tokens : N), N);
}

int64_t moe_activation_bytes(const ModelConfig& m, int64_t N, int64_t scope_tokens, int e, int a, int ep, int tp,
                             bool on_device) {
  const int64_t E = m.moe.experts, K = m.moe.top_k, C = m.C, H = moe_hidden(m, tp), Hin = moe_hidden_in(m, tp);
  const int64_t rows = moe_buffer_rows(m.moe, N, scope_tokens);
  const int64_t rows_bytes = E * rows * (Hin + H + C) * e + (ep > 1 ? E * rows * C * e : 0);
  const int64_t routing = N * K * (4 + a + 4);  // choice, weight, slot (on a device: their copies there)
  if (on_device) return rows_bytes + routing;
  return N * E * a + routing + E * 4 + E * a + (ep > 1 ? E * 4 : 0) + rows_bytes;
}

void LocalMoeExchange::gather_routed(const double* mine, double* all, size_t n) const {
  std::copy(mine, mine + n, all);
}

void LocalMoeExchange::exchange_counts(const int32_t* count, int32_t* recv, int experts) const {
  std::copy(count, count + experts, recv);
}

// One rank owns every expert: expert e's rows are at e * rows on both sides.
void LocalMoeExchange::dispatch(void* dst, const void* src, const MoeRows& r) const {
  const size_t row = r.width * dtype_size(r.dtype);
  for (int e = 0; e < r.experts; ++e)
    r.copy(static_cast<char*>(dst) + size_t(e) * r.rows * row, static_cast<const char*>(src) + size_t(e) * r.rows * row,
           size_t(r.count[e]) * row);
}

void LocalMoeExchange::combine(void* dst, const void* src, const MoeRows& r, bool permute) const {
  const size_t row = r.width * dtype_size(r.dtype);
  for (int e = 0; e < r.experts; ++e) {
    const size_t n = size_t(r.count[e]), at = size_t(e) * r.rows;
    for (size_t j = 0; j < n; ++j)
      r.copy(static_cast<char*>(dst) + (at + (permute ? n - 1 - j : j)) * row,
             static_cast<const char*>(src) + (at + j) * row, row);
  }
}

template <class T>
MoeActs<T>::MoeActs(MemoryTracker* mt, const ModelConfig& m, int N, int64_t scope_tokens, int ep_size, int tp,
                    bool on_device) {
  const size_t E = size_t(m.moe.experts), K = size_t(m.moe.top_k), C = size_t(m.C), H = size_t(moe_hidden(m, tp)),
               Hin = size_t(moe_hidden_in(m, tp));
  cap = int(moe_capacity(m.moe, scope_tokens > 0 ? scope_tokens : N));
  rows = std::min(cap, N);
  const size_t all_rows = E * size_t(rows);
  const MemTag act = MemTag::activations;
  const Place route = on_device ? Place::host : Place::device;  // the routing state: where the host reads it
  probs = Buffer<A>(mt, act, size_t(N) * E, route);
  choice = Buffer<int32_t>(mt, act, size_t(N) * K, route);
  weight = Buffer<A>(mt, act, size_t(N) * K, route);
  slot = Buffer<int32_t>(mt, act, size_t(N) * K, route);
  count = Buffer<int32_t>(mt, act, E, route);
  fch = Buffer<T>(mt, act, all_rows * Hin);
  fchg = Buffer<T>(mt, act, all_rows * H);
  y = Buffer<T>(mt, act, all_rows * C);
  frac = Buffer<A>(mt, act, E, route);
  ep = ep_size;
  if (ep > 1) {
    recv = Buffer<int32_t>(mt, act, E, route);
    xr = Buffer<T>(mt, act, all_rows * C);
  }
  if (on_device) {
    choice_dev = Buffer<int32_t>(mt, act, size_t(N) * K);
    slot_dev = Buffer<int32_t>(mt, act, size_t(N) * K);
    weight_dev = Buffer<A>(mt, act, size_t(N) * K);
  }
}

template <class T>
int64_t MoeActs<T>::owner_rows() const {
  const Buffer<int32_t>& c = ep > 1 ? recv : count;
  return std::accumulate(c.data(), c.data() + c.size(), int64_t(0));
}

template <class T>
void MoeActs<T>::add_to(MoeLoad& l, int experts, int top_k) const {
  const int El = experts / ep;
  l.calls++;
  l.choices += int64_t(probs.size() / size_t(experts)) * top_k;
  l.dropped += dropped;
  l.sent_rows += sent_rows();
  l.owner_rows += owner_rows();
  l.expert_calls += El;
  for (int le = 0; le < El; ++le) l.max_expert_rows = std::max<int64_t>(l.max_expert_rows, expert_rows(le));
}

template <class T>
int MoeActs<T>::expert_rows(int le) const {
  if (ep == 1) return count[size_t(le)];
  const int El = int(count.size()) / ep;
  int n = 0;
  for (int r = 0; r < ep; ++r) n += recv[size_t(r) * El + le];
  return n;
}

template <class T>
int64_t MoeActs<T>::sent_rows() const {
  return std::accumulate(count.data(), count.data() + count.size(), int64_t(0));
}

namespace {
struct ScratchSizes {
  size_t logits, rowsC, rowsH, rowsHin, dp, dw, mm;
};
template <class T>
ScratchSizes sizes(const ModelConfig& m, int N, int64_t scope_tokens, int tp, bool on_device) {
  const size_t E = size_t(m.moe.experts), C = size_t(m.C);
  const int H = moe_hidden(m, tp), Hin = moe_hidden_in(m, tp);
  const size_t cap = size_t(moe_buffer_rows(m.moe, N, scope_tokens));
  const int rows = int(E * cap);
  const size_t mm = on_device ? 0
                              : std::max({k::matmul_workspace_floats<T>(N, m.C, m.moe.experts),
                                          k::matmul_workspace_floats<T>(rows, m.C, Hin),
                                          k::matmul_workspace_floats<T>(rows, H, m.C)});
  return {size_t(N) * E,  E * cap * C, E * cap * size_t(H), E * cap * size_t(Hin), size_t(N) * E,
          size_t(N) * size_t(m.moe.top_k), mm};
}
}  // namespace

template <class T>
MoeScratch<T>::MoeScratch(MemoryTracker* mt, const ModelConfig& m, int N, int64_t scope_tokens, int ep, int tp,
                          bool on_device) {
  const ScratchSizes z = sizes<T>(m, N, scope_tokens, tp, on_device);
  const MemTag ws = MemTag::workspace;
  logits = Buffer<T>(mt, ws, z.logits);
  xe = Buffer<T>(mt, ws, z.rowsC);
  dy = Buffer<T>(mt, ws, z.rowsC);
  dfchg = Buffer<T>(mt, ws, z.rowsH);
  dfch = Buffer<T>(mt, ws, z.rowsHin);
  dxe = Buffer<T>(mt, ws, z.rowsC);
  dp = Buffer<acc_t<T>>(mt, ws, z.dp, on_device ? Place::host : Place::device);
  dw = Buffer<acc_t<T>>(mt, ws, z.dw);
  if (on_device) {
    host_logits = Buffer<T>(mt, ws, z.logits, Place::host);
    host_dw = Buffer<acc_t<T>>(mt, ws, z.dw, Place::host);
  }
  if (z.mm) mm_ws = Buffer<float>(mt, ws, z.mm);
  if (ep > 1) {
    send = Buffer<T>(mt, ws, z.rowsC);
    recv = Buffer<T>(mt, ws, z.rowsC);
    rows = Buffer<T>(mt, ws, z.rowsC);
  }
}

template <class T>
int64_t MoeScratch<T>::bytes(const ModelConfig& m, int N, int64_t scope_tokens, int ep, int tp, bool on_device) {
  const ScratchSizes z = sizes<T>(m, N, scope_tokens, tp, on_device);
  return int64_t((z.logits + (ep > 1 ? 6 : 3) * z.rowsC + z.rowsH + z.rowsHin) * sizeof(T) +
                 ((on_device ? 0 : z.dp) + z.dw) * sizeof(acc_t<T>) + z.mm * sizeof(float));
}

template <class T>
MoeMlp<T>::MoeMlp(const ParamLayout& layout, int N, MoeScope scope, const kernels::DeviceOps<T>& ops)
    : ops_(&ops), c_(layout.model().moe), o_(layout.moe_block()), scope_(scope),
      x_(scope.exchange ? scope.exchange : std::make_shared<LocalMoeExchange>()), N_(N), C_(layout.model().C),
      E_(c_.experts), k_(c_.top_k), ep_(scope.ep_size()), El_(E_ / ep_), tp_(layout.tp()),
      H_(moe_hidden(layout.model(), layout.tp())), Hin_(moe_hidden_in(layout.model(), layout.tp())),
      swiglu_(layout.model().llama()),
      mismatch_(swiglu_ && tp_ > 1 && scope.has(MoeFault::expert_gate_up_mismatch)),
      scope_tokens_(scope.tokens(c_, N)) {
  require(E_ > 0, "moe: the model has no experts");
  require(scope.tp_size() == tp_, "moe: a layout of tp" + std::to_string(tp_) + " needs its tp group, got " +
                                      std::to_string(scope.tp_size()) + " ranks");
  require(E_ % ep_ == 0, "moe: ep" + std::to_string(ep_) + " does not divide " + std::to_string(E_) + " experts");
}

template <class T>
MoeRows MoeMlp<T>::rows_of(const MoeActs<T>& a, MoeScratch<T>& s) const {
  MoeRows r;
  r.count = a.count.data();
  r.recv = a.recv.data();
  r.experts = E_;
  r.rows = size_t(a.rows);
  r.width = size_t(C_);
  r.dtype = dtype_of<T>();
  r.send = s.send.data();
  r.staged = s.recv.data();
  r.copy = [ops = ops_](void* dst, const void* src, size_t bytes) { ops->copy(dst, src, bytes); };
  return r;
}

template <class T>
void MoeMlp<T>::tp_sum_rows(T* rows, const MoeActs<T>& a, size_t stride) const {
  for (int le = 0; le < El_; ++le) {  // every tp rank has the same routing: the same calls
    const size_t n = size_t(a.expert_rows(le)) * size_t(C_);
    if (n == 0) continue;
    T* r = rows + size_t(le) * stride * size_t(C_);
    x_->tp_sum(r, n, dtype_of<T>());
  }
}

template <class T>
void MoeMlp<T>::reverse_up(T* gu, int rows, T* tmp) const {
  const size_t W = size_t(Hin_), H = size_t(H_), n = size_t(rows);
  for (size_t j = 0; j < H / 2; ++j) {
    T* a = gu + H + j;
    T* b = gu + H + (H - 1 - j);
    ops_->copy_rows(tmp, 1, a, W, 1, n);
    ops_->copy_rows(a, W, b, W, 1, n);
    ops_->copy_rows(b, W, tmp, 1, 1, n);
  }
}

template <class T>
void MoeMlp<T>::gather(T* xe, const T* x, const MoeActs<T>& a) const {
  ops_->moe_scatter_rows(xe, x, a.dchoice(), a.dslot(), N_, k_, C_, a.rows);
}

template <class T>
void MoeMlp<T>::route(MoeActs<T>& a, const T* logits) const {
  const int N = N_, E = E_, K = k_;
  std::vector<A> P(size_t(E), A(0));
  std::vector<double> routed(size_t(K) * E, 0.0);  // (choice rank, expert) pairs here
  for (int n = 0; n < N; ++n) {
    const T* lg = logits + size_t(n) * E;
    A* p = a.probs.data() + size_t(n) * E;
    A mx = -std::numeric_limits<A>::infinity();
    for (int e = 0; e < E; ++e) mx = std::max(mx, load(lg[e]));
    A sum = 0;
    for (int e = 0; e < E; ++e) sum += (p[e] = std::exp(load(lg[e]) - mx));
    for (int e = 0; e < E; ++e) p[e] /= sum;
    for (int e = 0; e < E; ++e) P[size_t(e)] += p[e];
    // Top-k, best first; a tie goes to the lower expert index (strict >).
    int32_t* ch = a.choice.data() + size_t(n) * K;
    A S = 0;
    for (int j = 0; j < K; ++j) {
      int best = -1;
      for (int e = 0; e < E; ++e) {
        bool taken = false;
        for (int i = 0; i < j; ++i) taken |= ch[i] == e;
        if (!taken && (best < 0 || p[e] > p[best])) best = e;
      }
      ch[j] = best;
      S += p[best];
      routed[size_t(j) * E + best] += 1;
    }
    for (int j = 0; j < K; ++j) a.weight[size_t(n) * K + j] = p[ch[j]] / S;
  }
  // Where this rank's pairs start in the scope's admission order (choice rank
  // first, then token order, ranks in group order): the counts of every
  // earlier choice rank on every rank, and of this choice rank on earlier ranks.
  std::vector<double> base(size_t(K) * E, 0.0), total(size_t(E), 0.0), Ps(P.size(), 0.0);
  for (int e = 0; e < E; ++e) Ps[size_t(e)] = double(P[size_t(e)]);
  const bool local_cap = scope_.has(MoeFault::local_capacity), aux_here = scope_.has(MoeFault::aux_per_rank);
  if (scope_.shared(c_) && !scope_.order) {
    const int R = x_->capacity_ranks(), me = x_->capacity_rank();
    std::vector<double> all(size_t(R) * K * E);
    x_->gather_routed(routed.data(), all.data(), routed.size());
    for (int j = 0; j < K; ++j)
      for (int e = 0; e < E; ++e) {
        double before = 0;
        for (int r = 0; r < R; ++r) {
          const double h = all[(size_t(r) * K + j) * E + e];
          if (r < me) before += h;
          total[size_t(e)] += h;
        }
        base[size_t(j) * E + e] = before;
        for (int i = 0; i < j; ++i)
          for (int r = 0; r < R; ++r) base[size_t(j) * E + e] += all[(size_t(r) * K + i) * E + e];
      }
    x_->sum_probs(Ps.data(), Ps.size());
  }
  // Context parallel (scope_.order): every rank's choices, and each of this
  // rank's pairs' place: the scope's pairs of earlier choice ranks for its
  // expert, and of its choice rank on tokens earlier in the microbatch.
  std::vector<double> ahead;
  if (scope_.shared(c_) && scope_.order) {
    const int R = x_->capacity_ranks(), me = x_->capacity_rank();
    const std::vector<int64_t>& id = *scope_.order;
    require(id.size() == size_t(R) * N, "moe: the scope's token order does not cover its ranks' tokens");
    std::vector<double> mine(size_t(N) * K), all(size_t(R) * N * K), jtotal(size_t(K) * E, 0.0);
    for (size_t i = 0; i < mine.size(); ++i) mine[i] = a.choice[i];
    x_->gather_routed(mine.data(), all.data(), mine.size());
    for (size_t i = 0; i < all.size(); ++i) jtotal[(i % size_t(K)) * E + size_t(all[i])] += 1;
    std::fill(total.begin(), total.end(), 0.0);
    for (int j = 0; j < K; ++j)
      for (int e = 0; e < E; ++e) total[size_t(e)] += jtotal[size_t(j) * E + e];
    ahead.assign(size_t(N) * K, 0.0);
    for (int n = 0; n < N; ++n) {
      const int64_t at = id[size_t(me) * N + n];
      for (int j = 0; j < K; ++j) {
        const int e = a.choice[size_t(n) * K + j];
        double h = 0;
        for (int i = 0; i < j; ++i) h += jtotal[size_t(i) * E + e];
        for (size_t t = 0; t < size_t(R) * N; ++t) h += all[t * K + j] == e && id[t] < at;
        ahead[size_t(n) * K + j] = h;
      }
    }
    x_->sum_probs(Ps.data(), Ps.size());
  }
  if (!scope_.shared(c_) || local_cap || aux_here) {  // this rank's pairs alone (the faults: for admission or aux)
    std::vector<double> lbase(size_t(K) * E, 0.0), ltotal(size_t(E), 0.0);
    for (int j = 0; j < K; ++j)
      for (int e = 0; e < E; ++e) {
        for (int i = 0; i < j; ++i) lbase[size_t(j) * E + e] += routed[size_t(i) * E + e];
        ltotal[size_t(e)] += routed[size_t(j) * E + e];
      }
    if (!scope_.shared(c_) || local_cap) base = lbase;
    if (!scope_.shared(c_) || aux_here) {
      total = ltotal;
      for (int e = 0; e < E; ++e) Ps[size_t(e)] = double(P[size_t(e)]);
    }
  }
  const int64_t cap_here = local_cap ? std::min<int64_t>(a.cap, moe_capacity(c_, N)) : a.cap;
  // Admission: first choices of every token in token order, then second choices, ...
  std::fill(a.count.data(), a.count.data() + E, 0);
  a.dropped = 0;
  std::vector<double> seen(size_t(K) * E, 0.0);
  for (int j = 0; j < K; ++j)
    for (int n = 0; n < N; ++n) {
      const int e = a.choice[size_t(n) * K + j];
      double pos = base[size_t(j) * E + e] + seen[size_t(j) * E + e]++;
      if (!ahead.empty() && !local_cap) pos = ahead[size_t(n) * K + j];
      const bool in = pos < double(cap_here);
      a.slot[size_t(n) * K + j] = in ? a.count[size_t(e)]++ : -1;
      a.dropped += !in;
    }
  // Load balancing over the scope: coef * E * sum_e f_e P_e.
  double aux = 0;
  const double toks = double(aux_here ? N : scope_tokens_);
  for (int e = 0; e < E; ++e) {
    a.frac[size_t(e)] = A(total[size_t(e)] / (toks * K));
    aux += double(a.frac[size_t(e)]) * (Ps[size_t(e)] / toks);
  }
  a.aux = c_.aux_loss_coef * E * aux;
}

template <class T>
void MoeMlp<T>::forward(MoeActs<T>& a, T* out, const T* x, const T* u, MoeScratch<T>& s, const T* ue) const {
  const int N = N_, C = C_, E = E_, K = k_, cap = a.rows;
  float* ws = s.mm_ws.data();
  // Router: logits (N, E); the routing on the host (on a device: the logits
  // read back, the choices, slots and weights sent up for the row ops).
  ops_->matmul_forward(s.logits.data(), x, u + o_.router_w, static_cast<const T*>(nullptr), N, C, E, ws);
  const T* logits = s.logits.data();
  if (!ops_->is_host()) {
    ops_->to_host(s.host_logits.data(), logits, size_t(N) * E * sizeof(T));
    logits = s.host_logits.data();
  }
  route(a, logits);
  if (!ops_->is_host()) {
    const size_t nk = size_t(N) * K;
    ops_->to_device(a.choice_dev.data(), a.choice.data(), nk * sizeof(int32_t));
    ops_->to_device(a.slot_dev.data(), a.slot.data(), nk * sizeof(int32_t));
    ops_->to_device(a.weight_dev.data(), a.weight.data(), nk * sizeof(A));
  }
  // Each expert's FFN on its admitted rows (expert parallel: on its owner,
  // over every source's rows, the outputs sent back to y).
  gather(s.xe.data(), x, a);
  const T* ex = ue ? ue : u + o_.expert0;
  const T* xin = s.xe.data();
  T* yout = a.y.data();
  size_t stride = size_t(cap);  // rows per expert in the expert-major buffers
  if (ep_ > 1) {
    x_->exchange_counts(a.count.data(), a.recv.data(), E_);
    x_->dispatch(a.xr.data(), s.xe.data(), rows_of(a, s));
    xin = a.xr.data();
    yout = s.rows.data();
    stride *= size_t(ep_);
  }
  for (int le = 0; le < El_; ++le) {
    const int rows = a.expert_rows(le);
    if (rows == 0) continue;
    const size_t r0 = size_t(le) * stride;
    const T* w = expert(ex, le);
    const int H = H_, Hin = Hin_;
    const T* nb = nullptr;
    ops_->matmul_forward(a.fch.data() + r0 * Hin, xin + r0 * C, w + o_.fc_w, swiglu_ ? nb : w + o_.fc_b, rows, C, Hin,
                         ws);
    if (mismatch_) reverse_up(a.fch.data() + r0 * Hin, rows, a.fchg.data() + r0 * H);  // (fchg: written next)
    if (swiglu_) ops_->swiglu_forward(a.fchg.data() + r0 * H, a.fch.data() + r0 * Hin, rows, H);
    else ops_->gelu_forward(a.fchg.data() + r0 * H, a.fch.data() + r0 * H, size_t(rows) * H);
    // Tensor parallel: partial sums over the hidden split; the bias after their sum.
    ops_->matmul_forward(yout + r0 * C, a.fchg.data() + r0 * H, w + o_.fcproj_w,
                         tp_ > 1 || swiglu_ ? nb : w + o_.fcproj_b, rows, H, C, ws);
  }
  if (tp_ > 1) tp_sum_rows(yout, a, stride);
  if (tp_ > 1 && !swiglu_) {  // c_proj's bias once, after the sum (the llama family has none)
    for (int le = 0; le < El_; ++le)
      ops_->add_rows(yout + size_t(le) * stride * C, expert(ex, le) + o_.fcproj_b, static_cast<const int32_t*>(nullptr),
                     a.expert_rows(le), C);
  }
  if (ep_ > 1) x_->combine(a.y.data(), s.rows.data(), rows_of(a, s), scope_.has(MoeFault::ep_combine_permuted));
  // Combine: out[n] = sum over admitted choices (best first) of weight * y.
  ops_->moe_combine(out, a.y.data(), a.dchoice(), a.dslot(), a.dweight(), N, K, C, cap, false);
}

template <class T>
void MoeMlp<T>::backward(T* dx, T* du, const T* dout, const T* x, const MoeActs<T>& a, const T* u,
                         double aux_weight, MoeScratch<T>& s, const T* ue, T* due) const {
  const int N = N_, C = C_, E = E_, K = k_, cap = a.rows;
  float* ws = s.mm_ws.data();
  // Combine: dy = weight * dout; d weight = dout . y (on the device); through
  // the renormalization w_j = p_j / S to the chosen probabilities (host).
  ops_->zero(s.dy.data(), s.dy.size() * sizeof(T));
  ops_->moe_combine_backward(s.dy.data(), s.dw.data(), dout, a.y.data(), a.dchoice(), a.dslot(), a.dweight(), N, K,
                             C, cap);
  const A* dw = s.dw.data();
  if (!ops_->is_host()) {
    ops_->to_host(s.host_dw.data(), dw, size_t(N) * K * sizeof(A));
    dw = s.host_dw.data();
  }
  A* dp = s.dp.data();
  std::fill(dp, dp + size_t(N) * E, A(0));
  if (!scope_.has(MoeFault::router_grad_missing))
    for (int n = 0; n < N; ++n) {
      A S = 0, wdw = 0;
      for (int j = 0; j < K; ++j) S += a.probs[size_t(n) * E + a.choice[size_t(n) * K + j]];
      for (int j = 0; j < K; ++j) wdw += dw[size_t(n) * K + j] * a.weight[size_t(n) * K + j];
      for (int j = 0; j < K; ++j)
        dp[size_t(n) * E + a.choice[size_t(n) * K + j]] += (dw[size_t(n) * K + j] - wdw) / S;
    }
  // Experts, each on its admitted rows (expert parallel: the output
  // gradients to the owner, the input gradients back).
  const T* ex = ue ? ue : u + o_.expert0;
  T* dex = due ? due : du + o_.expert0;
  const T* xin = s.xe.data();
  const T* dyin = s.dy.data();
  T* dxout = s.dxe.data();
  size_t stride = size_t(cap);
  if (ep_ > 1) {
    x_->dispatch(s.rows.data(), s.dy.data(), rows_of(a, s));
    xin = a.xr.data();
    dyin = s.rows.data();
    dxout = s.xe.data();
    stride *= size_t(ep_);
  } else {
    gather(s.xe.data(), x, a);
  }
  ops_->zero(s.dfchg.data(), s.dfchg.size() * sizeof(T));
  ops_->zero(s.dfch.data(), s.dfch.size() * sizeof(T));
  ops_->zero(dxout, s.dxe.size() * sizeof(T));
  for (int le = 0; le < El_; ++le) {
    const int rows = a.expert_rows(le);
    if (rows == 0) continue;
    const size_t r0 = size_t(le) * stride;
    const T* w = expert(ex, le);
    T* dw_e = expert(dex, le);
    const int H = H_, Hin = Hin_;
    T* nb = nullptr;
    ops_->matmul_backward(s.dfchg.data() + r0 * H, dw_e + o_.fcproj_w, swiglu_ ? nb : dw_e + o_.fcproj_b,
                          dyin + r0 * C, a.fchg.data() + r0 * H, w + o_.fcproj_w, rows, H, C, ws);
    if (swiglu_) ops_->swiglu_backward(s.dfch.data() + r0 * Hin, a.fch.data() + r0 * Hin, s.dfchg.data() + r0 * H, rows, H);
    else ops_->gelu_backward(s.dfch.data() + r0 * H, a.fch.data() + r0 * H, s.dfchg.data() + r0 * H, size_t(rows) * H);
    if (mismatch_) reverse_up(s.dfch.data() + r0 * Hin, rows, s.dfchg.data() + r0 * H);  // (dfchg: read already)
    ops_->matmul_backward(dxout + r0 * C, dw_e + o_.fc_w, swiglu_ ? nb : dw_e + o_.fc_b, s.dfch.data() + r0 * Hin,
                          xin + r0 * C, w + o_.fc_w, rows, C, Hin, ws);
  }
  if (tp_ > 1) tp_sum_rows(dxout, a, stride);  // the input gradients' partial sums over the hidden split
  if (ep_ > 1) x_->combine(s.dxe.data(), dxout, rows_of(a, s), false);
  // Back to the tokens, best choice first.
  ops_->moe_combine(dx, s.dxe.data(), a.dchoice(), a.dslot(), static_cast<const A*>(nullptr), N, K, C, cap, true);
  // Router: the load-balancing term's gradient (f_e held constant), then the
  // softmax backward (host), then the router GEMM.
  const A g_aux = A(aux_weight * c_.aux_loss_coef * E / double(scope_tokens_));  // (aux_per_rank: the scope's too)
  T* dlogits = ops_->is_host() ? s.logits.data() : s.host_logits.data();
  for (int n = 0; n < N; ++n) {
    A* d = dp + size_t(n) * E;
    const A* p = a.probs.data() + size_t(n) * E;
    for (int e = 0; e < E; ++e) d[e] += g_aux * a.frac[size_t(e)];
    A dot = 0;
    for (int e = 0; e < E; ++e) dot += p[e] * d[e];
    T* dl = dlogits + size_t(n) * E;
    for (int e = 0; e < E; ++e) dl[e] = store<T>(p[e] * (d[e] - dot));
  }
  if (!ops_->is_host()) ops_->to_device(s.logits.data(), dlogits, size_t(N) * E * sizeof(T));
  ops_->matmul_backward(dx, du + o_.router_w, static_cast<T*>(nullptr), s.logits.data(), x, u + o_.router_w, N, C,
                        E, ws);
}

#define PB_INSTANTIATE(T)        \
  template struct MoeActs<T>;    \
  template struct MoeScratch<T>; \
  template class MoeMlp<T>;
PB_INSTANTIATE(double)
PB_INSTANTIATE(float)
PB_INSTANTIATE(bf16)
#undef PB_INSTANTIATE

}  // namespace pb
