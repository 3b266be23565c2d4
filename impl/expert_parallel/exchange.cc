#include "impl/expert_parallel/exchange.h"

#include <vector>

#include "harness/status.h"

namespace pb::ep {

namespace {
char* at(void* p, size_t bytes) { return static_cast<char*>(p) + bytes; }
const char* at(const void* p, size_t bytes) { return static_cast<const char*>(p) + bytes; }
}  // namespace

CommMoeExchange::CommMoeExchange(Communicator* capacity, Communicator* ep, Communicator* tp)
    : capacity_(capacity), ep_(ep), tp_(tp) {}

void CommMoeExchange::gather_routed(const double* mine, double* all, size_t n) const {
  capacity_->all_gather(mine, all, n, DType::f64);
}

void CommMoeExchange::sum_probs(double* p, size_t n) const { capacity_->all_reduce(p, p, n, DType::f64); }

void CommMoeExchange::exchange_counts(const int32_t* count, int32_t* recv, int experts) const {
  const size_t E = size_t(experts);
  std::vector<double> out(E), in(E);
  for (size_t e = 0; e < E; ++e) out[e] = count[e];  // expert-major = owner-major
  ep_->all_to_all(out.data(), in.data(), E / size_t(ep_size()), DType::f64);
  for (size_t e = 0; e < E; ++e) recv[e] = int32_t(in[e]);
}

// Rows of width C: this rank's, expert e's count[e] at e * rows (E-major, so
// owner-major), packed and sent; an owner's arrive source-major and are put
// expert-major, local expert le's at le * ep * rows.
void CommMoeExchange::dispatch(void* dst, const void* src, const MoeRows& r) const {
  const int ep = ep_size(), El = r.experts / ep;
  const size_t C = r.width, b = dtype_size(r.dtype), orows = r.rows * size_t(ep);
  std::vector<size_t> sc(size_t(ep), 0), rc(size_t(ep), 0);
  size_t off = 0;
  for (int e = 0; e < r.experts; ++e) {
    const size_t n = size_t(r.count[e]);
    r.copy(at(r.send, off * C * b), at(src, size_t(e) * r.rows * C * b), n * C * b);
    off += n;
    sc[size_t(e / El)] += n * C;
  }
  for (int s = 0; s < ep; ++s)
    for (int le = 0; le < El; ++le) rc[size_t(s)] += size_t(r.recv[s * El + le]) * C;
  ep_->all_to_all_v(r.send, sc, r.staged, rc, r.dtype);
  std::vector<size_t> fill(size_t(El), 0);
  size_t in = 0;
  for (int s = 0; s < ep; ++s)
    for (int le = 0; le < El; ++le) {
      const size_t n = size_t(r.recv[s * El + le]);
      require(fill[size_t(le)] + n <= orows, "moe: an expert received more rows than its buffer holds");
      r.copy(at(dst, (size_t(le) * orows + fill[size_t(le)]) * C * b), at(r.staged, in * C * b), n * C * b);
      fill[size_t(le)] += n;
      in += n;
    }
}

// The reverse of dispatch: the owner's rows, expert-major, back to their
// sources, landing at e * rows + slot.
void CommMoeExchange::combine(void* dst, const void* src, const MoeRows& r, bool permute) const {
  const int ep = ep_size(), El = r.experts / ep;
  const size_t C = r.width, b = dtype_size(r.dtype), orows = r.rows * size_t(ep);
  std::vector<size_t> sc(size_t(ep), 0), rc(size_t(ep), 0), fill(size_t(El), 0);
  size_t out = 0;
  for (int s = 0; s < ep; ++s)
    for (int le = 0; le < El; ++le) {
      const size_t n = size_t(r.recv[s * El + le]);
      r.copy(at(r.send, out * C * b), at(src, (size_t(le) * orows + fill[size_t(le)]) * C * b), n * C * b);
      fill[size_t(le)] += n;
      out += n;
      sc[size_t(s)] += n * C;
    }
  for (int e = 0; e < r.experts; ++e) rc[size_t(e / El)] += size_t(r.count[e]) * C;
  ep_->all_to_all_v(r.send, sc, r.staged, rc, r.dtype);
  size_t in = 0;
  for (int e = 0; e < r.experts; ++e) {
    const size_t n = size_t(r.count[e]);
    if (!permute) {
      r.copy(at(dst, size_t(e) * r.rows * C * b), at(r.staged, in * C * b), n * C * b);
    } else {
      for (size_t j = 0; j < n; ++j)
        r.copy(at(dst, (size_t(e) * r.rows + n - 1 - j) * C * b), at(r.staged, (in + j) * C * b), C * b);
    }
    in += n;
  }
}

void CommMoeExchange::tp_sum(void* rows, size_t n, DType t) const { tp_->all_reduce(rows, rows, n, t); }

MoeScope moe_scope(Communicator* capacity, Communicator* ep, Communicator* tp, std::set<MoeFault> faults) {
  MoeScope s;
  s.faults = std::move(faults);
  if (capacity || ep || tp) s.exchange = std::make_shared<CommMoeExchange>(capacity, ep, tp);
  return s;
}

}  // namespace pb::ep
